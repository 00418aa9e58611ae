"""The other windows open on a target while a window was: named, or counted."""

from datetime import datetime

from sqlalchemy import bindparam, func
from sqlalchemy import select as sa_select
from sqlmodel import Session

from app.models import TABLES, as_utc, utcnow
from app.results import OverlappingWindow, Overlaps, TargetResult
from app.windows.stored import StoredWindow

# Joins a window's target keys (host:port, never a line break) in one row.
_KEY_SEPARATOR = "\n"
# Built once, on the tables (plain rows, no ORM loading): every stop runs both.
_WINDOWS, _TARGETS = TABLES["window"], TABLES["window_target"]
_OPEN_BETWEEN = (
    sa_select(_WINDOWS.c.id, _WINDOWS.c.team, _WINDOWS.c.window_id, _WINDOWS.c.started_at,
              _WINDOWS.c.stopped_at)
    .where(
        _WINDOWS.c.id != bindparam("window_pk"),
        _WINDOWS.c.started_at < bindparam("end"),
        _WINDOWS.c.stopped_at.is_(None) | (_WINDOWS.c.stopped_at > bindparam("start")),
    )
    .order_by(_WINDOWS.c.started_at, _WINDOWS.c.id)
)  # fmt: skip
_SHARED_TARGETS = (
    sa_select(_TARGETS.c.window_pk, func.aggregate_strings(_TARGETS.c.target, _KEY_SEPARATOR))
    .where(
        _TARGETS.c.window_pk.in_(bindparam("window_pks", expanding=True)),
        _TARGETS.c.target.in_(bindparam("keys", expanding=True)),
    )
    .group_by(_TARGETS.c.window_pk)
)


def overlaps_of(
    session: Session, stored: StoredWindow, end: datetime | None = None
) -> dict[str, Overlaps]:
    """Per target: the other windows open on the same host:port during this one (until `end`).

    The counters are server-wide, so their benchmarks are in this window's numbers. Windows of
    the same team are named; other teams' are only counted. A stop stores them with each
    result: from then on they cannot change (a window that starts later does not overlap).
    """
    window = stored.window
    start = as_utc(window.started_at)
    if end is None:
        end = as_utc(window.stopped_at) if window.stopped_at else utcnow()
    found = {t.key: Overlaps() for t in stored.targets}
    # Two reads, each along an index: the windows open at some moment since `start` (open now,
    # or stopped after it), then which of them used these targets. A join driven by the target
    # would read every window that ever used it, and that grows with the stored history.
    candidates = {
        row[0]: row[1:]
        for row in session.execute(
            _OPEN_BETWEEN, {"window_pk": window.id, "start": start, "end": end}
        )
    }
    # Per other window, the targets it shares with this one, as one row each (the targets
    # joined in the database): 200 windows of one team on the same 20 servers made thousands
    # of (window, target) rows per stop, a tenth of a loaded collector's CPU.
    shared: dict[int, list[str]] = {}
    ids = list(candidates)
    for first in range(0, len(ids), 500):  # bounded IN lists (SQLite's variable limit)
        shared.update(
            (window_pk, keys.split(_KEY_SEPARATOR))
            for window_pk, keys in session.execute(
                _SHARED_TARGETS, {"window_pks": ids[first : first + 500], "keys": list(found)}
            )
        )
    now = utcnow()
    for other_pk, (team, other_id, other_start, other_stop) in candidates.items():
        keys = shared.get(other_pk)
        if keys is None:
            continue
        other_end = as_utc(other_stop) if other_stop else now
        seconds = round((min(end, other_end) - max(start, as_utc(other_start))).total_seconds(), 3)
        if seconds <= 0:
            continue
        # One object for every target the other window shares (a window of many targets
        # beside many windows made thousands per stop).
        if team == window.team:
            named = OverlappingWindow(id=other_id, seconds=seconds)
            for key in keys:
                found[key].windows.append(named)
        else:
            for key in keys:
                others = found[key].other_teams
                others.windows += 1
                others.seconds = round(others.seconds + seconds, 3)
    return found


def with_overlaps(
    session: Session, stored: StoredWindow, results: dict[int, TargetResult | None]
) -> dict[int, TargetResult | None]:
    """The results (by target id) with their overlaps: stored with them since a stop keeps
    them; computed now for a window still open or a result stored before that."""
    # An open window has no results yet: nothing to attach overlaps to (computing them for
    # every start and read of an open window was 18 % of a loaded collector's CPU).
    if all(result is None or result.overlaps is not None for result in results.values()):
        return results
    overlaps = overlaps_of(session, stored)
    return {
        target.id: None if result is None else result.with_overlaps(overlaps[target.key])
        for target in stored.targets
        for result in [results.get(target.id)]
    }
