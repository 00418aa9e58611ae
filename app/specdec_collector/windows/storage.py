"""Reads and writes of windows, targets and snapshots."""

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import String, bindparam, cast, func, text, true
from sqlalchemy import insert as insert_rows
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from specdec_collector.core.exposition import SeriesKey
from specdec_collector.core.readings import (
    FailureKind,
    SnapshotPhase,
    TargetReading,
    series_churn_text,
)
from specdec_collector.core.targets import EngineHints, Target
from specdec_collector.exceptions import OverScrapeBudget, TooManyWindows, WindowNotFound
from specdec_collector.schemas import WindowCreate, WindowState
from specdec_collector.store.db import read_connection, read_session, upsert_insert
from specdec_collector.store.json_rows import given_rows, rows_json
from specdec_collector.store.tables import TABLES, Window, WindowTarget, utcnow
from specdec_collector.store.transaction import RunAlone, WriteTransaction
from specdec_collector.windows.catalogue import series_ids
from specdec_collector.windows.stored import Actor, StoredSnapshot, StoredTarget, StoredWindow

# The statements every start, read and stop runs, built once: SQLAlchemy memoises a built
# statement's cache key, and building one per call would cost more than a small query.
_WINDOWS, _TARGETS, _SNAPSHOTS = TABLES["window"], TABLES["window_target"], TABLES["snapshot"]
_WINDOW_BY_ID = select(Window).where(
    col(Window.team) == bindparam("team"), col(Window.window_id) == bindparam("window_id")
)
_TARGETS_OF = (
    sa_select(
        _TARGETS.c.id,
        _TARGETS.c.target,
        _TARGETS.c.url,
        _TARGETS.c.result,
        _TARGETS.c.headers,
        _TARGETS.c.named_engine,
        _TARGETS.c.draft_tokens_per_step,
        _TARGETS.c.verification,
    )
    .where(_TARGETS.c.window_pk == bindparam("window_pk"))
    .order_by(_TARGETS.c.ordinal)
)
_SNAPSHOTS_OF = (
    sa_select(
        _SNAPSHOTS.c.id,
        _SNAPSHOTS.c.target_id,
        _SNAPSHOTS.c.phase,
        _SNAPSHOTS.c.taken_at,
        _SNAPSHOTS.c.error,
        _SNAPSHOTS.c.counters,
        _SNAPSHOTS.c.error_kind,
    )
    .where(_SNAPSHOTS.c.target_id.in_(bindparam("target_ids", expanding=True)))
    .order_by(_SNAPSHOTS.c.taken_at, _SNAPSHOTS.c.id)
)
_SNAPSHOTS_IN_PHASES = _SNAPSHOTS_OF.where(
    _SNAPSHOTS.c.phase.in_(bindparam("phases", expanding=True))
)
_INSERT_SNAPSHOTS = insert_rows(_SNAPSHOTS)
_INSERT_TARGETS = insert_rows(_TARGETS)
# A window's target ids as one row of "ordinal:id" pairs: SQLite gives the GIL away for each
# row it steps to, and under load each one takes long to win back.
_TARGET_IDS_OF = sa_select(
    func.aggregate_strings(
        cast(_TARGETS.c.ordinal, String) + ":" + cast(_TARGETS.c.id, String), ","
    )
).where(_TARGETS.c.window_pk == bindparam("window_pk"))
_WINDOW_ID_OF = _WINDOW_BY_ID.with_only_columns(_WINDOWS.c.id)  # same row, id only
_OPEN_WINDOWS_OF_TEAM = sa_select(func.count()).where(
    _WINDOWS.c.team == bindparam("team"), _WINDOWS.c.state == WindowState.OPEN
)


_STATE_OF = sa_select(_WINDOWS.c.state).where(
    _WINDOWS.c.team == bindparam("team"), _WINDOWS.c.window_id == bindparam("window_id")
)


def window_state(database: Engine, team: str, window_id: str) -> str | None:
    """The window's state (`open`, `closed`), None if there is no such window."""
    with read_connection(database) as connection:
        state: str | None = connection.execute(
            _STATE_OF, {"team": team, "window_id": window_id}
        ).scalar()
        return state


def find_window(session: Session, team: str, window_id: str) -> StoredWindow | None:
    window = session.exec(_WINDOW_BY_ID, params={"team": team, "window_id": window_id}).first()
    if window is None:
        return None
    return StoredWindow(window, targets_of(session, window.id or 0))


def targets_of(session: Session, window_pk: int) -> list[StoredTarget]:
    """The window's targets, in order."""
    # Core rows, not ORM objects: a window of many targets built thousands of them per read.
    rows = session.execute(_TARGETS_OF, {"window_pk": window_pk})
    return [
        StoredTarget(
            row_id,
            key,
            url,
            result,
            tuple((headers or {}).items()),
            EngineHints(database, per_step, verification),
        )
        for row_id, key, url, result, headers, database, per_step, verification in rows
    ]


def load_window(database: Engine, team: str, window_id: str) -> StoredWindow:
    """The team's window and its targets; `WindowNotFound` when there is none."""
    with read_session(database) as session:
        stored = find_window(session, team, window_id)
    if stored is None:
        raise WindowNotFound(window_id)
    return stored


def snapshots_of(
    session: Session, target_ids: Iterable[int], phases: Sequence[SnapshotPhase] | None = None
) -> dict[int, list[StoredSnapshot]]:
    """Each target's snapshots (of `phases`, or all), in the order they were taken."""
    params: dict[str, Any] = {"target_ids": list(target_ids)}
    if phases is not None:
        params["phases"] = list(phases)
    query = _SNAPSHOTS_OF if phases is None else _SNAPSHOTS_IN_PHASES
    by_target: dict[int, list[StoredSnapshot]] = defaultdict(list)
    # Core rows: ORM objects cost more than the JSON of their counters.
    for row in session.execute(query, params):
        by_target[row[1]].append(StoredSnapshot(*row))
    return by_target


def in_chain_order(snapshots: list[StoredSnapshot]) -> list[StoredSnapshot]:
    # `before` first and `after` last whatever the clocks say; samples in time order between.
    rank = {SnapshotPhase.BEFORE: 0, SnapshotPhase.SAMPLE: 1, SnapshotPhase.AFTER: 2}
    return sorted(snapshots, key=lambda s: rank.get(s.phase, 1))


def _compact(value: float | None) -> float | None:
    return int(value) if value is not None and value.is_integer() else value


def store_snapshots(
    session: Session, ids: dict[str, int], phase: SnapshotPhase, outcomes: Sequence[TargetReading]
) -> None:
    """Add one snapshot row per outcome (counters, or the error): one statement once the
    series of these endpoints are known (see `windows.catalogue`)."""
    insert_snapshots(session, snapshot_rows(session, ids, phase, outcomes))


def insert_snapshots(session: Session, rows: list[dict[str, Any]]) -> None:
    """Insert `snapshot_rows`' rows, in one statement."""
    if rows:
        session.execute(_INSERT_SNAPSHOTS, rows)  # Core: no ORM bookkeeping


def snapshot_rows(
    session: Session, ids: dict[str, int], phase: SnapshotPhase, outcomes: Sequence[TargetReading]
) -> list[dict[str, Any]]:
    """The `snapshot` rows of the outcomes (by target name in `ids`), the series they name
    added to the catalogue where they are not in it."""
    wanted: dict[str, set[SeriesKey]] = defaultdict(set)
    for outcome in outcomes:
        if outcome.series is not None:
            wanted[outcome.target.url].update(outcome.series)
    known, refused = series_ids(session, wanted) if wanted else ({}, {})
    rows = []
    for outcome in outcomes:
        counters: list[list[float | None]] | None = None
        error, kind = outcome.error, outcome.kind
        if outcome.target.url in refused and outcome.series is not None:
            kind = FailureKind.SERIES_CHURN
            error = series_churn_text(outcome.target.url, refused[outcome.target.url])
        elif outcome.series is not None:
            # A counter is an integer below 2^53: stored as one ("486223", not "486223.0").
            counters = [
                [known[key], _compact(value.value), value.created]
                for key, value in outcome.series.items()
            ]
        rows.append(
            {
                "target_id": ids[outcome.target.name],
                "phase": phase,
                "taken_at": outcome.taken_at,
                "error": error,
                "error_kind": kind,
                "counters": counters,
            }
        )
    return rows


_TEAM_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('specdec-team:' || :team))")
_TEAM_LOCK_IF_FREE = text("SELECT pg_try_advisory_xact_lock(hashtext('specdec-team:' || :team))")


def _lock_team(transaction: WriteTransaction, team: str) -> None:
    """Take the team's lock (PostgreSQL) until the transaction ends. In a group of writes
    (`store.lanes`), only if it is free: else `RunAlone`, before anything is written.

    Taken once per transaction: a group holding the starts of one team (a benchmark's clients
    all start together) would otherwise ask for the lock it holds at each start, a round trip
    each in the writes' lane."""
    if team in transaction.teams_locked:
        return
    session = transaction.session
    if not transaction.together:
        session.execute(_TEAM_LOCK, {"team": team})
    elif not session.execute(_TEAM_LOCK_IF_FREE, {"team": team}).scalar_one():
        raise RunAlone(f"team {team}'s lock is held by another process")
    transaction.teams_locked.add(team)


def _target_rows(targets: Sequence[Target]) -> list[dict[str, Any]]:
    return [
        {
            "ordinal": ordinal,
            "target": target.name,
            "url": target.url,
            "headers": dict(target.headers) or None,
            "named_engine": target.hints.engine,
            "draft_tokens_per_step": target.hints.draft_tokens_per_step,
            "verification": target.hints.verification,
        }
        for ordinal, target in enumerate(targets)
    ]


def _too_many(team: str, max_open: int) -> TooManyWindows:
    return TooManyWindows(
        f"team {team} has {max_open} open windows, the most it may have "
        "(SPECDEC_MAX_OPEN_WINDOWS_PER_TEAM); stop one first"
    )


def _sampled_limit(
    session: Session, team: str, max_open: int, scrape_budget: float, scrapes_per_s: float
) -> TooManyWindows | OverScrapeBudget | None:
    """Which limit a sampled window of `team` that scrapes `scrapes_per_s` would pass, if any."""
    if session.execute(_OPEN_WINDOWS_OF_TEAM, {"team": team}).scalar_one() >= max_open:
        return _too_many(team, max_open)
    rate = _sampling_rate(session, team) + scrapes_per_s
    if rate > scrape_budget:
        return OverScrapeBudget(
            f"team {team}'s sampled windows would scrape {rate:.4g} targets per "
            f"second with this one, more than {scrape_budget:g} "
            "(SPECDEC_MAX_SCRAPES_PER_SECOND_PER_TEAM); sample less often or stop one"
        )
    return None


def add_window(
    transaction: WriteTransaction,
    actor: Actor,
    window_id: str,
    body: WindowCreate,
    targets: Sequence[Target],
    max_open: int,
    sampler_owner: str,
    first_lease_s: float,
    scrape_budget: float = math.inf,
    started_at: datetime | None = None,
) -> StoredWindow | None:
    """Add the window and its targets in `transaction`; None if the team has a window of this
    id already.

    `TooManyWindows` past `max_open` open windows of the team; `OverScrapeBudget` if a sampled
    window would bring the team's background scrapes past `scrape_budget` per second. Both
    are raised before anything is written, so the transaction may go on with other writes.
    """
    interval_s = body.sample_interval_s
    # Concurrent starts of one team count one after another: on SQLite the write lock makes
    # them, on PostgreSQL a lock of the team's, held to the transaction's end (the counts
    # below read committed rows: without it, concurrent starts would each count the others
    # out and together pass the limit). A start of a window already there is a retry,
    # whatever the limits say now.
    session = transaction.session
    dialect_name = session.get_bind().dialect.name
    on_postgresql = dialect_name == "postgresql"
    if on_postgresql:
        _lock_team(transaction, actor.team)
    too_many = _too_many(actor.team, max_open)
    # The window's insert counts them itself; a sampled window's count comes first here, so
    # that a team past both limits hears of the windows, and then its scrape budget.
    if interval_s:
        refused = _sampled_limit(
            session, actor.team, max_open, scrape_budget, len(targets) / interval_s
        )
        if refused is not None:
            if _exists(session, actor.team, window_id):
                return None
            raise refused
    window = Window(
        team=actor.team,
        window_id=window_id,
        labels=body.labels,
        sample_interval_s=interval_s,
        started_by=actor.key,
        # The replica that starts a sampled window holds its first lease.
        sampler_owner=sampler_owner if interval_s else None,
        sampler_lease_until=time.time() + first_lease_s if interval_s else None,
        source=body.source,
        started_at=started_at or utcnow(),
    )
    # Core inserts, not an ORM flush: every column from the model, whose defaults are
    # Python-side. The window's inserts nothing where the team has as many open windows as it
    # may, or a window of this id already (a retry, or a start at the same moment on another
    # replica): no error, so nothing to undo.
    params = window.model_dump(exclude={"id"}) | {"max_open": max_open}
    insert_all = _insert_all_postgresql if on_postgresql else _insert_all_sqlite
    window.id, pairs_of_targets = insert_all(session, params, _target_rows(targets))
    if window.id is None:
        if _exists(session, actor.team, window_id):
            return None  # a start of a window already there is a retry, whatever the limits say
        raise too_many
    ids = [target_id for _, target_id in sorted(pairs_of_targets)]
    stored = [
        StoredTarget(target_id, target.name, target.url, None, target.headers, target.hints)
        for target_id, target in zip(ids, targets, strict=True)
    ]
    return StoredWindow(window, stored)


_TargetIds = list[tuple[int, int]]  # (ordinal, id) of each target


def _insert_all_sqlite(
    session: Session, window: dict[str, Any], targets: list[dict[str, Any]]
) -> tuple[int | None, _TargetIds]:
    """The window's insert (its id, None if it inserted nothing), then its targets' (one
    multi-row statement) and their ids read back in one row."""
    window_pk = session.execute(_insert_window("sqlite"), window).scalar_one_or_none()
    if window_pk is None:
        return None, []
    session.execute(_INSERT_TARGETS, [{"window_pk": window_pk, **row} for row in targets])
    pairs = session.execute(_TARGET_IDS_OF, {"window_pk": window_pk}).scalar_one()
    return window_pk, [_ordinal_and_id(pair) for pair in pairs.split(",") if pair]


def _insert_all_postgresql(
    session: Session, window: dict[str, Any], targets: list[dict[str, Any]]
) -> tuple[int | None, _TargetIds]:
    """The window's insert and its targets' in one statement (`_insert_window_and_targets`):
    the ids of the window (None if it inserted nothing, and then no target either) and of
    its targets. The writes' lane waits for each statement: apart, a start's would be two
    round trips, one to learn the window's id."""
    params = window | {"new_targets": rows_json(targets, _TARGET_COLUMNS)}
    rows = session.execute(_insert_window_and_targets(), params).all()
    if not rows:
        return None, []
    return rows[0][0], [(ordinal, target_id) for _, ordinal, target_id in rows]


#: A target's columns as a start writes them (beside its window's id).
_TARGET_COLUMNS = (
    "ordinal",
    "target",
    "url",
    "headers",
    "named_engine",
    "draft_tokens_per_step",
    "verification",
)


@lru_cache(maxsize=1)
def _insert_window_and_targets() -> Any:
    """PostgreSQL: `_insert_window`'s insert as a WITH, and the targets (`new_targets`, see
    `store.json_rows`) inserted where it inserted a row; returning (window id, ordinal, id)
    of each target."""
    window = _insert_window("postgresql").cte("new_window")
    types = {name: _TARGETS.c[name].type for name in _TARGET_COLUMNS}
    columns, given = given_rows("new_targets", types)
    # One row per target where the window's insert returned its id (one row), none else.
    rows = sa_select(window.c.id, *columns).select_from(window.join(given, true()))
    return (
        insert_rows(_TARGETS)
        .from_select(["window_pk", *_TARGET_COLUMNS], rows)
        .returning(_TARGETS.c.window_pk, _TARGETS.c.ordinal, _TARGETS.c.id)
        .add_cte(window)
    )


def _ordinal_and_id(pair: str) -> tuple[int, int]:
    ordinal, _, target_id = pair.partition(":")
    return int(ordinal), int(target_id)


def _exists(session: Session, team: str, window_id: str) -> bool:
    params = {"team": team, "window_id": window_id}
    return session.execute(_WINDOW_ID_OF, params).first() is not None


@lru_cache(maxsize=4)
def _insert_window(dialect_name: str) -> Any:
    """A window's insert that does nothing where its team has `max_open` open windows or a
    window of its id, returning the new window's id (nothing when it did nothing)."""
    columns = [column for column in _WINDOWS.c if column.name != "id"]
    # The count binds `team`, as the row's team column does: the same value.
    open_count = _OPEN_WINDOWS_OF_TEAM.scalar_subquery()
    row = sa_select(*(bindparam(c.name, type_=c.type) for c in columns)).where(
        open_count < bindparam("max_open")
    )
    insert = upsert_insert(dialect_name)(_WINDOWS).from_select([c.name for c in columns], row)
    return insert.on_conflict_do_nothing(index_elements=["team", "window_id"]).returning(
        _WINDOWS.c.id
    )


def _sampling_rate(session: Session, team: str) -> float:
    """Background scrapes per second of the team's open sampled windows (targets / interval)."""
    rate = session.execute(
        sa_select(func.sum(1.0 / col(Window.sample_interval_s)))
        .select_from(WindowTarget)
        .join(Window, col(WindowTarget.window_pk) == col(Window.id))
        .where(
            col(Window.team) == team,
            col(Window.state) == WindowState.OPEN,
            col(Window.sample_interval_s).is_not(None),
        )
    ).scalar_one()
    return float(rate or 0.0)


def add_baseline(
    transaction: WriteTransaction, stored: StoredWindow, outcomes: Sequence[TargetReading]
) -> None:
    """Add the window's `before` snapshots in `transaction`."""
    ids = {t.name: t.id for t in stored.targets}
    store_snapshots(transaction.session, ids, SnapshotPhase.BEFORE, outcomes)
