"""The other windows open on a target while a window was: named, or counted."""

import math
import threading
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from sqlalchemy import String, bindparam, type_coerce
from sqlalchemy import select as sa_select
from sqlmodel import Session

from specdec_collector.core.results import (
    MAX_NAMED_OVERLAPS,
    CountedWindows,
    OverlappingWindow,
    Overlaps,
    TargetResult,
)
from specdec_collector.store.db import MAX_IN_LIST, PerEngine
from specdec_collector.store.tables import TABLES, as_utc, utcnow
from specdec_collector.windows.stored import StoredWindow

# Built once, on the tables (plain rows, no ORM loading): every stop runs them. The times come
# back as stored (SQLite: text), read by `_micros`: SQLAlchemy's parser of SQLite's text
# costs more than the rest of a row.
_WINDOWS, _TARGETS = TABLES["window"], TABLES["window_target"]
_OPEN_BETWEEN = (
    sa_select(
        _WINDOWS.c.id,
        _WINDOWS.c.team,
        _WINDOWS.c.window_id,
        type_coerce(_WINDOWS.c.started_at, String),
        type_coerce(_WINDOWS.c.stopped_at, String),
    )
    .where(
        _WINDOWS.c.id != bindparam("window_pk"),
        _WINDOWS.c.started_at < bindparam("end"),
        _WINDOWS.c.stopped_at.is_(None) | (_WINDOWS.c.stopped_at > bindparam("start")),
    )
    .order_by(_WINDOWS.c.started_at, _WINDOWS.c.id)
)
_TARGET_KEYS_OF = sa_select(_TARGETS.c.window_pk, _TARGETS.c.target).where(
    _TARGETS.c.window_pk.in_(bindparam("window_pks", expanding=True))
)
#: Target keys each process keeps, of the windows it looked up last (their rows never change
#: once stored): a few MB, whatever number of targets hostile windows have.
MAX_KNOWN_TARGET_KEYS = 200_000


_EPOCH, _MICROSECOND = datetime(1970, 1, 1, tzinfo=UTC), timedelta(microseconds=1)


def _micros_of(moment: datetime) -> int:
    """An aware time in microseconds since the epoch: exact, as a timedelta's are (two of them
    apart, divided by 10**6, give the float `timedelta.total_seconds` gives)."""
    return (moment - _EPOCH) // _MICROSECOND


@lru_cache(maxsize=65_536)
def _micros(stored: str | datetime) -> int:
    """A stored time (PostgreSQL gives a datetime, SQLite its text) in microseconds since the
    epoch."""
    moment = stored if isinstance(stored, datetime) else datetime.fromisoformat(stored)
    return _micros_of(as_utc(moment))


# (window pk, team, window id) -> the names of the window's targets: another window of the
# same pk is another team's or id's (a pk is never reused while its row exists).
_WindowName = tuple[int, str, str]


class _KnownTargets:
    """The target names of the windows one process has looked up, by `_WindowName`."""

    def __init__(self) -> None:
        self._keys: OrderedDict[_WindowName, frozenset[str]] = OrderedDict()
        self._count = 0  # keys in `_keys`
        self._lock = threading.Lock()

    def of(self, session: Session, names: list[_WindowName]) -> dict[int, frozenset[str]]:
        """Each named window's target names (by pk), read from the database once."""
        with self._lock:
            known = self._keys
            found = {name[0]: held for name in names if (held := known.get(name)) is not None}
        missing = {name[0]: name for name in names if name[0] not in found}
        if not missing:
            return found
        read: dict[int, set[str]] = {pk: set() for pk in missing}
        pks = list(missing)
        for first in range(0, len(pks), MAX_IN_LIST):
            rows = session.execute(
                _TARGET_KEYS_OF, {"window_pks": pks[first : first + MAX_IN_LIST]}
            )
            for window_pk, key in rows:
                read[window_pk].add(key)
        with self._lock:
            for pk, keys in read.items():
                if missing[pk] not in self._keys:  # else another stop read it meanwhile
                    self._count += len(keys)
                found[pk] = self._keys[missing[pk]] = frozenset(keys)
            while self._count > MAX_KNOWN_TARGET_KEYS:
                self._count -= len(self._keys.popitem(last=False)[1])
        return found


# Each process's memory of each database's windows' targets.
_KNOWN_TARGETS = PerEngine(_KnownTargets)


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
    found = {t.name: Overlaps() for t in stored.targets}
    named: dict[str, list[OverlappingWindow]] = {name: [] for name in found}
    other_teams: dict[str, list[float]] = {name: [] for name in found}
    # The windows open at some moment since `start` (open now, or stopped after it), along an
    # index; then which of them used these targets, from each process's memory of every
    # window's targets (a window's targets never change). A join driven by the target would
    # read every window that ever used it, and that grows with the stored history; reading the
    # targets of every window beside this one anew at each stop would be a large part of the
    # stop's arithmetic.
    candidates = session.execute(
        _OPEN_BETWEEN, {"window_pk": window.id, "start": start, "end": end}
    ).all()
    keys_of = _KNOWN_TARGETS.of(session).of(session, [tuple(row[:3]) for row in candidates])
    mine = frozenset(found)
    # In whole microseconds, not datetimes: the same seconds, without a timedelta per window.
    start_us, end_us, now_us = _micros_of(start), _micros_of(end), _micros_of(utcnow())
    for other_pk, team, other_id, other_start, other_stop in candidates:
        keys = keys_of[other_pk] & mine
        if not keys:
            continue
        other_end_us = _micros(other_stop) if other_stop else now_us
        overlap_us = min(end_us, other_end_us) - max(start_us, _micros(other_start))
        seconds = round(overlap_us / 10**6, 3)
        if seconds <= 0:
            continue
        # One object for every target the other window shares (a window of many targets
        # beside many windows made thousands per stop).
        if team == window.team:
            entry = OverlappingWindow(id=other_id, seconds=seconds)  # a dict
            for key in keys:
                named[key].append(entry)
        else:
            for key in keys:
                other_teams[key].append(seconds)
    for key, overlaps in found.items():
        overlaps.windows, overlaps.more_windows = _named(named[key])
        overlaps.other_teams = _counted(other_teams[key])
    return found


def _counted(seconds: list[float]) -> CountedWindows:
    return CountedWindows(windows=len(seconds), seconds=round(math.fsum(seconds), 3))


def _named(entries: list[OverlappingWindow]) -> tuple[list[OverlappingWindow], CountedWindows]:
    """The MAX_NAMED_OVERLAPS longest of `entries` (in start order, as `entries` are), and the
    rest counted."""
    if len(entries) <= MAX_NAMED_OVERLAPS:
        return entries, CountedWindows()
    seconds = [entry["seconds"] for entry in entries]
    # Of equal ones the earliest started: a stable sort keeps their order, reversed too.
    by_length = sorted(range(len(seconds)), key=seconds.__getitem__, reverse=True)
    longest = sorted(by_length[:MAX_NAMED_OVERLAPS])
    rest = math.fsum(seconds) - math.fsum(seconds[index] for index in longest)
    counted = CountedWindows(windows=len(entries) - len(longest), seconds=round(rest, 3))
    return [entries[index] for index in longest], counted


def with_overlaps(
    session: Session, stored: StoredWindow, results: dict[int, TargetResult | None]
) -> dict[int, TargetResult | None]:
    """The results (by target id) with their overlaps: stored with them since a stop keeps
    them; computed now for a window still open or a result stored before that."""
    # An open window has no results yet: nothing to attach overlaps to (and computing them
    # for every start and read of an open window would be costly under load).
    if all(result is None or result.overlaps is not None for result in results.values()):
        return results
    overlaps = overlaps_of(session, stored)
    return {
        target.id: None if result is None else result.with_overlaps(overlaps[target.name])
        for target in stored.targets
        for result in [results.get(target.id)]
    }
