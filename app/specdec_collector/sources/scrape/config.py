"""How scrapes are done: timeout, size caps, where they may connect, how names resolve."""

import asyncio
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from specdec_collector.config import Settings
from specdec_collector.core.exposition import ExtractionLimits
from specdec_collector.core.targets import TargetPolicy
from specdec_collector.sources.scrape.caches import EndpointCaches
from specdec_collector.sources.scrape.resolver import SystemResolver

# Above this size an answer is read off the event loop (reading it costs more than the thread
# hop; below it, the hop would cost more) and needs one of the few slots for large answers.
# Real vLLM answers are below it.
OFF_LOOP_BYTES = 1024 * 1024
LARGE_ANSWERS_AT_ONCE = 4


Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class ScrapeConfig:
    """How scrapes are done: timeout, size cap, where they may connect, how names resolve."""

    timeout_s: float
    max_bytes: int
    policy: TargetPolicy = field(default_factory=TargetPolicy)
    # Its own threads, a few lookups per team at once (see `sources.scrape.resolver`).
    resolve: Resolver = field(default_factory=SystemResolver)
    # Read once, as httpx reads them when the client is made: urllib reads the whole
    # environment on every call, once per target of a fan-out.
    proxies: dict[str, str] = field(default_factory=urllib.request.getproxies)
    limits: ExtractionLimits = field(default_factory=ExtractionLimits)
    # Answers past OFF_LOOP_BYTES read at once, by all windows: a few hostile targets answering
    # 16 MiB each cannot make the process hold hundreds of them (see `_LargeAnswerSlot`).
    large_answers: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(LARGE_ANSWERS_AT_ONCE)
    )
    # Each endpoint's extraction cache, shared by the service's starts, stops and sampler.
    caches: EndpointCaches = field(default_factory=EndpointCaches)

    @classmethod
    def from_settings(cls, settings: Settings) -> "ScrapeConfig":
        """The configuration the settings describe."""
        return cls(
            timeout_s=settings.scrape_timeout_s,
            max_bytes=settings.max_metrics_bytes,
            policy=TargetPolicy.parse(settings.allowed_targets),
            limits=ExtractionLimits(
                max_series=settings.max_series_per_target,
                max_label_chars=settings.max_series_label_chars,
            ),
        )
