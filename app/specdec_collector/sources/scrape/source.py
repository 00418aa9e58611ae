"""The scrape source: the collector reads each target's `/metrics` itself.

At a start it reads every target's baseline (opening the connections of those scrapes while
the targets are checked, so that the requests leave the moment the window is written); at a
stop, every target's end. The samples between are the background sampler's.
"""

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from specdec_collector.core.readings import TargetReading
from specdec_collector.core.targets import Target
from specdec_collector.exceptions import InvalidInput
from specdec_collector.sources.protocol import Chain, StartCheck, StartRead, TimelinePoint
from specdec_collector.sources.scrape import (
    Allowed,
    Pin,
    Refused,
    ScrapeClient,
    ScrapeConfig,
    pins,
    scrape_all,
)


class ScrapeSource:
    """Scrapes through `client`, as `config` says."""

    def __init__(self, client: ScrapeClient, config: ScrapeConfig) -> None:
        self.client = client
        self.config = config

    def targets(self, targets: Sequence[Target]) -> list[Target]:
        return list(targets)

    async def check_start(self, start: StartCheck) -> StartRead:
        body, targets = start.body, start.targets
        if body.at is not None:
            raise InvalidInput(
                ["body", "at"],
                "only a window read from Prometheus (source prometheus) may "
                "start in the past: a scraped window starts now",
            )
        for index, target in enumerate(targets):
            if target.selector is not None:
                raise InvalidInput(
                    ["body", "targets", index],
                    "a selector names a target of a window read "
                    "from Prometheus (source prometheus)",
                )
        found = await pins(
            targets, self.config, self._connecting_ahead(start.openings), team=start.team
        )
        for index, pinned in enumerate(found):
            if isinstance(pinned, Refused):
                raise InvalidInput(
                    ["body", "targets", index],
                    f"target {index} ({targets[index].name}) is refused: {pinned}",
                )
        # The baselines' requests go where the check found (and connected ahead to).
        where = [p if isinstance(p, Pin) else None for p in found]

        async def read() -> list[TargetReading]:
            return await scrape_all(self.client, targets, self.config, start.team, where)

        return read

    def _connecting_ahead(self, openings: "list[asyncio.Task[None]]") -> Allowed:
        """Open the connections of the start's scrapes as its targets are checked (into
        `openings`), so the scrapes of servers new to the collector go out at once after the
        window is written. A connection is opened once, and nothing is asked of the server: a
        start that is refused, or a retry, sends no request (`AiohttpTransport.connect_ahead`)."""
        client = self.client
        timeout_s = self.config.timeout_s

        def allowed(url: str, extensions: dict[str, Any]) -> None:
            opening = client.connect_ahead(url, extensions, timeout_s)
            if opening is not None:
                openings.append(opening)

        return allowed

    def check_stop(self, at: datetime | None) -> None:
        if at is not None:
            raise InvalidInput(
                ["body", "at"], "only a window read from Prometheus may stop in the past"
            )

    async def read_stop(
        self, targets: Sequence[Target], start: datetime, end: datetime, team: str, past: bool
    ) -> list[Chain]:
        return [Chain(after) for after in await scrape_all(self.client, targets, self.config, team)]

    @property
    def timeout_s(self) -> float:
        """The longest one scrape takes."""
        return self.config.timeout_s

    async def read_samples(self, targets: Sequence[Target], team: str) -> list[TargetReading]:
        """A sample of every target, read now (the background sampler's)."""
        return await scrape_all(self.client, targets, self.config, team)

    async def read_open(
        self, targets: Sequence[Target], start: datetime
    ) -> list[list[TimelinePoint]] | None:
        return None
