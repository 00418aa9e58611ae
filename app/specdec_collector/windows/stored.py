"""What a stored window is, as the window calls pass it around; who acts on it."""

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from specdec_collector.core.readings import Failure, FailureKind, SnapshotPhase
from specdec_collector.core.results import TargetResult
from specdec_collector.core.targets import EngineHints, Target, parse_target
from specdec_collector.exceptions import TargetNotInWindow
from specdec_collector.store.tables import Window

NO_BASELINE = Failure(
    FailureKind.NOT_STORED,
    "baseline was never stored (the collector stopped before the start scrape finished)",
)


class SamplerHandle(Protocol):
    """What windows need of the background sampler: its replica id, add and remove jobs."""

    replica_id: str

    def watch(
        self, window_pk: int, team: str, targets: Sequence["StoredTarget"], interval_s: float
    ) -> None: ...

    def unwatch(self, window_pk: int) -> None: ...


class StoredSnapshot(NamedTuple):
    """One stored scrape of a target (a `snapshot` row, read as a plain row)."""

    id: int
    target_id: int
    phase: SnapshotPhase
    taken_at: datetime
    error: str | None
    counters: list[list[float | None]] | None
    error_kind: FailureKind | None


@dataclass(frozen=True, slots=True)
class Actor:
    """Who makes a call: the team it acts in and the key that made it (a label, not the key)."""

    team: str
    key: str


@dataclass(frozen=True, slots=True)
class StoredTarget:
    """A target as stored: its row id, name (`host:port`), URL and (once closed) result."""

    id: int
    name: str
    url: str
    # The result's JSON as stored, read into a `TargetResult` only when asked for: most calls
    # that load a window (a stop, a read of its results from the cache) never look at it.
    stored_result: dict[str, Any] | None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    hints: EngineHints = field(default_factory=EngineHints)

    @property
    def result(self) -> TargetResult | None:
        """The stored result (see `TargetResult.from_stored`), None while the window is open."""
        if self.stored_result is None:
            return None
        return TargetResult.from_stored(self.stored_result, self.url)

    def parsed(self) -> Target:
        """The `Target` to scrape, with its headers."""
        return replace(parse_target(self.url), headers=self.headers, hints=self.hints)


@dataclass(frozen=True, slots=True)
class StoredWindow:
    window: Window
    targets: list[StoredTarget]

    @property
    def pk(self) -> int:
        assert self.window.id is not None
        return self.window.id

    def targets_named(self, target_name: str | None) -> list[StoredTarget]:
        """Every target, or the one of `host:port` `target_name` (`TargetNotInWindow` if none)."""
        if target_name is None:
            return self.targets
        chosen = [t for t in self.targets if t.name == target_name]
        if not chosen:
            raise TargetNotInWindow(self.window.window_id, target_name)
        return chosen
