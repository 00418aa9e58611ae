"""One scrape of one target: GET `/metrics` with a timeout and a size cap.

`scrape_target` never raises for a target's fault: it returns a `ScrapeOutcome` whose
`series` holds the spec-decode series read, or whose `error` holds the AISBench error text.
"""

import asyncio
import logging
import ssl
import time
import traceback
import urllib.request
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from app.config import Settings
from app.metrics import SCRAPE_ERRORS, SCRAPE_SECONDS
from app.models import utcnow
from app.promtext import ExtractionError, ExtractionLimits, Series, extract_spec_decode
from app.resolver import RESOLVING_FOR, SystemResolver
from app.safetext import safe_error_text
from app.targets import Target, TargetPolicy, is_ip

logger = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class ScrapeConfig:
    """How scrapes are done: timeout, size cap, where they may connect, how names resolve."""

    timeout_s: float
    max_bytes: int
    policy: TargetPolicy = field(default_factory=TargetPolicy)
    # Its own threads, a few lookups per team at once (see `app.resolver`).
    resolve: Resolver = field(default_factory=SystemResolver)
    # Read once, as httpx reads them when the client is made: urllib reads the whole
    # environment on every call, which was a tenth of a fan-out's CPU.
    proxies: dict[str, str] = field(default_factory=urllib.request.getproxies)
    limits: ExtractionLimits = field(default_factory=ExtractionLimits)
    # Answers past OFF_LOOP_BYTES read at once, by all windows: a few hostile targets answering
    # 16 MiB each cannot make the process hold hundreds of them (see `_LargeAnswerSlot`).
    large_answers: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(LARGE_ANSWERS_AT_ONCE)
    )

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


class Refused(Exception):
    """The policy does not let the collector connect to this target."""


class _Unresolved(Exception):
    pass


def _proxy_route(target: Target, proxies: dict[str, str]) -> str:
    """`proxied`, `bypassed` (a proxy is set but NO_PROXY names the host) or `direct`."""
    if urlsplit(target.url).scheme not in proxies:
        return "direct"
    # What `proxy_bypass` does on Linux, given the proxies read once (typeshed omits it).
    bypassed = urllib.request.proxy_bypass_environment(target.host, proxies)  # type: ignore[attr-defined]
    return "bypassed" if bypassed else "proxied"


async def pin(target: Target, config: ScrapeConfig) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The URL, headers and request extensions that reach the address the policy checked.

    The host name is resolved once and every address checked; the request then goes to the
    first address, with the original `Host` (and TLS server name), so a DNS answer that
    changes between the check and the connection cannot redirect it. Through an HTTP proxy
    the proxy resolves names: only IP literals and the name rules are checked there. A host
    that NO_PROXY exempts from a configured proxy is checked but keeps its name in the URL
    (httpx would send a rewritten address through the proxy).
    """
    headers = dict(target.headers)
    route = _proxy_route(target, config.proxies)
    named = config.policy.metadata_refusal(target.host)
    if named is not None:  # before resolving: such a name may not even resolve here
        raise Refused(named)
    if is_ip(target.host):
        addresses = [target.host]
    elif route == "proxied":
        reason = config.policy.name_refusal(target.host)
        if reason is not None:
            raise Refused(reason)
        return target.url, headers, {}
    else:
        try:
            addresses = await config.resolve(target.host, target.port)
        except OSError as exc:
            raise _Unresolved(f"cannot resolve {target.host}: {exc}") from None
        if not addresses:
            raise _Unresolved(f"cannot resolve {target.host}: no address")
    for address in addresses:
        reason = config.policy.refusal(target.host, address)
        if reason is not None:
            raise Refused(reason)
    if is_ip(target.host) or route == "bypassed":
        return target.url, headers, {}
    parts = urlsplit(target.url)
    address = addresses[0]
    netloc = f"[{address}]:{target.port}" if ":" in address else f"{address}:{target.port}"
    headers["Host"] = parts.netloc
    extensions: dict[str, Any] = {}
    if parts.scheme == "https":
        extensions["sni_hostname"] = target.host
    return urlunsplit(parts._replace(netloc=netloc)), headers, extensions


async def refusals(targets: Sequence[Target], config: ScrapeConfig) -> list[str | None]:
    """Why each target may not be scraped, or None; a name that does not resolve is not refused."""

    async def check(target: Target) -> str | None:
        try:
            async with asyncio.timeout(config.timeout_s):
                await pin(target, config)
        except Refused as exc:
            return str(exc)
        except Exception:
            # Unresolved, slow to resolve, or anything else: not refused; its scrape says why.
            return None
        return None

    return list(await asyncio.gather(*(check(target) for target in targets)))


# Ask for the classic text format: every vLLM version serves it, and OpenMetrics answers
# (some proxies rewrite the negotiation) are read by the same extraction.
ACCEPT = "text/plain;version=0.0.4;q=1.0,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
# gzip only, decoded here: httpx's own decoders have no output limit per chunk.
ACCEPT_ENCODING = "gzip, identity"


class ScrapeErrorKind(StrEnum):
    """Why a scrape failed; the value is the `reason` label of `specdec_scrape_errors_total`."""

    HTTP_STATUS = "http_status"  # the endpoint answered, but not 200
    TIMEOUT = "timeout"
    REFUSED = "refused"  # the target policy does not allow the address
    DNS = "dns"
    TOO_LARGE = "too_large"
    NOT_PROMETHEUS = "not_prometheus"  # an HTML page (a login page, a proxy's error page)
    CONNECT = "connect"
    INVALID_PAYLOAD = "invalid_payload"  # not UTF-8, bad gzip, cut off, malformed, not a count
    TRANSPORT = "transport"  # any other network or protocol failure
    INTERNAL = "internal"  # a fault of the collector's own: the scrape is `na`, the stop closes
    WRONG_ENDPOINT = "wrong_endpoint"  # a server's other endpoint: the answer says which to use


@dataclass(frozen=True, slots=True)
class ScrapeOutcome:
    """What one scrape produced: the series, or the kind and AISBench text of its error; and
    when it finished."""

    target: Target
    taken_at: datetime
    series: Series | None = None
    error: str | None = None
    kind: ScrapeErrorKind | None = None


def failure(target: Target, kind: ScrapeErrorKind, detail: str) -> ScrapeOutcome:
    """A failed scrape, its error text as AISBench words it (`detail` says what happened).

    Every error text passes through here: a configured header value never appears in it, and
    it is one bounded line without control characters, whatever the target answered.
    """
    if kind is ScrapeErrorKind.HTTP_STATUS:
        error = f"Metrics endpoint returned HTTP {detail}"
    else:
        error = f"Failed to fetch metrics from {target.url}: {detail}"
    return ScrapeOutcome(target, utcnow(), error=safe_error_text(error, target.headers), kind=kind)


class _TooLarge(Exception):
    pass


class _BadPayload(Exception):
    pass


class OriginPools(httpx.AsyncBaseTransport):
    """A small connection pool per origin (scheme, host, port), made on first use.

    httpcore's pool looks at every connection it holds for every request it places, so one
    pool for the connections of N targets costs O(N) per request and O(N²) per fan-out. With
    a pool per origin each request looks at its own target's one or two connections: CPU per
    request at 64 targets went from 2.3 ms to 0.55 ms (see README, Performance). The least
    recently used origin beyond `max_origins` is closed, so a long-running service that saw
    many targets keeps a bounded number of pools.
    """

    def __init__(self, max_origins: int = 2048, per_origin: int = 32) -> None:
        self._pools: OrderedDict[tuple[bytes, bytes, int | None], httpx.AsyncHTTPTransport] = (
            OrderedDict()
        )
        self._max_origins = max_origins
        # A scrape holds one connection per target; several windows on one server, several.
        self._limits = httpx.Limits(max_connections=per_origin, max_keepalive_connections=4)
        # One TLS context for every origin: building one loads the CA bundle (~40 ms of CPU),
        # which a transport of its own would do for every new target, https or not.
        self._ssl_context: ssl.SSLContext | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        origin = (request.url.raw_scheme, request.url.raw_host, request.url.port)
        pool = self._pools.get(origin)
        if pool is None:
            if self._ssl_context is None:
                self._ssl_context = httpx.create_ssl_context()
            pool = self._pools[origin] = httpx.AsyncHTTPTransport(
                verify=self._ssl_context, limits=self._limits
            )
            if len(self._pools) > self._max_origins:
                _, oldest = self._pools.popitem(last=False)
                await oldest.aclose()
        else:
            self._pools.move_to_end(origin)
        return await pool.handle_async_request(request)

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            await pool.aclose()


def new_client(timeout_s: float) -> httpx.AsyncClient:
    """The shared client: explicit timeouts, proxies from the environment, no redirects.

    Direct connections go through `OriginPools`; a scheme with a proxy in the environment
    (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY) keeps httpx's own proxy transport and NO_PROXY rules.
    """
    proxies = urllib.request.getproxies()
    pools = OriginPools()
    mounts: dict[str, httpx.AsyncBaseTransport | None] = {
        f"{scheme}://": pools
        for scheme in ("http", "https")
        if not proxies.get(scheme) and not proxies.get("all")
    }
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s),
        limits=httpx.Limits(max_connections=512, max_keepalive_connections=64),
        mounts=mounts,
        follow_redirects=False,
        trust_env=True,
        headers={"Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING},
    )


# Above this size an answer is read off the event loop (a thread hop costs ~50 µs; reading
# 1 MiB costs milliseconds) and needs one of the few slots for large answers. Real vLLM
# answers are 60-700 KB.
OFF_LOOP_BYTES = 1024 * 1024
LARGE_ANSWERS_AT_ONCE = 4


class _LargeAnswerSlot:
    """One of `ScrapeConfig.large_answers`, taken by a scrape whose answer grows past
    OFF_LOOP_BYTES and held until that answer is read: the bytes held by all scrapes at once
    stay under LARGE_ANSWERS_AT_ONCE x max_metrics_bytes + scrapes x OFF_LOOP_BYTES. A scrape
    waiting for one stays within its timeout."""

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self._slots = slots
        self._held = False

    async def take(self) -> None:
        if not self._held:
            await self._slots.acquire()
            self._held = True

    def release(self) -> None:
        if self._held:
            self._slots.release()
            self._held = False


async def _read_capped(response: httpx.Response, max_bytes: int, slot: _LargeAnswerSlot) -> bytes:
    """The body, gzip-decoded, reading no more than `max_bytes` of decoded output; past
    OFF_LOOP_BYTES only while holding a large-answer `slot`."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip", ""):
        raise _BadPayload(f"unsupported content encoding {encoding!r}")
    length = response.headers.get("content-length")
    if encoding in ("identity", "") and length and length.isdigit() and int(length) > max_bytes:
        raise _TooLarge
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS) if "gzip" in encoding else None
    chunks: list[bytes] = []
    size = 0
    async for data in response.aiter_raw():
        while data:
            if decoder is None:
                piece, data = data, b""
            else:
                # max_length bounds each step's output, so a gzip bomb never expands in memory.
                piece = decoder.decompress(data, max_bytes - size + 1)
                data = decoder.unconsumed_tail
            size += len(piece)
            if size > max_bytes:
                raise _TooLarge
            chunks.append(piece)
            if size > OFF_LOOP_BYTES:
                await slot.take()
    if decoder is not None and not decoder.eof:
        raise _BadPayload("gzip stream ends early")
    return b"".join(chunks)


def _transport_failure(target: Target, exc: Exception, timeout_s: float) -> ScrapeOutcome:
    if isinstance(exc, httpx.TimeoutException):
        detail = f"timed out after {timeout_s:g} s ({type(exc).__name__})"
        return failure(target, ScrapeErrorKind.TIMEOUT, detail)
    if isinstance(exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol | httpx.InvalidURL):
        # Our own request was refused by the HTTP library: its text quotes the request (a
        # header value among it), so only the kind of the fault is told.
        return failure(
            target, ScrapeErrorKind.TRANSPORT, f"request not sent ({type(exc).__name__})"
        )
    text = str(exc)
    detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    kind = (
        ScrapeErrorKind.CONNECT
        if isinstance(exc, httpx.ConnectError)
        else ScrapeErrorKind.TRANSPORT
    )
    return failure(target, kind, detail)


async def scrape_target(
    client: httpx.AsyncClient, target: Target, config: ScrapeConfig
) -> ScrapeOutcome:
    """Scrape `target` once and extract its spec-decode series; never raises.

    Any fault of the collector's own is an `INTERNAL` failure with a fixed text (its type
    only: an exception's text may quote a header), so a stop always closes its window.
    """
    try:
        return await _scrape(client, target, config)
    except Exception as exc:
        # The frames, not the message: an exception's text may quote a header value.
        frames = "".join(traceback.format_tb(exc.__traceback__))
        logger.error(
            "scrape of %s failed inside the collector: %s\n%s",
            target.key, type(exc).__name__, frames,
        )  # fmt: skip
        detail = f"internal error of the collector ({type(exc).__name__})"
        return failure(target, ScrapeErrorKind.INTERNAL, detail)


async def _scrape(client: httpx.AsyncClient, target: Target, config: ScrapeConfig) -> ScrapeOutcome:
    slot = _LargeAnswerSlot(config.large_answers)
    try:
        return await _fetch_and_read(client, target, config, slot)
    finally:
        slot.release()


async def _fetch_and_read(
    client: httpx.AsyncClient, target: Target, config: ScrapeConfig, slot: _LargeAnswerSlot
) -> ScrapeOutcome:
    Kind = ScrapeErrorKind
    timeout_s, max_bytes = config.timeout_s, config.max_bytes
    try:
        # The client's timeout bounds each network step; this bounds the whole scrape, so a
        # server that trickles its answer cannot hold a window open.
        async with asyncio.timeout(timeout_s):
            url, headers, extensions = await pin(target, config)
            request = client.build_request("GET", url, headers=headers, extensions=extensions)
            response = await client.send(request, stream=True)
            try:
                if response.status_code != 200:
                    return failure(target, Kind.HTTP_STATUS, str(response.status_code))
                content_type = response.headers.get("content-type", "")
                if content_type.split(";")[0].strip().lower() == "text/html":
                    detail = "not a Prometheus exposition: text/html"
                    return failure(target, Kind.NOT_PROMETHEUS, detail)
                body = await _read_capped(response, max_bytes, slot)
            finally:
                await response.aclose()
    except Refused as exc:
        return failure(target, Kind.REFUSED, f"refused: {exc}")
    except _Unresolved as exc:
        return failure(target, Kind.DNS, str(exc))
    except _TooLarge:
        return failure(target, Kind.TOO_LARGE, f"answer larger than {max_bytes} bytes")
    except _BadPayload as exc:
        return failure(target, Kind.INVALID_PAYLOAD, str(exc))
    except TimeoutError:
        return failure(target, Kind.TIMEOUT, f"timed out after {timeout_s:g} s")
    except zlib.error as exc:
        return failure(target, Kind.INVALID_PAYLOAD, f"invalid gzip data: {exc}")
    except (httpx.HTTPError, OSError) as exc:
        return _transport_failure(target, exc, timeout_s)
    if len(body) > OFF_LOOP_BYTES:
        # A large answer is decoded and read in a worker thread: the event loop keeps
        # answering every other team meanwhile.
        return await asyncio.to_thread(_extracted, target, body, config.limits)
    return _extracted(target, body, config.limits)


def _extracted(target: Target, body: bytes, limits: ExtractionLimits) -> ScrapeOutcome:
    """The outcome of reading an answer's body: its spec-decode series, or why not."""
    Kind = ScrapeErrorKind
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return failure(target, Kind.INVALID_PAYLOAD, f"answer is not UTF-8 ({exc.reason})")
    if text.lstrip()[:1] in ("[", "{"):  # never the start of a Prometheus exposition
        return failure(target, Kind.WRONG_ENDPOINT, JSON_METRICS)
    try:
        series = extract_spec_decode(text, limits)
    except ExtractionError as exc:
        return failure(target, Kind.INVALID_PAYLOAD, str(exc))
    if not series and (text.startswith("dynamo_frontend_") or "\ndynamo_frontend_" in text):
        return failure(target, Kind.WRONG_ENDPOINT, DYNAMO_FRONTEND)
    return ScrapeOutcome(target, utcnow(), series=series)


DYNAMO_FRONTEND = (
    "a Dynamo frontend, which has no spec-decode metrics: scrape the worker's system port "
    "instead (DYN_SYSTEM_PORT of each worker)"
)
JSON_METRICS = (
    "a JSON answer, not Prometheus text: TensorRT-LLM's /metrics is a JSON stream that empties "
    "on every read; use http://host:port/prometheus/metrics"
)


async def _measured(
    client: httpx.AsyncClient, target: Target, config: ScrapeConfig
) -> ScrapeOutcome:
    began = time.perf_counter()
    outcome = await scrape_target(client, target, config)
    SCRAPE_SECONDS.observe(time.perf_counter() - began)
    if outcome.kind is not None:
        SCRAPE_ERRORS.labels(outcome.kind.value).inc()
    return outcome


async def scrape_all(
    client: httpx.AsyncClient, targets: Sequence[Target], config: ScrapeConfig, owner: str = ""
) -> list[ScrapeOutcome]:
    """Scrape every target at once; the outcomes come back in the targets' order.

    `owner` (the team) shares the name resolver's threads fairly with other owners.
    """
    RESOLVING_FOR.set(owner)  # the tasks below copy this context
    return list(await asyncio.gather(*(_measured(client, t, config) for t in targets)))
