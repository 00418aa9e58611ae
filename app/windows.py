"""Start, stop and read windows: scraping and storage, with idempotent retries.

Database work runs in the thread pool (SQLModel sessions are synchronous); scraping runs on
the event loop with the shared client. Every write transaction begins with a write, so
concurrent callers queue on SQLite's write lock (or PostgreSQL's row lock) instead of failing.

Start is two transactions on purpose: the window row first (its unique `window_id` decides
which of several concurrent starts creates it), then the baseline. A start retried after a
crash between the two finds the window and does not scrape again; its stop then reports the
missing baseline instead of inventing one.

Stop scrapes first, then closes the window in one transaction that stores the final snapshots
and computes every result from what is stored (baseline, samples, final), so a sample stored
by the background sampler up to that moment is part of the result, and none after it.
"""

import base64
import binascii
import json
import logging
import time
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

import httpx
from sqlalchemy import exists, func, update
from sqlalchemy import insert as insert_rows
from sqlalchemy import select as sa_select
from sqlalchemy.engine import CursorResult, Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select
from starlette.concurrency import run_in_threadpool

from app.config import Settings
from app.counters import Role
from app.db import upsert_insert, write_session
from app.exceptions import (
    InvalidInput,
    TargetNotInWindow,
    TooManyWindows,
    WindowConflict,
    WindowNotFound,
    WindowOpen,
)
from app.models import (
    TABLES,
    Snapshot,
    TargetPublic,
    TargetSeries,
    TargetSummary,
    Window,
    WindowCreate,
    WindowPublic,
    WindowSummary,
    WindowTarget,
    as_utc,
    utcnow,
)
from app.promtext import Series, SeriesKey, SeriesValue, labels_from_text, labels_to_text
from app.scrape import ScrapeConfig, ScrapeOutcome, refusals, scrape_all
from app.specdecode import (
    Phase,
    absolute_totals,
    as_number,
    build_result,
    compare_results,
    timeline,
)
from app.targets import Target, parse_target

logger = logging.getLogger(__name__)

LEASE_INTERVALS = 1.5
"""A sampler lease lasts this many sampling intervals from its last renewal."""

NO_BASELINE = "baseline was never stored (the collector stopped before the start scrape finished)"


class SamplerHandle(Protocol):
    """What windows need of the background sampler: its replica id, add and remove jobs."""

    replica_id: str

    def watch(
        self, window_pk: int, targets: Sequence["StoredTarget"], interval_s: float
    ) -> None: ...

    def unwatch(self, window_pk: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Actor:
    """Who makes a call: the team it acts in and the key that made it (a label, not the key)."""

    team: str
    key: str


@dataclass(frozen=True, slots=True)
class StoredTarget:
    """A target as stored: its row id, `host:port` key, URL and (once closed) result."""

    id: int
    key: str
    url: str
    result: dict[str, Any] | None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def of(cls, row: WindowTarget) -> "StoredTarget":
        """From its row."""
        headers = tuple((row.headers or {}).items())
        return cls(row.id or 0, row.target, row.url, row.result, headers)

    def parsed(self) -> Target:
        """The `Target` to scrape, with its headers."""
        return replace(parse_target(self.url), headers=self.headers)


@dataclass(frozen=True, slots=True)
class StoredWindow:
    window: Window
    targets: list[StoredTarget]

    @property
    def pk(self) -> int:
        assert self.window.id is not None
        return self.window.id


# --- reading ------------------------------------------------------------------------------


def _load(session: Session, team: str, window_id: str) -> StoredWindow | None:
    window = session.exec(
        select(Window).where(Window.team == team, Window.window_id == window_id)
    ).first()
    if window is None:
        return None
    rows = session.exec(
        select(WindowTarget)
        .where(WindowTarget.window_pk == window.id)
        .order_by(col(WindowTarget.ordinal))
    ).all()
    return StoredWindow(window, [StoredTarget.of(row) for row in rows])


def load_window(engine: Engine, team: str, window_id: str) -> StoredWindow:
    """The team's window and its targets; `WindowNotFound` when there is none."""
    with Session(engine) as session:
        stored = _load(session, team, window_id)
    if stored is None:
        raise WindowNotFound(window_id)
    return stored


def _catalogue_rows(session: Session, target_ids: Iterable[int]) -> list[tuple[int, int, str, str]]:
    """(id, target id, family, labels text) of every series of these targets.

    Plain rows, not ORM objects: a window of many targets has thousands of series.
    """
    rows = session.execute(
        sa_select(
            col(TargetSeries.id),
            col(TargetSeries.target_id),
            col(TargetSeries.family),
            col(TargetSeries.labels),
        ).where(col(TargetSeries.target_id).in_(list(target_ids)))
    )
    return [(series_id, target_id, family, labels) for series_id, target_id, family, labels in rows]


def _catalog(session: Session, target_ids: Iterable[int]) -> dict[int, SeriesKey]:
    """The series catalogue of these targets, by id.

    Read it after the snapshots that refer to it: a snapshot commits with (or after) the
    series it names, so under READ COMMITTED a catalogue read later knows them all, where one
    read earlier can miss the series of a snapshot committed in between.
    """
    return {
        series_id: SeriesKey(Role(family), labels_from_text(labels))
        for series_id, _, family, labels in _catalogue_rows(session, target_ids)
    }


def _snapshots(
    session: Session, target_ids: Iterable[int], phases: Sequence[str] | None = None
) -> dict[int, list[Snapshot]]:
    query = select(Snapshot).where(col(Snapshot.target_id).in_(list(target_ids)))
    if phases is not None:
        query = query.where(col(Snapshot.phase).in_(phases))
    by_target: dict[int, list[Snapshot]] = defaultdict(list)
    for snapshot in session.exec(query.order_by(col(Snapshot.taken_at), col(Snapshot.id))).all():
        by_target[snapshot.target_id].append(snapshot)
    return by_target


def _phase_of(snapshot: Snapshot | None, catalog: dict[int, SeriesKey]) -> Phase:
    if snapshot is None:
        return NO_BASELINE
    if snapshot.counters is None:
        return snapshot.error or "scrape failed"
    series: Series = {}
    for series_id, value, created in snapshot.counters:
        assert series_id is not None
        series[catalog[int(series_id)]] = SeriesValue(value, created)
    return series


def _overlaps(
    session: Session, stored: StoredWindow, end: datetime | None = None
) -> dict[str, dict[str, Any]]:
    """Per target: the other windows open on the same host:port during this one (until `end`).

    The counters are server-wide, so their benchmarks are in this window's numbers. Windows of
    the same team are named; other teams' are only counted. A stop stores them with each
    result: from then on they cannot change (a window that starts later does not overlap).
    """
    window = stored.window
    start = as_utc(window.started_at)
    if end is None:
        end = as_utc(window.stopped_at) if window.stopped_at else utcnow()
    found: dict[str, dict[str, Any]] = {
        t.key: {"windows": [], "other_teams": {"windows": 0, "seconds": 0.0}}
        for t in stored.targets
    }
    # Two reads, each along an index: the windows open at some moment since `start` (open now,
    # or stopped after it), then which of them used these targets. A join driven by the target
    # would read every window that ever used it, and that grows with the stored history.
    candidates = {
        row[0]: row[1:]
        for row in session.execute(
            sa_select(
                col(Window.id),
                col(Window.team),
                col(Window.window_id),
                col(Window.started_at),
                col(Window.stopped_at),
            )
            .where(
                col(Window.id) != window.id,
                col(Window.started_at) < end,
                (col(Window.stopped_at).is_(None)) | (col(Window.stopped_at) > start),
            )
            .order_by(col(Window.started_at), col(Window.id))
        )
    }
    pairs: set[tuple[int, str]] = set()
    ids = list(candidates)
    for first in range(0, len(ids), 500):  # bounded IN lists (SQLite's variable limit)
        pairs.update(
            (window_pk, key)
            for window_pk, key in session.execute(
                sa_select(col(WindowTarget.window_pk), col(WindowTarget.target)).where(
                    col(WindowTarget.window_pk).in_(ids[first : first + 500]),
                    col(WindowTarget.target).in_(list(found)),
                )
            )
        )
    for other_pk, (team, other_id, other_start, other_stop) in candidates.items():
        other_end = as_utc(other_stop) if other_stop else utcnow()
        seconds = round((min(end, other_end) - max(start, as_utc(other_start))).total_seconds(), 3)
        if seconds <= 0:
            continue
        for key in found:
            if (other_pk, key) not in pairs:
                continue
            if team == window.team:
                found[key]["windows"].append({"id": other_id, "seconds": seconds})
            else:
                found[key]["other_teams"]["windows"] += 1
                found[key]["other_teams"]["seconds"] = round(
                    found[key]["other_teams"]["seconds"] + seconds, 3
                )
    return found


def _with_overlaps(
    session: Session, stored: StoredWindow, results: dict[int, dict[str, Any] | None]
) -> dict[int, dict[str, Any] | None]:
    """The results (by target id) with their overlaps: stored with them since a stop keeps
    them; computed now for a window still open or a result stored before that."""
    if all(result is not None and "overlaps" in result for result in results.values()):
        return results
    overlaps = _overlaps(session, stored)
    return {
        target.id: None if result is None else {**result, "overlaps": overlaps[target.key]}
        for target in stored.targets
        for result in [results.get(target.id)]
    }


def _baselines(session: Session, stored: StoredWindow) -> dict[int, Phase]:
    """Per target id: the series of its `before` scrape, or that scrape's error."""
    ids = [t.id for t in stored.targets]
    befores = _snapshots(session, ids, ["before"])
    catalog = _catalog(session, ids)  # after the snapshots: see `_catalog`
    return {
        target_id: _phase_of(snapshots[0], catalog)
        for target_id, snapshots in befores.items()
        if snapshots
    }


def _public(
    session: Session,
    stored: StoredWindow,
    baselines: dict[int, Phase] | None = None,
    results: dict[int, dict[str, Any] | None] | None = None,
) -> WindowPublic:
    """The public view; `baselines` and `results` (by target id) when the caller holds them.

    A start or stop has just computed them: passing them on saves reading back every
    snapshot and the series catalogue of the window.
    """
    if baselines is None:
        baselines = _baselines(session, stored)
    if results is None:
        results = {target.id: target.result for target in stored.targets}
    with_overlaps = _with_overlaps(session, stored, results)
    targets = []
    for target in stored.targets:
        phase = baselines.get(target.id)
        targets.append(
            TargetPublic(
                target=target.key,
                url=target.url,
                header_names=[name for name, _ in target.headers],
                before=absolute_totals(phase).raw() if isinstance(phase, dict) else None,
                before_error=phase if isinstance(phase, str) else None,
                result=with_overlaps.get(target.id),
            )
        )
    window = stored.window
    return WindowPublic(
        **_window_fields(window),
        started_by=window.started_by,
        stopped_by=window.stopped_by,
        targets=targets,
    )


def _window_fields(window: Window) -> dict[str, Any]:
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


def read_window(engine: Engine, team: str, window_id: str) -> WindowPublic:
    """The window with its targets' baselines and, once closed, their results."""
    with Session(engine) as session:
        stored = _load(session, team, window_id)
        if stored is None:
            raise WindowNotFound(window_id)
        return _public(session, stored)


def _view(
    engine: Engine,
    stored: StoredWindow,
    baselines: dict[int, Phase],
    results: dict[int, dict[str, Any] | None] | None = None,
) -> WindowPublic:
    with Session(engine) as session:
        return _public(session, stored, baselines, results)


def summary_columns(result: dict[str, Any]) -> dict[str, Any]:
    """The columns a stored result is summarised into, for lists and filters."""
    data = result.get("data") or {}
    return {
        "status": result.get("status"),
        "acceptance_rate": data.get("acceptance_rate"),
        "acceptance_length": data.get("acceptance_length"),
        "num_drafts": data.get("num_drafts"),
    }


@dataclass(frozen=True, slots=True)
class WindowFilter:
    """What `GET /windows` narrows the team's windows to; every field is optional."""

    state: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    target: str | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None
    min_acceptance_rate: float | None = None
    max_acceptance_rate: float | None = None


def encode_cursor(started_at: datetime, pk: int) -> str:
    """An opaque cursor: the (start time, row id) of the last window of a page."""
    raw = json.dumps([as_utc(started_at).isoformat(), pk]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """The inverse of `encode_cursor`; `InvalidInput` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        started, pk = json.loads(raw)
        return datetime.fromisoformat(started), int(pk)
    except (ValueError, TypeError, binascii.Error) as exc:
        raise InvalidInput(["query", "cursor"], "cursor is not one this service gave") from exc


def _filtered(query: Any, team: str, where: WindowFilter) -> Any:
    query = query.where(Window.team == team)
    if where.state is not None:
        query = query.where(Window.state == where.state)
    for name, value in where.labels:
        query = query.where(col(Window.labels)[name].as_string() == value)
    if where.started_after is not None:
        query = query.where(col(Window.started_at) >= where.started_after)
    if where.started_before is not None:
        query = query.where(col(Window.started_at) < where.started_before)
    target_conditions = []
    if where.target is not None:
        target_conditions.append(col(WindowTarget.target) == where.target)
    if where.min_acceptance_rate is not None:
        target_conditions.append(col(WindowTarget.acceptance_rate) >= where.min_acceptance_rate)
    if where.max_acceptance_rate is not None:
        target_conditions.append(col(WindowTarget.acceptance_rate) <= where.max_acceptance_rate)
    if target_conditions:
        # Windows with one target that meets every target condition at once.
        query = query.where(
            exists().where(col(WindowTarget.window_pk) == col(Window.id), *target_conditions)
        )
    return query


def list_windows(
    engine: Engine,
    team: str,
    limit: int,
    where: WindowFilter | None = None,
    *,
    oldest_first: bool = False,
    cursor: str | None = None,
) -> tuple[list[WindowSummary], str | None]:
    """A page of the team's windows (newest first by default) and the cursor of the next page.

    Two queries whatever the page size: the windows, then all their targets' summaries.
    """
    query = _filtered(select(Window), team, where or WindowFilter())
    started, pk = col(Window.started_at), col(Window.id)
    if cursor is not None:
        after_started, after_pk = decode_cursor(cursor)
        if oldest_first:
            query = query.where(
                (started > after_started) | ((started == after_started) & (pk > after_pk))
            )
        else:
            query = query.where(
                (started < after_started) | ((started == after_started) & (pk < after_pk))
            )
    order = (started.asc(), pk.asc()) if oldest_first else (started.desc(), pk.desc())
    with Session(engine) as session:
        windows = list(session.exec(query.order_by(*order).limit(limit + 1)).all())
        more = len(windows) > limit
        windows = windows[:limit]
        # The summary columns only: the stored results and headers are not needed here.
        rows = session.execute(
            sa_select(
                col(WindowTarget.window_pk),
                col(WindowTarget.target),
                col(WindowTarget.status),
                col(WindowTarget.acceptance_rate),
                col(WindowTarget.acceptance_length),
                col(WindowTarget.num_drafts),
            )
            .where(col(WindowTarget.window_pk).in_([w.id for w in windows]))
            .order_by(col(WindowTarget.window_pk), col(WindowTarget.ordinal))
        ).all()
    by_window: dict[int, list[TargetSummary]] = defaultdict(list)
    for window_pk, target, status, acceptance_rate, acceptance_length, num_drafts in rows:
        by_window[window_pk].append(
            TargetSummary(
                target=target,
                status=status,
                acceptance_rate=acceptance_rate,
                acceptance_length=acceptance_length,
                num_drafts=as_number(num_drafts) if num_drafts is not None else None,
            )
        )
    page = [WindowSummary(**_window_fields(w), targets=by_window[w.id or 0]) for w in windows]
    next_cursor = encode_cursor(windows[-1].started_at, windows[-1].id or 0) if more else None
    return page, next_cursor


def read_comparison(engine: Engine, team: str, window_ids: Sequence[str]) -> dict[str, Any]:
    """The windows named, side by side per target (see `compare_results`)."""
    with Session(engine) as session:
        stored = [_load(session, team, window_id) for window_id in window_ids]
    missing = [wid for wid, found in zip(window_ids, stored, strict=True) if found is None]
    if missing:
        raise WindowNotFound(missing[0])
    found = [s for s in stored if s is not None]
    return {
        "windows": [_window_fields(s.window) for s in found],
        "targets": compare_results(
            [(s.window.window_id, {t.key: t.result for t in s.targets}) for s in found]
        ),
    }


def read_results(engine: Engine, team: str, window_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(`host:port`, result with overlaps) of every target of a closed window, in order."""
    with Session(engine) as session:
        stored = _load(session, team, window_id)
        if stored is None:
            raise WindowNotFound(window_id)
        if stored.window.state != "closed":
            raise WindowOpen(window_id)
        results = _with_overlaps(session, stored, {t.id: t.result for t in stored.targets})
    return [(t.key, results[t.id] or {}) for t in stored.targets]


def read_timeline(
    engine: Engine, team: str, window_id: str, target_key: str | None
) -> list[tuple[str, list[dict[str, Any]]]]:
    """(`host:port`, timeline rows) of the window's targets, or of the one named."""
    with Session(engine) as session:
        stored = _load(session, team, window_id)
        if stored is None:
            raise WindowNotFound(window_id)
        targets = [t for t in stored.targets if target_key is None or t.key == target_key]
        if target_key is not None and not targets:
            raise TargetNotInWindow(window_id, target_key)
        ids = [t.id for t in targets]
        chains = _snapshots(session, ids)
        catalog = _catalog(session, ids)  # after the snapshots: see `_catalog`
    return [
        (
            target.key,
            timeline(
                [
                    (as_utc(s.taken_at), s.phase, _phase_of(s, catalog))
                    for s in _in_chain_order(chains.get(target.id, []))
                ]
            ),
        )
        for target in targets
    ]


def _in_chain_order(snapshots: list[Snapshot]) -> list[Snapshot]:
    # `before` first and `after` last whatever the clocks say; samples in time order between.
    rank = {"before": 0, "sample": 1, "after": 2}
    return sorted(snapshots, key=lambda s: rank.get(s.phase, 1))


# --- writing ------------------------------------------------------------------------------


def _catalogue_ids(
    session: Session, wanted: dict[int, dict[SeriesKey, str]]
) -> dict[tuple[int, str, str], int]:
    """Ids of (target, family, labels text) for every series in `wanted`, adding new ones.

    One query reads the catalogue of all these targets; series never seen before cost one
    insert for all of them, which returns their ids.
    """

    def read() -> dict[tuple[int, str, str], int]:
        return {
            (target_id, family, labels): series_id
            for series_id, target_id, family, labels in _catalogue_rows(session, wanted)
        }

    known = read()
    missing = [
        {"target_id": target_id, "family": key.role.value, "labels": text}
        for target_id, keys in wanted.items()
        for key, text in keys.items()
        if (target_id, key.role, text) not in known
    ]
    if missing:
        insert = upsert_insert(session.get_bind().dialect.name)
        table = TABLES["target_series"]
        # Core executemany, not a multi-row VALUES: its statement is compiled once and
        # cached, where one of N rows was compiled anew for every window.
        added = session.execute(
            insert(table)
            .on_conflict_do_nothing(index_elements=["target_id", "family", "labels"])
            .returning(table.c.id, table.c.target_id, table.c.family, table.c.labels),
            missing,
        )
        known.update(
            {
                (target_id, family, labels): series_id
                for series_id, target_id, family, labels in added
            }
        )
        if len(known) < sum(len(keys) for keys in wanted.values()):
            # Another writer added some of them at the same moment: the unique constraint kept
            # its rows, our inserts of those did nothing and returned nothing. Read them.
            known = read()
    return known


def store_snapshots(
    session: Session, ids: dict[str, int], phase: str, outcomes: Sequence[ScrapeOutcome]
) -> None:
    """Add one snapshot row per outcome (counters, or the error), in two or three statements."""
    wanted = {
        ids[outcome.target.key]: {key: labels_to_text(key.labels) for key in outcome.series}
        for outcome in outcomes
        if outcome.series is not None
    }
    known = _catalogue_ids(session, wanted) if wanted else {}
    rows = []
    for outcome in outcomes:
        target_id = ids[outcome.target.key]
        counters: list[list[float | None]] | None = None
        if outcome.series is not None:
            texts = wanted[target_id]
            counters = [
                [known[(target_id, key.role, texts[key])], value.value, value.created]
                for key, value in outcome.series.items()
            ]
        rows.append(
            {
                "target_id": target_id,
                "phase": phase,
                "taken_at": outcome.taken_at,
                "error": outcome.error,
                "counters": counters,
            }
        )
    if rows:
        session.execute(insert_rows(TABLES["snapshot"]), rows)  # Core: no ORM bookkeeping


def _insert_window(
    engine: Engine,
    actor: Actor,
    window_id: str,
    body: WindowCreate,
    targets: Sequence[Target],
    max_open: int,
    sampler_owner: str,
    first_lease_s: float,
) -> StoredWindow | None:
    """Add the window and its targets; None if the team has a window of this id already."""
    with write_session(engine) as session:
        interval_s = body.sample_interval_s
        window = Window(
            team=actor.team,
            window_id=window_id,
            labels=body.labels,
            sample_interval_s=interval_s,
            started_by=actor.key,
            # The replica that starts a sampled window holds its first lease.
            sampler_owner=sampler_owner if interval_s else None,
            sampler_lease_until=time.time() + first_lease_s if interval_s else None,
        )
        session.add(window)
        try:
            session.flush()
        except IntegrityError:
            session.rollback()
            return None
        # Counted after the insert, inside its transaction: on SQLite the write lock makes
        # concurrent starts of one team count one after another.
        open_count = session.exec(
            select(func.count())
            .select_from(Window)
            .where(Window.team == actor.team, Window.state == "open")
        ).one()
        if open_count > max_open:
            session.rollback()
            raise TooManyWindows(
                f"team {actor.team} has {max_open} open windows, the most it may have "
                "(SPECDEC_MAX_OPEN_WINDOWS_PER_TEAM); stop one first"
            )
        assert window.id is not None
        # One Core executemany that returns the new ids in order: no ORM objects, no read-back.
        rows = [
            {"window_pk": window.id, "ordinal": ordinal, "target": target.key,
             "url": target.url, "headers": dict(target.headers) or None}
            for ordinal, target in enumerate(targets)
        ]  # fmt: skip
        table = TABLES["window_target"]
        ids = session.scalars(
            insert_rows(table).returning(table.c.id, sort_by_parameter_order=True), rows
        ).all()
        session.expunge(window)  # kept as flushed: a commit would expire what it holds
        session.commit()
        stored = [
            StoredTarget(target_id, target.key, target.url, None, target.headers)
            for target_id, target in zip(ids, targets, strict=True)
        ]
        return StoredWindow(window, stored)


def _store_baseline(
    engine: Engine, stored: StoredWindow, outcomes: Sequence[ScrapeOutcome]
) -> None:
    with write_session(engine) as session:
        store_snapshots(session, {t.key: t.id for t in stored.targets}, "before", outcomes)
        session.commit()


@dataclass(frozen=True, slots=True)
class _Closed:
    """What a stop stored: the baselines it read and the results it computed, by target id."""

    baselines: dict[int, Phase]
    results: dict[int, dict[str, Any] | None]


def _close_window(
    engine: Engine, stored: StoredWindow, actor: Actor, outcomes: Sequence[ScrapeOutcome]
) -> _Closed | None:
    """Store the final scrape and every target's result; None if another stop came first."""
    stopped_at = utcnow()
    with write_session(engine) as session:
        # The conditional update goes first: it takes the write lock, so no sample lands while
        # the results are computed, and of two concurrent stops only the first stores results.
        closed: CursorResult[Any] = session.execute(  # type: ignore[assignment]
            update(Window)
            .where(col(Window.id) == stored.pk, col(Window.state) == "open")
            .values(state="closed", stopped_at=stopped_at, stopped_by=actor.key)
        )
        if closed.rowcount != 1:
            session.rollback()
            return None
        store_snapshots(session, {t.key: t.id for t in stored.targets}, "after", outcomes)
        session.flush()
        ids = [t.id for t in stored.targets]
        chains = _snapshots(session, ids)
        catalog = _catalog(session, ids)  # after the snapshots: see `_catalog`
        overlaps = _overlaps(session, stored, end=stopped_at)
        baselines: dict[int, Phase] = {}
        results: dict[int, dict[str, Any]] = {}
        for target in stored.targets:
            chain = chains.get(target.id, [])
            before = next((s for s in chain if s.phase == "before"), None)
            after = next(s for s in chain if s.phase == "after")
            # A sample scraped after the final scrape (while this stop ran) is not part of it.
            samples = [
                s for s in chain
                if s.phase == "sample" and as_utc(s.taken_at) <= as_utc(after.taken_at)
            ]  # fmt: skip
            if before is not None:
                baselines[target.id] = _phase_of(before, catalog)
            result = build_result(
                target.url,
                _phase_of(before, catalog),
                _phase_of(after, catalog),
                [_phase_of(sample, catalog) for sample in samples],
            )
            results[target.id] = {**result, "overlaps": overlaps[target.key]}
        # One executemany for all targets (an ORM bulk update by primary key).
        session.execute(
            update(WindowTarget),
            [
                {"id": target_id, "result": result, **summary_columns(result)}
                for target_id, result in results.items()
            ],
        )
        session.commit()
    # The stored window as this stop left it (the object is detached: no session sees this).
    stored.window.state, stored.window.stopped_at = "closed", stopped_at
    stored.window.stopped_by = actor.key
    return _Closed(baselines, {**results})


def _same_targets(stored: StoredWindow, targets: Sequence[Target]) -> bool:
    return {(t.key, t.url) for t in stored.targets} == {(t.key, t.url) for t in targets}


@dataclass(frozen=True, slots=True)
class ClosedResults:
    """Every target's result of a closed window, in order, and each one JSON-encoded."""

    results: list[tuple[str, dict[str, Any]]]
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
        self, team: str, window_id: str, results: list[tuple[str, dict[str, Any]]]
    ) -> ClosedResults:
        # Encoded as Starlette's JSONResponse encodes: compact, UTF-8, no NaN.
        encoded = {
            key: json.dumps(
                result, ensure_ascii=False, allow_nan=False, separators=(",", ":")
            ).encode()
            for key, result in results
        }
        closed = ClosedResults(results, encoded)
        if self._max_windows > 0:
            self._windows[(team, window_id)] = closed
            if len(self._windows) > self._max_windows:
                self._windows.popitem(last=False)
        return closed


# --- the calls ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Collector:
    """What the window calls need, owned by the app's lifespan."""

    engine: Engine
    client: httpx.AsyncClient
    scrape: ScrapeConfig
    sampler: SamplerHandle
    settings: Settings
    results: ResultsCache


async def _check_body(collector: Collector, body: WindowCreate, targets: Sequence[Target]) -> None:
    settings = collector.settings
    if len(targets) > settings.max_targets_per_window:
        raise InvalidInput(
            ["body", "targets"],
            f"{len(targets)} targets; a window has at most {settings.max_targets_per_window} "
            "(SPECDEC_MAX_TARGETS_PER_WINDOW)",
        )
    if len(body.labels) > settings.max_labels_per_window:
        raise InvalidInput(
            ["body", "labels"],
            f"{len(body.labels)} labels; a window has at most {settings.max_labels_per_window}",
        )
    for name, value in body.labels.items():
        if (
            not name
            or len(name) > settings.max_label_chars
            or len(value) > settings.max_label_chars
        ):
            raise InvalidInput(
                ["body", "labels", name[: settings.max_label_chars]],
                f"label names and values are 1-{settings.max_label_chars} characters",
            )
    for index, reason in enumerate(await refusals(targets, collector.scrape)):
        if reason is not None:
            raise InvalidInput(
                ["body", "targets", index],
                f"target {index} ({targets[index].key}) is refused: {reason}",
            )


async def start_window(
    collector: Collector, actor: Actor, window_id: str, body: WindowCreate
) -> tuple[bool, WindowPublic]:
    """Create the window, store every target's baseline, start sampling; `True` if created.

    A start of an existing open window with the same targets is a retry: it returns the
    window unchanged and scrapes nothing.
    """
    engine = collector.engine
    targets = body.parsed_targets()
    await _check_body(collector, body, targets)
    max_open = collector.settings.max_open_windows_per_team
    inserted = await run_in_threadpool(
        _insert_window,
        engine,
        actor,
        window_id,
        body,
        targets,
        max_open,
        collector.sampler.replica_id,
        # Long enough for the baseline scrape and the first sample: nobody takes it meanwhile.
        LEASE_INTERVALS * (body.sample_interval_s or 0) + collector.scrape.timeout_s,
    )
    if inserted is None:
        stored = await run_in_threadpool(load_window, engine, actor.team, window_id)
        if stored.window.state != "open":
            raise WindowConflict(f"window {window_id} is already stopped")
        if not _same_targets(stored, targets):
            known = ", ".join(t.key for t in stored.targets)
            raise WindowConflict(f"window {window_id} already exists with other targets: {known}")
        return False, await run_in_threadpool(read_window, engine, actor.team, window_id)
    stored = inserted
    outcomes = await scrape_all(collector.client, targets, collector.scrape)
    await run_in_threadpool(_store_baseline, engine, stored, outcomes)
    baselines: dict[int, Phase] = {
        target.id: outcome.series if outcome.series is not None else outcome.error or ""
        for target, outcome in zip(stored.targets, outcomes, strict=True)
    }
    if body.sample_interval_s is not None:
        collector.sampler.watch(stored.pk, stored.targets, body.sample_interval_s)
    failed = sum(outcome.error is not None for outcome in outcomes)
    logger.info(
        "window %s/%s started by %s: %d targets, %d failed",
        actor.team, window_id, actor.key, len(targets), failed,
    )  # fmt: skip
    return True, await run_in_threadpool(_view, engine, stored, baselines)


async def closed_results(collector: Collector, team: str, window_id: str) -> ClosedResults:
    """The results of a closed window; `WindowOpen` while it is open, `WindowNotFound`."""
    cached = collector.results.get(team, window_id)
    if cached is None:
        results = await run_in_threadpool(read_results, collector.engine, team, window_id)
        cached = collector.results.put(team, window_id, results)
    return cached


async def stop_window(collector: Collector, actor: Actor, window_id: str) -> WindowPublic:
    """Stop sampling, take the final scrape, store every target's result, close the window.

    A stop of a closed window returns the stored results and scrapes nothing.
    """
    engine = collector.engine
    stored = await run_in_threadpool(load_window, engine, actor.team, window_id)
    if stored.window.state == "closed":
        return await run_in_threadpool(read_window, engine, actor.team, window_id)
    collector.sampler.unwatch(stored.pk)
    targets = [t.parsed() for t in stored.targets]
    outcomes = await scrape_all(collector.client, targets, collector.scrape)
    closed = await run_in_threadpool(_close_window, engine, stored, actor, outcomes)
    if closed is None:  # another stop came first: its results are the ones stored
        return await run_in_threadpool(read_window, engine, actor.team, window_id)
    window = await run_in_threadpool(_view, engine, stored, closed.baselines, closed.results)
    ok = sum(t.result is not None and t.result["status"] == "ok" for t in window.targets)
    logger.info(
        "window %s/%s stopped by %s: %d of %d targets ok",
        actor.team, window_id, actor.key, ok, len(window.targets),
    )  # fmt: skip
    return window
