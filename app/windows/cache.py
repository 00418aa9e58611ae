"""Results of closed windows, kept per replica (they never change once stopped)."""

from collections import OrderedDict
from dataclasses import dataclass, field

from app.results import TargetResult


@dataclass(frozen=True, slots=True)
class ClosedResults:
    """Every target's result of a closed window, in order; each one JSON-encoded when first
    asked for (a stop's results are mostly read as a report, never as JSON)."""

    results: list[tuple[str, TargetResult]]
    _encoded: dict[str, bytes] = field(default_factory=dict)

    def encoded(self, target_key: str) -> bytes | None:
        """The result of target `target_key` as compact UTF-8 JSON (as Starlette's
        JSONResponse encodes it, finite floats only); None if the window has no such target."""
        found = self._encoded.get(target_key)
        if found is None:
            result = next((r for key, r in self.results if key == target_key), None)
            if result is None:
                return None
            found = self._encoded[target_key] = result.model_dump_json().encode()
        return found


class ResultsCache:
    """The results of recently read closed windows, by (team, window id).

    A closed window's results never change (a stop stores them with their overlaps; nothing
    rewrites them and windows are not deleted), so every replica may keep them: a read is then
    a dict lookup on the event loop instead of a thread-pool hop and two queries. The least
    recently read beyond `max_windows` are dropped. Used from the event loop only.
    """

    def __init__(self, max_windows: int) -> None:
        self._windows: OrderedDict[tuple[str, str], ClosedResults] = OrderedDict()
        self._max_windows = max_windows

    def get(self, team: str, window_id: str) -> ClosedResults | None:
        found = self._windows.get((team, window_id))
        if found is not None:
            self._windows.move_to_end((team, window_id))
        return found

    def put(
        self, team: str, window_id: str, results: list[tuple[str, TargetResult]]
    ) -> ClosedResults:
        closed = ClosedResults(results)
        if self._max_windows > 0:
            self._windows[(team, window_id)] = closed
            if len(self._windows) > self._max_windows:
                self._windows.popitem(last=False)
        return closed
