"""PrometheusRead windows from the deployment's Prometheus (SPECDEC_PROMETHEUS_URL): the HTTP calls.

`PrometheusSource.read` queries the raw samples of one target over a window
(`app.promsource.range_query`) and, at a stop, waits until Prometheus holds a sample at or
after the stop time (two scrape intervals, as the samples' own spacing shows, within
`SPECDEC_PROMETHEUS_WAIT_MAX_S`). Every failure is a `SourceError` whose text says why in the
AISBench style; the token or password never appears in it.
"""

import asyncio
import base64
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from app.config import Settings
from app.promsource import (
    Snapshots,
    SourceError,
    baseline_of,
    range_query,
    sample_spacing,
    scrape_time_query,
    series_query,
    snapshots_of,
)
from app.safetext import safe_error_text

# Without a known spacing (one sample so far), how long a stop waits at most for the next.
DEFAULT_WAIT_S = 30.0
POLL_S = 0.5
# The recent samples whose spacing tells a target's scrape interval.
SPACING_SPAN_S = 30.0


@dataclass(frozen=True, slots=True)
class PrometheusRead:
    """One target's samples over a window, and a note if the stop could not wait for them."""

    snapshots: Snapshots
    note: str | None = None


class PrometheusSource:
    """The deployment's Prometheus, with its credentials, timeout and answer size cap."""

    def __init__(self, settings: Settings, client: httpx.AsyncClient) -> None:
        assert settings.prometheus_url is not None
        self.base_url = settings.prometheus_url.rstrip("/")
        self.timeout_s = settings.prometheus_timeout_s
        self.max_bytes = settings.prometheus_max_bytes
        self.wait_max_s = settings.prometheus_wait_max_s
        self.client = client
        self.headers: dict[str, str] = {}
        if settings.prometheus_bearer_token:
            self.headers["Authorization"] = f"Bearer {settings.prometheus_bearer_token}"
        elif settings.prometheus_username is not None:
            pair = f"{settings.prometheus_username}:{settings.prometheus_password or ''}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        # Redacted from every error text (a proxy's error page may echo a header).
        self._secrets = [(name, value) for name, value in self.headers.items()]
        self._secrets += [("", s) for s in (settings.prometheus_bearer_token,
                                            settings.prometheus_password) if s]  # fmt: skip

    def _failed(self, detail: str) -> SourceError:
        text = f"Failed to query Prometheus at {self.base_url}: {detail}"
        return SourceError(safe_error_text(text, self._secrets))

    async def query(self, promql: str, at: datetime) -> dict[str, Any]:
        """The JSON answer of an instant query at `at`; `SourceError` on any failure."""
        params = {
            "query": promql,
            "time": f"{at.timestamp():.3f}",
            "timeout": f"{self.timeout_s:g}s",
        }
        try:
            async with asyncio.timeout(self.timeout_s + 1):
                request = self.client.build_request(
                    "GET", f"{self.base_url}/api/v1/query", params=params, headers=self.headers
                )
                response = await self.client.send(request, stream=True)
                try:
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > self.max_bytes:
                            raise self._failed(f"answer larger than {self.max_bytes} bytes")
                finally:
                    await response.aclose()
        except TimeoutError:
            raise self._failed(f"timed out after {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise self._failed(type(exc).__name__ + (f": {exc}" if str(exc) else "")) from None
        try:
            answer: dict[str, Any] = json.loads(bytes(body))
        except ValueError:
            raise self._failed(f"HTTP {response.status_code}, not a JSON answer") from None
        if answer.get("status") != "success":
            raise self._failed(f"Prometheus answered: {answer.get('error', 'no error text')}")
        return answer

    async def read(
        self, selector: str, start: datetime, end: datetime, wait: bool
    ) -> PrometheusRead:
        """The target's samples: the last at or before `start`, and every one after it up to
        `end`. With `wait` (a stop happening now), first wait until a sample at or after `end`
        is in, or say in a note that none came within the bound."""
        instant = series_query(selector)
        note = await self._wait_for(selector, end) if wait else None
        values = await self.query(instant, start)
        times = await self.query(scrape_time_query(selector), start)
        answer = await self.query(range_query(selector, start, end), end)
        snapshots = snapshots_of(answer, baseline_of(values, times))
        if not snapshots.points:
            raise SourceError(f"Prometheus holds no spec-decode series for {selector}")
        return PrometheusRead(snapshots, note)

    async def _latest(self, promql: str) -> float | None:
        result = (await self.query(promql, datetime.now(UTC)))["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    async def _wait_for(self, selector: str, end: datetime) -> str | None:
        """Wait until Prometheus holds a sample at or after `end`: two scrape intervals (as
        the samples' own spacing over the last 30 s shows), within `wait_max_s`."""
        began, bound = time.monotonic(), None
        while True:
            latest = await self._latest(scrape_time_query(selector))
            if latest is None or latest >= end.timestamp():
                return None  # no series at all (the reading says so), or the sample is in
            if bound is None:
                recent = datetime.now(UTC)
                since = recent - timedelta(seconds=SPACING_SPAN_S)
                answer = await self.query(range_query(selector, since, recent), recent)
                spacing = sample_spacing(snapshots_of(answer).points)
                bound = min(self.wait_max_s, 2 * spacing if spacing else DEFAULT_WAIT_S)
            if time.monotonic() - began >= bound:
                last = datetime.fromtimestamp(latest, UTC)
                return (
                    f"computed with Prometheus' samples up to {last:%H:%M:%S} UTC: none at or "
                    f"after the stop came within {bound:g} s"
                )
            await asyncio.sleep(POLL_S)


__all__ = ["PrometheusRead", "PrometheusSource", "SourceError"]
