"""The one protocol every source implements: what it reads of a window's targets at the start,
at the stop, and while the window is open. Sources only read; the window calls store.

A scraped window reads a baseline at its start and its end at its stop (the background
sampler adds samples between); a window read from Prometheus reads nothing at its start and
its whole chain (baseline, samples, end) at its stop. Either way the arithmetic gets one
`TargetReading` per snapshot, and the window calls never ask which source it was.
"""

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from specdec_collector.core.readings import Reading, SnapshotPhase, TargetReading
from specdec_collector.core.targets import Target
from specdec_collector.schemas import WindowCreate


@dataclass(frozen=True, slots=True)
class Chain:
    """What a source read of one target at a window's stop: the end; the baseline when the
    start read none; the samples not stored yet; and notes for the result."""

    after: TargetReading
    before: TargetReading | None = None
    samples: Sequence[TargetReading] = ()
    notes: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class StartCheck:
    """A start being checked: its body, its targets as the source reads them, the team, and
    the connections its source opens ahead (the start waits a moment for them)."""

    body: WindowCreate
    targets: Sequence[Target]
    team: str
    openings: "list[asyncio.Task[None]]" = field(default_factory=list)


# A point of a target's timeline: when, which snapshot it is, and what it read.
TimelinePoint = tuple[datetime, SnapshotPhase, Reading]


# A start's reading of every target's baseline, as its check prepared it: None if the source
# reads none at the start.
StartRead = Callable[[], Awaitable[list[TargetReading] | None]]


class CounterSource(Protocol):
    """Where a window's counters come from."""

    def targets(self, targets: Sequence[Target]) -> list[Target]:
        """The window's targets as this source reads them."""

    async def check_start(self, start: "StartCheck") -> StartRead:
        """`InvalidInput` naming the field if this source cannot read the window; else how
        it reads the baselines, once the window is written (what the check found, such as
        where each target connects, is what that reading uses). It may start opening
        connections for them (into `openings`)."""

    def check_stop(self, at: datetime | None) -> None:
        """`InvalidInput` naming `at` if this source cannot stop the window then."""

    async def read_stop(
        self, targets: Sequence[Target], start: datetime, end: datetime, team: str, past: bool
    ) -> list[Chain]:
        """Every target's chain at the stop, `end` (now, or a past time if `past`), in order."""

    async def read_open(
        self, targets: Sequence[Target], start: datetime
    ) -> list[list[TimelinePoint]] | None:
        """Every target's timeline so far while the window is open; None where the store
        holds it (what the start and the sampler stored)."""
