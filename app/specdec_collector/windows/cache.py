"""What a replica keeps of windows between calls: the results of closed windows (they never
change once stopped) and the view of open ones (it changes only when they close)."""

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from specdec_collector.core.results import TargetResult

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class ClosedResults:
    """Every target's result of a closed window, in order; each one JSON-encoded when first
    asked for (a stop's results are mostly read as a report, never as JSON)."""

    results: list[tuple[str, TargetResult]]
    _encoded: dict[str, bytes] = field(default_factory=dict)

    def encoded(self, target_name: str) -> bytes | None:
        """The result of target `target_name` as compact UTF-8 JSON (as Starlette's
        JSONResponse encodes it, finite floats only); None if the window has no such target."""
        found = self._encoded.get(target_name)
        if found is None:
            result = next((r for key, r in self.results if key == target_name), None)
            if result is None:
                return None
            found = self._encoded[target_name] = result.model_dump_json().encode()
        return found


class RecentWindows(Generic[V]):
    """A value per window, by (team, window id), for the windows read last: at most
    `max_windows` of them, weighing `max_weight` in all (each value weighs what `put` says: its
    targets, its bytes), so that a few wide windows cannot fill the memory the many narrow
    ones were given.

    Windows are never deleted and a window id names one window of its team for good, so an
    entry never stands for another window. Used from the event loop only.
    """

    def __init__(self, max_windows: int, max_weight: int) -> None:
        self._windows: OrderedDict[tuple[str, str], tuple[V, int]] = OrderedDict()
        self._max_windows, self._max_weight = max_windows, max_weight
        self._weight = 0

    def get(self, team: str, window_id: str) -> V | None:
        found = self._windows.get((team, window_id))
        if found is None:
            return None
        self._windows.move_to_end((team, window_id))
        return found[0]

    def put(self, team: str, window_id: str, value: V, weight: int) -> None:
        self.drop(team, window_id)
        if self._max_windows <= 0 or weight > self._max_weight:
            return
        self._windows[(team, window_id)] = (value, weight)
        self._weight += weight
        while len(self._windows) > self._max_windows or self._weight > self._max_weight:
            self._weight -= self._windows.popitem(last=False)[1][1]

    def drop(self, team: str, window_id: str) -> None:
        found = self._windows.pop((team, window_id), None)
        if found is not None:
            self._weight -= found[1]


#: Targets' results a replica keeps in all: bounded by targets, not by windows alone, so that
#: a few windows of many targets cannot take the memory the many narrow ones were given.
MAX_KEPT_RESULTS = 8192
#: Bytes of open windows' views a replica keeps in all.
MAX_KEPT_VIEW_BYTES = 64 * 1024 * 1024


class ResultsCache:
    """The results of recently read closed windows, by (team, window id).

    A closed window's results never change (a stop stores them with their overlaps; nothing
    rewrites them), so every replica may keep them: a read is then a dict lookup on the event
    loop instead of a thread-pool hop and two queries.
    """

    def __init__(self, max_windows: int, max_targets: int = MAX_KEPT_RESULTS) -> None:
        self._windows = RecentWindows[ClosedResults](max_windows, max_targets)

    def get(self, team: str, window_id: str) -> ClosedResults | None:
        return self._windows.get(team, window_id)

    def put(
        self, team: str, window_id: str, results: list[tuple[str, TargetResult]]
    ) -> ClosedResults:
        closed = ClosedResults(results)
        self._windows.put(team, window_id, closed, len(results))
        return closed


#: The views of open windows this replica started or read, as JSON (far smaller than the
#: view's objects). An open window's view (its targets and their baselines) is fixed until it
#: closes, and whether it has closed is one indexed column. A read of an open window (a
#: dashboard polling it, the load benchmark's client after each start) would otherwise cost
#: the collector more than the start: its baselines read from the catalogue and summed anew.
OpenViews = RecentWindows[bytes]
