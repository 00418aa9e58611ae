"""The public view of one window: targets, baselines, results with overlaps."""

from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from specdec_collector.core.arithmetic import absolute_totals
from specdec_collector.core.readings import Failure, Reading, SnapshotPhase
from specdec_collector.core.results import TargetResult
from specdec_collector.exceptions import WindowNotFound
from specdec_collector.schemas import TargetPublic, WindowView
from specdec_collector.store.db import read_session
from specdec_collector.store.tables import Window, as_utc
from specdec_collector.windows.catalogue import keys_of, reading_of
from specdec_collector.windows.overlaps import with_overlaps
from specdec_collector.windows.storage import find_window, snapshots_of
from specdec_collector.windows.stored import StoredWindow


def _baselines_of(session: Session, stored: StoredWindow) -> dict[int, Reading]:
    """Per target id: the series of its `before` scrape, or that scrape's error."""
    ids = [t.id for t in stored.targets]
    befores = snapshots_of(session, ids, [SnapshotPhase.BEFORE])
    catalog = keys_of(session, befores)
    return {
        target_id: reading_of(snapshots[0], catalog)
        for target_id, snapshots in befores.items()
        if snapshots
    }


def public_view(
    session: Session,
    stored: StoredWindow,
    baselines: dict[int, Reading] | None = None,
    results: dict[int, TargetResult | None] | None = None,
) -> WindowView:
    """The public view; `baselines` and `results` (by target id) when the caller holds them."""
    if baselines is None:
        baselines = _baselines_of(session, stored)
    if results is None:
        results = {target.id: target.result for target in stored.targets}
    return view_from(stored, baselines, with_overlaps(session, stored, results))


def view_from(
    stored: StoredWindow,
    baselines: dict[int, Reading],
    results: dict[int, TargetResult | None] | None = None,
) -> WindowView:
    """The public view from what a start or stop just computed: no query (the results, if
    any, carry their overlaps, as a stop stores them): a small one is built on the event loop."""
    targets = []
    for target in stored.targets:
        phase = baselines.get(target.id)
        result = (results or {}).get(target.id)
        before = None
        if isinstance(phase, dict):
            # A stop's result summed the same baseline already (`raw.before`).
            counted = result.raw.before if result is not None and result.raw else None
            before = counted if counted is not None else absolute_totals(phase).raw()
        targets.append(
            TargetPublic(
                target=target.name,
                url=target.url,
                header_names=[name for name, _ in target.headers],
                before=before,
                before_error=phase.text if isinstance(phase, Failure) else None,
                result=result,
            )
        )
    window = stored.window
    return WindowView(
        **header_fields(window),
        started_by=window.started_by,
        stopped_by=window.stopped_by,
        targets=targets,
    )


def header_fields(window: Window) -> dict[str, Any]:
    """What every public view of a window shows: id, team, state, labels, interval, times."""
    return {
        "id": window.window_id,
        "team": window.team,
        "state": window.state,
        "labels": window.labels,
        "sample_interval_s": window.sample_interval_s,
        "started_at": as_utc(window.started_at),
        "stopped_at": as_utc(window.stopped_at) if window.stopped_at else None,
    }


def read_view(database: Engine, team: str, window_id: str) -> WindowView:
    """The window with its targets' baselines and, once closed, their results."""
    with read_session(database) as session:
        stored = find_window(session, team, window_id)
        if stored is None:
            raise WindowNotFound(window_id)
        return public_view(session, stored)
