"""The Prometheus source: a window's counters read from the deployment's Prometheus.

Nothing is read at the start. At the stop, every target's chain comes from Prometheus' own
samples: the last scrape at or before the start, every scrape after it, and the first at or
after the stop (`sources.prometheus.api`); the arithmetic computes from them as from a scraped
window's snapshots. While the window is open its timeline is read live.
"""

from collections.abc import Sequence
from datetime import datetime

from specdec_collector.core.exposition import Series
from specdec_collector.core.promql import SourceError
from specdec_collector.core.readings import Failure, FailureKind, SnapshotPhase, TargetReading
from specdec_collector.core.targets import Target
from specdec_collector.exceptions import InvalidInput
from specdec_collector.sources.prometheus.api import PrometheusAPI, PrometheusRead
from specdec_collector.sources.protocol import Chain, StartCheck, StartRead, TimelinePoint
from specdec_collector.store.tables import utcnow

# How far in the future a client's clock may put `at` (clocks drift).
CLOCK_SLACK_S = 5.0


def _check_at(at: datetime | None) -> None:
    if at is not None and (at - utcnow()).total_seconds() > CLOCK_SLACK_S:
        raise InvalidInput(["body", "at"], "at is in the future")


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
        _check_at(body.at)
        return _nothing  # Prometheus is read at the stop

    def check_stop(self, at: datetime | None) -> None:
        _check_at(at)

    async def read_stop(
        self, targets: Sequence[Target], start: datetime, end: datetime, team: str, past: bool
    ) -> list[Chain]:
        if end < start:
            raise InvalidInput(["body", "at"], "the stop is before the window's start")
        selectors = [target.selector or "" for target in targets]
        reads = await self._api().read_many(selectors, start, end, wait=not past)
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
        reads = await self._api().read_many(selectors, start, now, wait=False)
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
