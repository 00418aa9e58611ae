"""One scrape of one target: GET `/metrics` with a timeout and a size cap.

`scrape_target` never raises for a target's fault: it returns a `ScrapeOutcome` whose
`series` holds the spec-decode series read, or whose `error` holds the AISBench error text.
"""

import asyncio
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import httpx

from app.models import utcnow
from app.promtext import ExtractionError, Series, extract_spec_decode
from app.targets import Target

# Ask for the classic text format: every vLLM version serves it, and OpenMetrics answers
# (some proxies rewrite the negotiation) are read by the same extraction.
ACCEPT = "text/plain;version=0.0.4;q=1.0,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
# gzip only, decoded here: httpx's own decoders have no output limit per chunk.
ACCEPT_ENCODING = "gzip, identity"


@dataclass(frozen=True, slots=True)
class ScrapeOutcome:
    """What one scrape produced: the series, or the error text; and when it finished."""

    target: Target
    taken_at: datetime
    series: Series | None = None
    error: str | None = None


class _TooLarge(Exception):
    pass


class _BadPayload(Exception):
    pass


def new_client(timeout_s: float) -> httpx.AsyncClient:
    """The shared client: explicit timeouts, proxies from the environment, no redirects."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s),
        limits=httpx.Limits(max_connections=512, max_keepalive_connections=64),
        follow_redirects=False,
        trust_env=True,
        headers={"Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING},
    )


async def _read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    """The body, gzip-decoded, reading no more than `max_bytes` of decoded output."""
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
    if decoder is not None and not decoder.eof:
        raise _BadPayload("gzip stream ends early")
    return b"".join(chunks)


def _describe(exc: Exception, timeout_s: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out after {timeout_s:g} s ({type(exc).__name__})"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def scrape_target(
    client: httpx.AsyncClient, target: Target, *, timeout_s: float, max_bytes: int
) -> ScrapeOutcome:
    """Scrape `target` once and extract its spec-decode series."""
    failed = f"Failed to fetch metrics from {target.url}: "
    try:
        # The client's timeout bounds each network step; this bounds the whole scrape, so a
        # server that trickles its answer cannot hold a window open.
        async with asyncio.timeout(timeout_s), client.stream("GET", target.url) as response:
            if response.status_code != 200:
                return ScrapeOutcome(
                    target, utcnow(), error=f"Metrics endpoint returned HTTP {response.status_code}"
                )
            content_type = response.headers.get("content-type", "")
            if content_type.split(";")[0].strip().lower() == "text/html":
                return ScrapeOutcome(
                    target, utcnow(), error=failed + "not a Prometheus exposition: text/html"
                )
            body = await _read_capped(response, max_bytes)
    except _TooLarge:
        return ScrapeOutcome(
            target, utcnow(), error=failed + f"answer larger than {max_bytes} bytes"
        )
    except _BadPayload as exc:
        return ScrapeOutcome(target, utcnow(), error=failed + str(exc))
    except TimeoutError:
        return ScrapeOutcome(target, utcnow(), error=failed + f"timed out after {timeout_s:g} s")
    except zlib.error as exc:
        return ScrapeOutcome(target, utcnow(), error=failed + f"invalid gzip data: {exc}")
    except (httpx.HTTPError, OSError) as exc:
        return ScrapeOutcome(target, utcnow(), error=failed + _describe(exc, timeout_s))
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ScrapeOutcome(target, utcnow(), error=failed + f"answer is not UTF-8 ({exc.reason})")
    try:
        series = extract_spec_decode(text)
    except ExtractionError as exc:
        return ScrapeOutcome(target, utcnow(), error=failed + str(exc))
    return ScrapeOutcome(target, utcnow(), series=series)


async def scrape_all(
    client: httpx.AsyncClient, targets: Sequence[Target], *, timeout_s: float, max_bytes: int
) -> list[ScrapeOutcome]:
    """Scrape every target at once; the outcomes come back in the targets' order."""
    return list(
        await asyncio.gather(
            *(scrape_target(client, t, timeout_s=timeout_s, max_bytes=max_bytes) for t in targets)
        )
    )
