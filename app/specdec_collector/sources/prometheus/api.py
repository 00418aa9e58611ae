"""The deployment's Prometheus (SPECDEC_PROMETHEUS_URL): the HTTP calls that read a window.

`PrometheusAPI.read_many` queries the raw samples of one target over a window
(`core.promql.range_query`) and, at a stop, waits until Prometheus holds a sample at or
after the stop time (two scrape intervals, as the samples' own spacing shows, within
`SPECDEC_PROMETHEUS_WAIT_MAX_S`). A target's failure is a `Failure` whose text says why in the
AISBench style; the token or password never appears in it.
"""

import asyncio
import base64
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar

import httpx

from specdec_collector.config import Settings
from specdec_collector.core.exposition import Series
from specdec_collector.core.promql import (
    Scrapes,
    SourceError,
    chunks,
    instances_selector,
    range_query,
    scrape_configs_query,
    scrape_spacing_query,
    scrape_spacings,
    scrape_time_query,
    scrape_times,
    scrapes_by_instance,
    split_by_instance,
    thin,
)
from specdec_collector.core.readings import Failure, FailureKind
from specdec_collector.core.safetext import safe_error_text
from specdec_collector.gcpause import uncollected

_R = TypeVar("_R")

# Without a known spacing (one sample so far), how long a stop waits at most for the next.
DEFAULT_WAIT_S = 30.0
# The shortest pause between two looks for the samples after a stop.
POLL_S = 0.5
# After a scrape is due, the time Prometheus takes to scrape and store it before a look.
STORE_MARGIN_S = 0.2
# The recent samples whose spacing tells a target's scrape interval.
SPACING_SPAN_S = 30.0
# The span of one range query: a long window is read in chunks this long, so that no answer
# holds more than this span's samples, however long the window.
RANGE_CHUNK_S = 900.0
# Above this size an answer is parsed off the event loop.
OFF_LOOP_BYTES = 256 * 1024
# How far after a past stop a window's ending scrape is looked for (a scrape interval's worth).
LOOKAHEAD_S = 30.0
# How far before the earliest baseline scrape the first range begins (a range selector may
# leave out a sample at its very start).
BASELINE_MARGIN_S = 0.001


@dataclass(frozen=True, slots=True)
class PrometheusRead:
    """One target's samples over a window, and a note if the stop could not wait for them."""

    scrapes: Scrapes
    note: str | None = None


def _scraped_twice(configs: dict[str, Any]) -> dict[str, Failure]:
    """The instances two scrape configurations scrape (jobs, or target labels, that differ):
    each of their series is there twice, under labels that differ, and would count twice."""
    failed = {}
    for instance, answer in split_by_instance(configs, "vector").items():
        count = int(float(answer["data"]["result"][0]["value"][1]))
        if count > 1:
            failed[instance] = Failure(
                FailureKind.PROMETHEUS,
                f"Prometheus scrapes this server with {count} scrape configurations (jobs "
                "or target labels differ): its series would be counted twice; name it by a "
                'selector of one, such as {instance="host:port", job="..."}',
            )
    return failed


class PrometheusAPI:
    """The deployment's Prometheus, with its credentials, timeout and answer size cap."""

    def __init__(self, settings: Settings, client: httpx.AsyncClient) -> None:
        assert settings.prometheus_url is not None
        self.base_url = settings.prometheus_url.rstrip("/")
        self.timeout_s = settings.prometheus_timeout_s
        self.max_bytes = settings.prometheus_max_bytes
        self.wait_max_s = settings.prometheus_wait_max_s
        self.max_points = settings.prometheus_max_points
        self.max_span_s = settings.prometheus_max_span_s
        self.client = client
        self.headers: dict[str, str] = {}
        if settings.prometheus_bearer_token:
            self.headers["Authorization"] = f"Bearer {settings.prometheus_bearer_token}"
        elif settings.prometheus_username is not None:
            pair = f"{settings.prometheus_username}:{settings.prometheus_password or ''}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        # Redacted from every error text (a proxy's error page may echo a header).
        self._secrets = [(name, value) for name, value in self.headers.items()]
        self._secrets += [
            ("", s) for s in (settings.prometheus_bearer_token, settings.prometheus_password) if s
        ]

    def _failed(self, detail: str) -> SourceError:
        text = f"Failed to query Prometheus at {self.base_url}: {detail}"
        return SourceError(safe_error_text(text, self._secrets))

    async def query(self, promql: str, at: datetime) -> dict[str, Any]:
        """The JSON answer of an instant query at `at`; `SourceError` on any failure."""
        return await self.query_read(promql, at, _as_is)

    async def query_read(
        self, promql: str, at: datetime, read: Callable[[dict[str, Any]], _R]
    ) -> _R:
        """What `read` (a pure function) makes of the JSON answer of an instant query at
        `at`; `SourceError` on any failure. A large answer is parsed and read off the event
        loop, without garbage collection (`gcpause`), so that only what `read` keeps
        of it lives on."""
        # Milliseconds, rounded down: a query at a window's start never sees past it.
        stamp = math.floor(at.timestamp() * 1000) / 1000
        params = {"query": promql, "time": f"{stamp:.3f}", "timeout": f"{self.timeout_s:g}s"}
        try:
            async with asyncio.timeout(self.timeout_s + 1):
                # POST, form-encoded (Prometheus' API takes both): a window's selector names
                # every target, and a fleet's is longer than a URL may be past a proxy (and
                # costly for httpx to build as one).
                request = self.client.build_request(
                    "POST", f"{self.base_url}/api/v1/query", data=params, headers=self.headers
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
        if len(body) > OFF_LOOP_BYTES:
            return await asyncio.to_thread(
                uncollected(self._read), bytes(body), response.status_code, read
            )
        return self._read(bytes(body), response.status_code, read)

    def _read(self, body: bytes, status_code: int, read: Callable[[dict[str, Any]], _R]) -> _R:
        try:
            answer = json.loads(body)
        except ValueError:
            raise self._failed(f"HTTP {status_code}, not a JSON answer") from None
        if not isinstance(answer, dict):
            raise self._failed(f"HTTP {status_code}, not a JSON object")
        if answer.get("status") != "success":
            raise self._failed(f"Prometheus answered: {answer.get('error', 'no error text')}")
        return read(answer)

    async def read_many(
        self,
        selectors: Sequence[str],
        start: datetime,
        end: datetime,
        wait: bool,
        since: datetime | None = None,
    ) -> list[PrometheusRead | Failure]:
        """Every target's samples, or why there are none, in order: from the baseline at
        `start`, or only those after `since`. The targets named by `instance` are read
        together, with one query each time."""
        keys = [_instance_of(selector) for selector in selectors]
        by_instance = [key for key in keys if key is not None]
        jobs = (
            [self._group(instances_selector(by_instance), start, end, wait, since)]
            if by_instance
            else []
        )
        jobs += [
            self._group(sel, start, end, wait, since)
            for sel, key in zip(selectors, keys, strict=True)
            if key is None
        ]
        groups = list(await asyncio.gather(*jobs, return_exceptions=True))
        batch = groups.pop(0) if by_instance else {}
        reads: list[PrometheusRead | Failure] = []
        for selector, key in zip(selectors, keys, strict=True):
            group = batch if key is not None else groups.pop(0)
            if isinstance(group, SourceError):
                reads.append(Failure(FailureKind.PROMETHEUS, str(group)))
            elif isinstance(group, BaseException):
                raise group
            elif key is not None:
                reads.append(group.get(key) or _nothing_new(selector, since))
            elif len(group) > 1:
                reads.append(
                    Failure(
                        FailureKind.PROMETHEUS,
                        f"the selector {selector} matches more than one server (instances "
                        f"{', '.join(sorted(group))}): narrow it to one; the collector never "
                        "sums servers",
                    )
                )
            else:
                reads.append(next(iter(group.values()), None) or _nothing_new(selector, since))
        return reads

    async def _group(
        self, selector: str, start: datetime, end: datetime, wait: bool, since: datetime | None
    ) -> dict[str, PrometheusRead | Failure]:
        """The samples of every instance `selector` matches, by instance, each ending at its
        first scrape at or after `end` (waited for with `wait`; for a past `end`, looked for up
        to LOOKAHEAD_S after it), thinned to `max_points` (`core.promql.thin`). From the
        baseline at `start` on; or, given `since`, only the samples after it.

        The span is read in chunks of RANGE_CHUNK_S, each large answer read off the event
        loop (`query_read`): no answer holds more than a chunk's samples, and no more than
        twice `max_points` of an instance are held at once."""
        if wait:
            note, until = await self._wait_for(selector, end)
        else:
            note, until = None, min(datetime.now(UTC), end + timedelta(seconds=LOOKAHEAD_S))
        until = max(until, end)
        held: dict[str, list[tuple[datetime, Series]]] = {}
        failed: dict[str, Failure] = {}
        configs_query = scrape_configs_query(selector)
        if since is None:
            # Each instance's baseline is its last scrape at or before the start: the first
            # range reaches back to the earliest of them, so one answer holds the baselines
            # and the samples after them (an instant query of the baselines apart would
            # answer every series' labels a second time).
            configs, times = await _together(
                self.query(configs_query, until), self.query(scrape_time_query(selector), start)
            )
            scraped = scrape_times(times)
            earliest = min([start.timestamp(), *scraped.values()]) - BASELINE_MARGIN_S
            spans = chunks(datetime.fromtimestamp(earliest, UTC), until, RANGE_CHUNK_S)
            first = await self.query_read(
                range_query(selector, *spans[0]),
                spans[0][1],
                partial(scrapes_by_instance, scraped=scraped),
            )
        else:
            spans = chunks(since, until, RANGE_CHUNK_S)
            configs, first = await _together(
                self.query(configs_query, until),
                self.query_read(range_query(selector, *spans[0]), spans[0][1], scrapes_by_instance),
            )
        failed.update(_scraped_twice(configs))
        for index, (low, high) in enumerate(spans):
            parts = (
                first
                if index == 0
                else await self.query_read(
                    range_query(selector, low, high), high, scrapes_by_instance
                )
            )
            for instance, scrapes in parts.items():
                if instance in failed:
                    continue
                joined = Scrapes(held.get(instance, [])).followed_by(scrapes.points)
                if since is None and index == 0:  # nothing before the baseline counts
                    joined = joined.since_baseline(start)
                points = held[instance] = joined.points
                if len(points) > 2 * self.max_points:
                    try:
                        held[instance] = thin(points, self.max_points)
                    except SourceError as exc:
                        failed[instance] = Failure(FailureKind.PROMETHEUS, str(exc))
                        del held[instance]
        return self._reads(held, failed, end, note, since is not None)

    def _reads(
        self,
        held: dict[str, list[tuple[datetime, Series]]],
        failed: dict[str, Failure],
        end: datetime,
        note: str | None,
        partial: bool,
    ) -> dict[str, PrometheusRead | Failure]:
        """Each instance's read, up to its first scrape at or after `end`, thinned; an
        instance without a sample is left out unless the read is `partial` (samples since)."""
        reads: dict[str, PrometheusRead | Failure] = dict(failed)
        for instance, points in held.items():
            if instance in failed:
                continue
            try:
                kept = thin(Scrapes(points).until(end).points, self.max_points)
            except SourceError as exc:
                reads[instance] = Failure(FailureKind.PROMETHEUS, str(exc))
                continue
            if kept or partial:
                reads[instance] = PrometheusRead(Scrapes(kept), note)
        return reads

    async def _scraped_at_all(self, selector: str, now: datetime) -> bool:
        """Whether Prometheus scrapes the target at all (its latest scrape may have failed)."""
        any_scrape = scrape_time_query(selector, successful_only=False)
        return bool((await self.query(any_scrape, now))["data"]["result"])

    async def _wait_for(self, selector: str, end: datetime) -> tuple[str | None, datetime]:
        """Wait until Prometheus holds a sample at or after `end` of every instance `selector`
        matches: two scrape intervals (as the samples' own spacing over the last 30 s shows),
        within `wait_max_s`. The note if none came, and the moment to read up to: the latest
        of those samples (each instance's first scrape after the stop ends its window), else
        `end`.

        Between two looks it sleeps until the next scrape is due (the last one of the
        instance scraped longest ago, one spacing on), at least POLL_S: each look is a query
        of every instance, and at Prometheus' default 15 s interval a look every POLL_S
        would be 30 queries a stop."""
        began, bound, spacing = time.monotonic(), None, None
        while True:
            now = datetime.now(UTC)
            answer = await self.query(scrape_time_query(selector), now)
            latest = [float(entry["value"][1]) for entry in answer["data"]["result"]]
            if not latest and not await self._scraped_at_all(selector, now):
                return None, end  # no such target: the reading says so
            if latest and min(latest) >= end.timestamp():
                return None, datetime.fromtimestamp(max(latest), UTC)
            if bound is None:
                recent = await self.query(scrape_spacing_query(selector, SPACING_SPAN_S), now)
                spacing = max(scrape_spacings(recent).values(), default=None)
                bound = min(self.wait_max_s, 2 * spacing if spacing else DEFAULT_WAIT_S)
            waited = time.monotonic() - began
            if waited >= bound:
                note = (
                    f"computed with the samples Prometheus held: none at or after the stop "
                    f"came within {bound:g} s"
                )
                return note, end
            pause = POLL_S
            if spacing and latest:
                due = min(latest) + spacing + STORE_MARGIN_S
                pause = max(pause, due - now.timestamp())
            await asyncio.sleep(min(pause, bound - waited))


async def _together(*calls: Awaitable[Any]) -> list[Any]:
    """The answers of `calls`, made at once; the first failure raised once all have ended
    (none is left running, or failing unseen)."""
    answers = await asyncio.gather(*calls, return_exceptions=True)
    for answer in answers:
        if isinstance(answer, BaseException):
            raise answer
    return answers


def _as_is(answer: dict[str, Any]) -> dict[str, Any]:
    return answer


def _instance_of(selector: str) -> str | None:
    """The `host:port` of a selector that names one instance exactly, else None."""
    found = re.fullmatch(r'\{instance="([^"\\]*)"\}', selector)
    return found[1] if found else None


def _nothing_new(selector: str, since: datetime | None) -> PrometheusRead | Failure:
    """What a target without samples read: none after `since`, or no series at all."""
    return PrometheusRead(Scrapes()) if since is not None else _no_series(selector)


def _no_series(selector: str) -> Failure:
    return Failure(FailureKind.PROMETHEUS, f"Prometheus holds no spec-decode series for {selector}")


__all__ = ["PrometheusAPI", "PrometheusRead", "SourceError"]
