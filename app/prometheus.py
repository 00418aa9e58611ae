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
from datetime import datetime
from typing import Any

import httpx

from app.config import Settings
from app.promsource import Snapshots, SourceError, range_query, sample_spacing, snapshots_of
from app.safetext import safe_error_text

# Without a known spacing (one sample so far), how long a stop waits at most for the next.
DEFAULT_WAIT_S = 30.0
POLL_S = 0.5


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
        self.lookback_s = settings.prometheus_lookback_s
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
        """The target's samples from `lookback_s` before `start` to `end`. With `wait`, a stop
        happening now, wait until a sample at or after `end` is in (or say it is not)."""
        promql = range_query(selector, start, end, self.lookback_s)
        began = time.monotonic()
        while True:
            snapshots = snapshots_of(await self.query(promql, end))
            if not snapshots.points:
                raise SourceError(f"Prometheus holds no spec-decode series for {selector}")
            last = snapshots.points[-1][0]
            if not wait or last >= end:
                return PrometheusRead(snapshots)
            spacing = sample_spacing(snapshots.points)
            bound = min(self.wait_max_s, 2 * spacing if spacing else DEFAULT_WAIT_S)
            if time.monotonic() - began >= bound:
                note = (
                    f"computed with Prometheus' samples up to {last:%H:%M:%S} UTC: none at or "
                    f"after the stop came within {bound:g} s"
                )
                return PrometheusRead(snapshots, note)
            await asyncio.sleep(POLL_S)


__all__ = ["PrometheusRead", "PrometheusSource", "SourceError"]
