"""Results of closed windows, kept per replica (they never change once stopped)."""

from collections import OrderedDict
from dataclasses import dataclass

from app.results import TargetResult


@dataclass(frozen=True, slots=True)
class ClosedResults:
    """Every target's result of a closed window, in order, and each one JSON-encoded."""

    results: list[tuple[str, TargetResult]]
    encoded: dict[str, bytes]


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
        # Compact UTF-8 JSON, as Starlette's JSONResponse encodes (finite floats only).
        encoded = {key: result.model_dump_json().encode() for key, result in results}
        closed = ClosedResults(results, encoded)
        if self._max_windows > 0:
            self._windows[(team, window_id)] = closed
            if len(self._windows) > self._max_windows:
                self._windows.popitem(last=False)
        return closed
