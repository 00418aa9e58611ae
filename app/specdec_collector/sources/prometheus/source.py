"""The Prometheus source: a window's counters read from the deployment's Prometheus.

Nothing is read at the start. At the stop, every target's chain comes from Prometheus' own
samples: the last scrape at or before the start, every scrape after it, and the first at or
after the stop (`sources.prometheus.api`), thinned to the ones the result needs; the
arithmetic computes from them as from a scraped window's snapshots. A window spans at most
SPECDEC_PROMETHEUS_MAX_SPAN_S.

While the window is open its timeline is read live, and kept (`LiveTimelines`): the next
read, by any viewer, or the stop asks Prometheus only for the samples since, and reads
within LIVE_REFRESH_S of the last one share it.
"""

import asyncio
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from specdec_collector.core.exposition import Series
from specdec_collector.core.promql import Scrapes, SourceError, thin
from specdec_collector.core.readings import Failure, FailureKind, SnapshotPhase, TargetReading
from specdec_collector.core.targets import Target
from specdec_collector.exceptions import InvalidInput
from specdec_collector.sources.prometheus.api import PrometheusAPI, PrometheusRead
from specdec_collector.sources.protocol import Chain, StartCheck, StartRead, TimelinePoint
from specdec_collector.store.tables import utcnow

# How far in the future a client's clock may put `at` (clocks drift).
CLOCK_SLACK_S = 5.0
# Reads of an open window's timeline this close to the last one get what it read.
LIVE_REFRESH_S = 1.0
# Open windows whose live timeline is kept, at most (the least recently read go first).
LIVE_WINDOWS_KEPT = 256


def _check_at(at: datetime | None, max_span_s: float) -> None:
    if at is None:
        return
    ahead = (at - utcnow()).total_seconds()
    if ahead > CLOCK_SLACK_S:
        raise InvalidInput(["body", "at"], "at is in the future")
    if -ahead > max_span_s:
        raise InvalidInput(
            ["body", "at"],
            f"at is more than {max_span_s:g} s ago: a window read from Prometheus spans at "
            "most SPECDEC_PROMETHEUS_MAX_SPAN_S",
        )


@dataclass(slots=True)
class _Live:
    """An open window's timeline as last read: each target's points (or why none), and when."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    reads: list[PrometheusRead | Failure] | None = None
    read_at: float = 0.0  # monotonic


class LiveTimelines:
    """The timelines of open windows read so far, by their targets and start (bounded, the
    least recently read dropped first)."""

    def __init__(self, kept: int = LIVE_WINDOWS_KEPT) -> None:
        self._kept = kept
        self._entries: OrderedDict[tuple[tuple[str, ...], datetime], _Live] = OrderedDict()

    def entry(self, selectors: Sequence[str], start: datetime) -> _Live:
        key = (tuple(selectors), start)
        found = self._entries.get(key)
        if found is None:
            found = self._entries[key] = _Live()
            while len(self._entries) > self._kept:
                self._entries.popitem(last=False)
        self._entries.move_to_end(key)
        return found

    def drop(self, selectors: Sequence[str], start: datetime) -> None:
        self._entries.pop((tuple(selectors), start), None)


def _chain(
    read: PrometheusRead | Failure, start: datetime
) -> list[tuple[datetime, Series]] | Failure:
    """A target's scrapes from its baseline on, as Prometheus holds them, or why there are none."""
    if isinstance(read, Failure):
        return read
    try:
        return read.scrapes.since(start).points
    except SourceError as exc:
        return Failure(FailureKind.PROMETHEUS, str(exc))


async def _nothing() -> None:
    return None


class PrometheusSource:
    """Reads through `api`; None when this collector reads no Prometheus (every window of
    this source is then refused at its start, naming the setting)."""

    def __init__(self, api: PrometheusAPI | None) -> None:
        self.api = api
        self.live = LiveTimelines()

    def _api(self) -> PrometheusAPI:
        assert self.api is not None, "a window read from Prometheus needs one"
        return self.api

    def targets(self, targets: Sequence[Target]) -> list[Target]:
        return [target.in_prometheus() for target in targets]  # `host:port`: its `instance`

    async def check_start(self, start: StartCheck) -> StartRead:
        body = start.body
        if self.api is None:
            raise InvalidInput(
                ["body", "source"], "this collector reads no Prometheus (SPECDEC_PROMETHEUS_URL)"
            )
        if body.sample_interval_s is not None:
            raise InvalidInput(
                ["body", "sample_interval_s"],
                "a window read from Prometheus has Prometheus' own samples: no sampling",
            )
        _check_at(body.at, self.api.max_span_s)
        return _nothing  # Prometheus is read at the stop

    def check_stop(self, at: datetime | None) -> None:
        _check_at(at, self._api().max_span_s if self.api is not None else float("inf"))

    async def _read(
        self, selectors: Sequence[str], start: datetime, end: datetime, wait: bool
    ) -> list[PrometheusRead | Failure]:
        """Every target's samples from its baseline at `start` to `end`: what the window's
        live timeline holds already, and what Prometheus holds since (all of it if a target
        had none yet)."""
        api = self._api()
        live = self.live.entry(selectors, start)
        async with live.lock:
            known = live.reads
            if known is None or any(isinstance(read, Failure) for read in known):
                fresh = await api.read_many(selectors, start, end, wait)
            else:
                since = min(
                    (
                        read.scrapes.points[-1][0]
                        for read in known
                        if isinstance(read, PrometheusRead) and read.scrapes.points
                    ),
                    default=start,
                )
                more = await api.read_many(selectors, start, end, wait, since=since)
                fresh = [
                    _joined(old, new, end, api.max_points)
                    for old, new in zip(known, more, strict=True)
                ]
            live.reads, live.read_at = fresh, time.monotonic()
            return fresh

    async def read_stop(
        self, targets: Sequence[Target], start: datetime, end: datetime, team: str, past: bool
    ) -> list[Chain]:
        if end < start:
            raise InvalidInput(["body", "at"], "the stop is before the window's start")
        span_s, max_span_s = (end - start).total_seconds(), self._api().max_span_s
        if past and span_s > max_span_s:
            raise InvalidInput(
                ["body", "at"],
                f"the window would span {span_s:g} s: a window read from Prometheus spans "
                f"at most {max_span_s:g} s (SPECDEC_PROMETHEUS_MAX_SPAN_S)",
            )
        selectors = [target.selector or "" for target in targets]
        if span_s > max_span_s:
            too_long = Failure(
                FailureKind.PROMETHEUS,
                f"the window spans {span_s:.0f} s, more than the {max_span_s:g} s a window "
                "read from Prometheus may (SPECDEC_PROMETHEUS_MAX_SPAN_S): not read",
            )
            reads: list[PrometheusRead | Failure] = [too_long] * len(targets)
        else:
            reads = await self._read(selectors, start, end, wait=not past)
        self.live.drop(selectors, start)
        chains = []
        for target, read in zip(targets, reads, strict=True):
            chain = _chain(read, start)
            if isinstance(chain, Failure):
                chains.append(
                    Chain(TargetReading(target, end, chain), TargetReading(target, start, chain))
                )
                continue
            (began, before), (ended, after) = chain[0], chain[-1]
            chains.append(
                Chain(
                    after=TargetReading(target, ended, after),
                    before=TargetReading(target, began, before),
                    samples=[TargetReading(target, when, series) for when, series in chain[1:-1]],
                    notes=[read.note] if isinstance(read, PrometheusRead) and read.note else [],
                )
            )
        return chains

    async def read_open(
        self, targets: Sequence[Target], start: datetime
    ) -> list[list[TimelinePoint]]:
        now = utcnow()
        selectors = [target.selector or "" for target in targets]
        live = self.live.entry(selectors, start)
        if live.reads is not None and time.monotonic() - live.read_at < LIVE_REFRESH_S:
            reads = live.reads
        elif (now - start).total_seconds() > self._api().max_span_s:
            span = f"the window has been open for more than {self._api().max_span_s:g} s"
            reads = [Failure(FailureKind.PROMETHEUS, f"{span}: its stop reads nothing")] * len(
                targets
            )
        else:
            reads = await self._read(selectors, start, now, wait=False)
        timelines: list[list[TimelinePoint]] = []
        for read in reads:
            chain = _chain(read, start)
            if isinstance(chain, Failure):
                timelines.append([(now, SnapshotPhase.BEFORE, chain)])
                continue
            phases = [SnapshotPhase.BEFORE, *[SnapshotPhase.SAMPLE] * (len(chain) - 1)]
            timelines.append(
                [(when, phase, series) for phase, (when, series) in zip(phases, chain, strict=True)]
            )
        return timelines


def _joined(
    known: PrometheusRead | Failure, more: PrometheusRead | Failure, end: datetime, max_points: int
) -> PrometheusRead | Failure:
    """A target's samples read before, followed by those read since (thinned again)."""
    if isinstance(more, Failure) or isinstance(known, Failure):
        return more
    try:
        kept = thin(known.scrapes.followed_by(more.scrapes.points).until(end).points, max_points)
    except SourceError as exc:
        return Failure(FailureKind.PROMETHEUS, str(exc))
    return PrometheusRead(Scrapes(kept), more.note)
