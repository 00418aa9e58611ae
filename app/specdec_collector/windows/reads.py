"""Reads of stored windows: results, comparisons, timelines."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from specdec_collector.core.arithmetic import thin_timeline, timeline
from specdec_collector.core.comparison import compare_results
from specdec_collector.core.figures import bounded_result
from specdec_collector.core.readings import Reading
from specdec_collector.core.results import TargetResult
from specdec_collector.exceptions import WindowNotFound, WindowOpen
from specdec_collector.schemas import WindowState
from specdec_collector.store.db import read_session
from specdec_collector.store.tables import as_utc
from specdec_collector.windows.catalogue import keys_of, reading_of
from specdec_collector.windows.overlaps import with_overlaps
from specdec_collector.windows.storage import find_window, in_chain_order, load_window, snapshots_of
from specdec_collector.windows.stored import StoredTarget, StoredWindow
from specdec_collector.windows.views import header_fields


def read_comparison(database: Engine, team: str, window_ids: Sequence[str]) -> dict[str, Any]:
    """The windows named, side by side per target (see `compare_results`)."""
    with read_session(database) as session:
        stored = [find_window(session, team, window_id) for window_id in window_ids]
    missing = [wid for wid, found in zip(window_ids, stored, strict=True) if found is None]
    if missing:
        raise WindowNotFound(missing[0])
    found = [s for s in stored if s is not None]
    return {
        "windows": [header_fields(s.window) for s in found],
        "targets": compare_results(
            [(s.window.window_id, {t.name: t.result for t in s.targets}) for s in found]
        ),
    }


def read_results(database: Engine, team: str, window_id: str) -> list[tuple[str, TargetResult]]:
    """(`host:port`, result with overlaps) of every target of a closed window, in order."""
    with read_session(database) as session:
        stored = find_window(session, team, window_id)
        if stored is None:
            raise WindowNotFound(window_id)
        if stored.window.state != WindowState.CLOSED:
            raise WindowOpen(window_id)
        results = with_overlaps(session, stored, {t.id: t.result for t in stored.targets})
    missing = "no result was stored for this target"
    return [
        (t.name, results[t.id] or TargetResult(status="na", url=t.url, error=missing))
        for t in stored.targets
    ]


def _points_of(
    database: Engine, targets: list[StoredTarget]
) -> list[tuple[StoredTarget, list[tuple[datetime, str, Reading]]]]:
    """Each target's snapshots, in chain order, as (time, phase, reading)."""
    ids = [t.id for t in targets]
    with read_session(database) as session:
        chains = snapshots_of(session, ids)
        catalog = keys_of(session, chains)
    return [
        (
            target,
            [
                (as_utc(s.taken_at), s.phase, reading_of(s, catalog))
                for s in in_chain_order(chains.get(target.id, []))
            ],
        )
        for target in targets
    ]


def read_timeline(
    database: Engine, stored: StoredWindow, target_name: str | None, max_points: int
) -> list[tuple[str, list[dict[str, Any]], bool]]:
    """(`host:port`, timeline rows, whether thinned) of the stored window's targets, or of the
    one named, at most about `max_points` rows each (`thin_timeline`)."""
    found = []
    for target, points in _points_of(database, stored.targets_named(target_name)):
        kept, thinned = thin_timeline(points, max_points)
        found.append((target.name, timeline(kept), thinned))
    return found


def read_bounded_results(
    database: Engine, team: str, window_id: str, start: datetime, end: datetime
) -> list[tuple[str, TargetResult]]:
    """(`host:port`, result) of every target of a closed window over the snapshots that
    enclose `start`..`end` (see `bounded_result`)."""
    stored = load_window(database, team, window_id)
    if stored.window.state != WindowState.CLOSED:
        raise WindowOpen(window_id)
    return [
        (target.name, bounded_result(target.url, points, start, end, target.hints))
        for target, points in _points_of(database, stored.targets)
    ]
