"""One scrape of one target: GET its metrics with a timeout and a size cap, read the answer.

`scrape_target` never raises: it returns a `TargetReading` whose `series` holds the spec-decode
series read, or whose `error` holds the AISBench error text.
"""

import asyncio
import logging
import time
import traceback
import zlib
from collections.abc import Sequence

import httpx

from specdec_collector.core.exposition import ExtractionError
from specdec_collector.core.readings import FailureKind, TargetReading
from specdec_collector.core.targets import Target
from specdec_collector.sources.scrape.client import ScrapeClient
from specdec_collector.sources.scrape.config import OFF_LOOP_BYTES, ScrapeConfig
from specdec_collector.sources.scrape.failures import (
    REFUSAL_BODY_BYTES,
    failure,
    refusal_message,
    timed_out,
)
from specdec_collector.sources.scrape.pinning import Pin, Refused, Unresolved, pin
from specdec_collector.sources.scrape.resolver import RESOLVING_FOR
from specdec_collector.sources.scrape.transport import Answer
from specdec_collector.store.tables import utcnow
from specdec_collector.telemetry import SCRAPE_ERRORS, SCRAPE_REQUESTS, SCRAPE_SECONDS

logger = logging.getLogger(__name__)


class _TooLarge(Exception):
    pass


class _BadPayload(Exception):
    pass


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


async def _refusal_body(response: Answer) -> bytes:
    """The first bytes of a refusal's plain body, for its message; none of a compressed one."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", ""):
        return b""
    head = b""
    async for data in response.aiter_raw():
        head += data
        if len(head) >= REFUSAL_BODY_BYTES:
            break
    return head[:REFUSAL_BODY_BYTES]


async def _read_capped(response: Answer, max_bytes: int, slot: _LargeAnswerSlot) -> bytes:
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


def _transport_failure(target: Target, exc: Exception, timeout_s: float) -> TargetReading:
    if isinstance(exc, httpx.TimeoutException):
        detail = f"timed out after {timeout_s:g} s ({type(exc).__name__})"
        return failure(target, FailureKind.TIMEOUT, detail)
    if isinstance(exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol | httpx.InvalidURL):
        # Our own request was refused by the HTTP library: its text quotes the request (a
        # header value among it), so only the kind of the fault is told.
        return failure(target, FailureKind.TRANSPORT, f"request not sent ({type(exc).__name__})")
    text = str(exc)
    detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    kind = FailureKind.CONNECT if isinstance(exc, httpx.ConnectError) else FailureKind.TRANSPORT
    return failure(target, kind, detail)


async def scrape_target(
    client: ScrapeClient, target: Target, config: ScrapeConfig, pinned: Pin | None = None
) -> TargetReading:
    """Scrape `target` once and extract its spec-decode series; never raises. Scrapes of one
    endpoint asked for while a request of it is in flight share the next one
    (`sources.scrape.sharing`).

    Any fault of the collector's own is an `INTERNAL` failure with a fixed text (its type
    only: an exception's text may quote a header), so a stop always closes its window.
    `pinned` is where a check just found the request should go (else it is found here).
    """
    # One configuration per service (its identity: it holds a dict, and a semaphore).
    key = (target.url, target.headers, id(config))
    return await client.sharing.scrape(
        key, target, config.timeout_s, lambda: _scrape_once(client, target, config, pinned)
    )


async def _scrape_once(
    client: ScrapeClient, target: Target, config: ScrapeConfig, pinned: Pin | None
) -> TargetReading:
    SCRAPE_REQUESTS.inc()
    try:
        return await _scrape(client, target, config, pinned)
    except Exception as exc:
        # The frames, not the message: an exception's text may quote a header value.
        frames = "".join(traceback.format_tb(exc.__traceback__))
        logger.error(
            "scrape of %s failed inside the collector: %s\n%s",
            target.name,
            type(exc).__name__,
            frames,
        )
        detail = f"internal error of the collector ({type(exc).__name__})"
        return failure(target, FailureKind.INTERNAL, detail)


async def _scrape(
    client: ScrapeClient, target: Target, config: ScrapeConfig, pinned: Pin | None
) -> TargetReading:
    slot = _LargeAnswerSlot(config.large_answers)
    try:
        return await _fetch_and_read(client, target, config, slot, pinned)
    finally:
        slot.release()


async def _fetch_and_read(
    client: ScrapeClient,
    target: Target,
    config: ScrapeConfig,
    slot: _LargeAnswerSlot,
    pinned: Pin | None,
) -> TargetReading:
    Kind = FailureKind
    timeout_s, max_bytes = config.timeout_s, config.max_bytes
    try:
        # This bounds the whole scrape, so a server that trickles its answer cannot hold a
        # window open; the client's timeouts bound the connection's steps. Not each read: this
        # bound, begun earlier and as long, always ends first, and aiohttp would set a timer
        # anew for every piece of the answer that arrives.
        async with asyncio.timeout(timeout_s):
            url, headers, extensions = pinned or await pin(target, config)
            response = await client.get(url, headers, extensions, timeout_s)
            try:
                if response.status_code != 200:
                    said = refusal_message(await _refusal_body(response))
                    detail = str(response.status_code) + (f": {said}" if said else "")
                    return failure(target, Kind.HTTP_STATUS, detail)
                content_type = response.headers.get("content-type", "")
                if content_type.split(";")[0].strip().lower() == "text/html":
                    detail = "not a Prometheus exposition: text/html"
                    return failure(target, Kind.NOT_PROMETHEUS, detail)
                body = await _read_capped(response, max_bytes, slot)
            finally:
                await response.aclose()
    except Refused as exc:
        return failure(target, Kind.REFUSED, f"refused: {exc}")
    except Unresolved as exc:
        return failure(target, Kind.DNS, str(exc))
    except _TooLarge:
        return failure(target, Kind.TOO_LARGE, f"answer larger than {max_bytes} bytes")
    except _BadPayload as exc:
        return failure(target, Kind.INVALID_PAYLOAD, str(exc))
    except TimeoutError:
        return timed_out(target, timeout_s)
    except zlib.error as exc:
        return failure(target, Kind.INVALID_PAYLOAD, f"invalid gzip data: {exc}")
    except (httpx.HTTPError, OSError) as exc:
        return _transport_failure(target, exc, timeout_s)
    if len(body) > OFF_LOOP_BYTES:
        # A large answer is decoded and read in a worker thread: the event loop keeps
        # answering every other team meanwhile.
        return await asyncio.to_thread(_extracted, target, body, config)
    return _extracted(target, body, config)


def _extracted(target: Target, body: bytes, config: ScrapeConfig) -> TargetReading:
    """The outcome of reading an answer's body: its spec-decode series, or why not."""
    Kind = FailureKind
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return failure(target, Kind.INVALID_PAYLOAD, f"answer is not UTF-8 ({exc.reason})")
    if text.lstrip()[:1] in ("[", "{"):  # never the start of a Prometheus exposition
        return failure(target, Kind.WRONG_ENDPOINT, JSON_METRICS)
    try:
        series = config.caches.extract((target.url, target.headers), text, config.limits)
    except ExtractionError as exc:
        return failure(target, Kind.INVALID_PAYLOAD, str(exc))
    if not series and (text.startswith("dynamo_frontend_") or "\ndynamo_frontend_" in text):
        return failure(target, Kind.WRONG_ENDPOINT, DYNAMO_FRONTEND)
    return TargetReading(target, utcnow(), series)


DYNAMO_FRONTEND = (
    "a Dynamo frontend, which has no spec-decode metrics: scrape the worker's system port "
    "instead (DYN_SYSTEM_PORT of each worker)"
)
JSON_METRICS = (
    "a JSON answer, not Prometheus text: TensorRT-LLM's /metrics is a JSON stream that empties "
    "on every read; use http://host:port/prometheus/metrics"
)


async def _measured(
    client: ScrapeClient, target: Target, config: ScrapeConfig, pinned: Pin | None
) -> TargetReading:
    began = time.perf_counter()
    outcome = await scrape_target(client, target, config, pinned)
    SCRAPE_SECONDS.observe(time.perf_counter() - began)
    if outcome.kind is not None:
        SCRAPE_ERRORS.labels(outcome.kind.value).inc()
    return outcome


async def scrape_all(
    client: ScrapeClient,
    targets: Sequence[Target],
    config: ScrapeConfig,
    owner: str = "",
    pinned: Sequence[Pin | None] | None = None,
) -> list[TargetReading]:
    """Scrape every target at once; the readings come back in the targets' order.

    `owner` (the team) shares the name resolver's threads fairly with other owners; `pinned`,
    where a check just found each request should go (None: found by the scrape).
    """
    RESOLVING_FOR.set(owner)  # the tasks below copy this context
    where = pinned if pinned is not None else [None] * len(targets)
    return list(
        await asyncio.gather(
            *(_measured(client, t, config, p) for t, p in zip(targets, where, strict=True))
        )
    )
