"""A stop's write: every target's result from its snapshots, stored with the stop's readings."""

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, insert, true, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import CursorResult, Engine
from sqlmodel import Session

from specdec_collector.core.exposition import SeriesKey
from specdec_collector.core.figures import build_result
from specdec_collector.core.readings import (
    Failure,
    FailureKind,
    Reading,
    SnapshotPhase,
    TargetReading,
    series_churn_text,
)
from specdec_collector.core.results import Overlaps, TargetResult
from specdec_collector.schemas import WindowState
from specdec_collector.sources.protocol import Chain
from specdec_collector.store.db import EncodedJSON, read_session
from specdec_collector.store.json_rows import given_rows, rows_json
from specdec_collector.store.tables import TABLES, as_utc
from specdec_collector.store.transaction import WriteTransaction
from specdec_collector.windows.catalogue import (
    all_known,
    endpoints_over_budget,
    keys_of,
    reading_of,
)
from specdec_collector.windows.overlaps import overlaps_of
from specdec_collector.windows.storage import insert_snapshots, snapshot_rows, snapshots_of
from specdec_collector.windows.stored import Actor, StoredSnapshot, StoredTarget, StoredWindow

_WINDOWS, _TARGETS, _SNAPSHOTS = TABLES["window"], TABLES["window_target"], TABLES["snapshot"]
# `id + 0`, not `id`: PostgreSQL answers max(id) by walking the primary key back from the newest
# snapshot of all until one is the window's, through every snapshot stored since by any window
# (thousands under load, in the stop's write); max of an expression is taken over the window's
# own snapshots, found through their target ids.
_LATEST_SNAPSHOT = sa_select(func.max(_SNAPSHOTS.c.id + 0)).where(
    _SNAPSHOTS.c.target_id.in_(bindparam("target_ids", expanding=True))
)
_STORE_RESULTS = update(_TARGETS).where(_TARGETS.c.id == bindparam("target_id"))


def _closing(window_pk: str, stopped_at: str, stopped_by: str) -> Any:
    """The update that closes a window where it is open, its parameters of these names."""
    return (
        update(_WINDOWS)
        .where(_WINDOWS.c.id == bindparam(window_pk), _WINDOWS.c.state == WindowState.OPEN)
        .values(
            state=WindowState.CLOSED,
            stopped_at=bindparam(stopped_at),
            stopped_by=bindparam(stopped_by),
        )
    )


_CLOSE_WINDOW = _closing("window_pk", "stopped_at", "stopped_by")


#: The columns of `summary_columns`.
SUMMARY_COLUMNS = (
    "status",
    "acceptance_rate",
    "acceptance_length",
    "num_drafts",
    "result_engine",
    "exact",
    "restarts",
)


def summary_columns(result: TargetResult) -> dict[str, Any]:
    """The columns a stored result is summarised into, for lists and filters."""
    data = result.data
    return {
        "status": result.status,
        "acceptance_rate": None if data is None else data.acceptance_rate,
        "acceptance_length": None if data is None else data.acceptance_length,
        "num_drafts": None if data is None else data.num_drafts,
        "result_engine": result.engine,
        "exact": result.exact,
        "restarts": result.restarts,
    }


@dataclass(frozen=True, slots=True)
class ClosedWindow:
    """What a stop stored: the baselines it read and the results it computed, by target id."""

    baselines: dict[int, Reading]
    results: dict[int, TargetResult | None]


@dataclass(frozen=True, slots=True)
class _StopInputs:
    """What a stop's results are computed from, read from the database: each target's stored
    snapshots, the series they name, and the windows that overlapped it."""

    stored_chains: dict[int, list[StoredSnapshot]]
    catalog: Mapping[int, SeriesKey]
    overlaps: dict[str, Overlaps]


def _inputs(session: Session, stored: StoredWindow, stopped_at: datetime) -> _StopInputs:
    """Read, through `session`, what the window's results are computed from."""
    stored_chains = snapshots_of(session, [t.id for t in stored.targets])
    return _StopInputs(
        stored_chains, keys_of(session, stored_chains), overlaps_of(session, stored, end=stopped_at)
    )


def _target_result(
    target: StoredTarget, chain: Chain, inputs: _StopInputs
) -> tuple[Reading | None, TargetResult]:
    """One target's baseline (None if it has none) and result, from its stored snapshots and
    what the source read at the stop (`chain`: the same readings its stored snapshots give
    back)."""
    catalog = inputs.catalog
    kept = inputs.stored_chains.get(target.id, [])
    final_at = as_utc(chain.after.taken_at)
    before = next((s for s in kept if s.phase == SnapshotPhase.BEFORE), None)
    # The source's own baseline (read at the stop), else the stored one; read once: the view
    # shows it too.
    baseline = chain.before.reading if chain.before else reading_of(before, catalog)
    # A sample scraped after the final reading (while this stop ran) is not part of it.
    samples = [
        reading_of(s, catalog)
        for s in kept
        if s.phase == SnapshotPhase.SAMPLE and as_utc(s.taken_at) <= final_at
    ] + [sample.reading for sample in chain.samples]
    started = chain.before.taken_at if chain.before else before.taken_at if before else None
    seconds = None if started is None else (final_at - as_utc(started)).total_seconds()
    result = build_result(target.url, baseline, chain.after.reading, samples, target.hints, seconds)
    if chain.notes:
        result = result.model_copy(update={"notes": [*(result.notes or []), *chain.notes]})
    has_baseline = chain.before is not None or before is not None
    return (baseline if has_baseline else None), result.with_overlaps(inputs.overlaps[target.name])


def _results(stored: StoredWindow, chains: Sequence[Chain], inputs: _StopInputs) -> ClosedWindow:
    """Every target's result (`chains` in the targets' order)."""
    closed = ClosedWindow({}, {})
    for target, chain in zip(stored.targets, chains, strict=True):
        _add(closed, target, _target_result(target, chain, inputs))
    return closed


def _add(
    closed: ClosedWindow, target: StoredTarget, found: tuple[Reading | None, TargetResult]
) -> None:
    baseline, result = found
    if baseline is not None:
        closed.baselines[target.id] = baseline
    closed.results[target.id] = result


def _may_have_landed(stored: StoredWindow, closed: ClosedWindow) -> bool:
    """Whether a snapshot may have been stored since `closed` was computed: a sample (of a
    sampled window), or a baseline its start was still taking. An unsampled window whose
    baselines were all read has none to come, and its stop skips a read of the writes'
    lane."""
    sampled = stored.window.sample_interval_s is not None
    return sampled or len(closed.baselines) < len(stored.targets)


def _latest_snapshot(session: Session, target_ids: list[int]) -> int:
    latest = session.execute(_LATEST_SNAPSHOT, {"target_ids": target_ids}).scalar_one()
    return int(latest or 0)


def _result_rows(closed: ClosedWindow) -> list[dict[str, Any]]:
    """The `window_target` updates that store `closed`'s results, each encoded as JSON."""
    return [
        {
            "target_id": target_id,
            "result": EncodedJSON(result.as_stored()),
            **summary_columns(result),
        }
        for target_id, result in closed.results.items()
        if result is not None
    ]


def _churn_refused(session: Session, chains: Sequence[Chain]) -> Sequence[Chain]:
    """The chains with every reading of an endpoint past its series budget a failure saying
    so (as `store_snapshots` would store it), so the results say it too; `chains` itself if
    none is."""
    wanted: dict[str, set[SeriesKey]] = {}
    for chain in chains:
        for reading in _readings(chain):
            if reading.series is not None:
                wanted.setdefault(reading.target.url, set()).update(reading.series)
    refused = endpoints_over_budget(session, wanted) if wanted else {}
    if not refused:
        return chains

    def checked(reading: TargetReading) -> TargetReading:
        budget = refused.get(reading.target.url)
        if budget is None or reading.series is None:
            return reading
        failure = Failure(FailureKind.SERIES_CHURN, series_churn_text(reading.target.url, budget))
        return TargetReading(reading.target, reading.taken_at, failure)

    return [
        replace(
            chain,
            after=checked(chain.after),
            before=None if chain.before is None else checked(chain.before),
            samples=[checked(sample) for sample in chain.samples],
        )
        for chain in chains
    ]


def _readings(chain: Chain) -> list[TargetReading]:
    return [chain.after, *([chain.before] if chain.before else []), *chain.samples]


@dataclass(frozen=True, slots=True)
class PreparedClose:
    """A stop's results, computed from the snapshots stored up to `read_up_to` and what the
    source read at the stop, and the rows that store them: what `add_close` writes unless a
    snapshot landed since."""

    chains: Sequence[Chain]
    stopped_at: datetime
    read_up_to: int
    closed: ClosedWindow
    rows: list[dict[str, Any]]


def prepare_close(
    database: Engine, stored: StoredWindow, chains: Sequence[Chain], stopped_at: datetime
) -> Generator[None, None, PreparedClose]:
    """Every target's result, computed before the database is written to, in steps (one per
    target; `store.store.Store.compute` runs them where the stop's size says). `chains` are
    what the source read at the stop, in the targets' order; `stopped_at` is when the window
    stopped (a window read from Prometheus may stop in the past).

    Outside the write: a stop's arithmetic inside it kept every writer waiting."""
    with read_session(database) as session:
        inputs = _inputs(session, stored, stopped_at)
    closed = ClosedWindow({}, {})
    for target, chain in zip(stored.targets, chains, strict=True):
        yield
        _add(closed, target, _target_result(target, chain, inputs))
    return _prepared(chains, stopped_at, inputs, closed)


def prepare_close_in(
    session: Session, stored: StoredWindow, chains: Sequence[Chain], stopped_at: datetime
) -> PreparedClose:
    """What `prepare_close` computes, through `session` (a write's, which reads its own
    writes)."""
    inputs = _inputs(session, stored, stopped_at)
    return _prepared(chains, stopped_at, inputs, _results(stored, chains, inputs))


def _prepared(
    chains: Sequence[Chain], stopped_at: datetime, inputs: _StopInputs, closed: ClosedWindow
) -> PreparedClose:
    read_up_to = max((s.id for chain in inputs.stored_chains.values() for s in chain), default=0)
    rows = _result_rows(closed)  # encoded here too: the write lock is held for writing only
    return PreparedClose(chains, stopped_at, read_up_to, closed, rows)


def _snapshot_rows(
    session: Session, stored: StoredWindow, chains: Sequence[Chain]
) -> list[dict[str, Any]]:
    """The snapshot rows of what the source read at the stop: the baselines it read, the
    samples, the final readings."""
    by_key = {t.name: t.id for t in stored.targets}
    befores = [chain.before for chain in chains if chain.before is not None]
    samples = [sample for chain in chains for sample in chain.samples]
    return [
        *snapshot_rows(session, by_key, SnapshotPhase.BEFORE, befores),
        *snapshot_rows(session, by_key, SnapshotPhase.SAMPLE, samples),
        *snapshot_rows(session, by_key, SnapshotPhase.AFTER, [chain.after for chain in chains]),
    ]


def _closes_at_once(session: Session, stored: StoredWindow, prepared: PreparedClose) -> bool:
    """Whether the stop's writes go in one statement (`_CLOSE_AT_ONCE`, PostgreSQL): where
    its results stand as they were computed (no snapshot can have landed since) and its
    snapshots add nothing to the catalogue (every series they name is known, so no endpoint
    goes past its budget either)."""
    if session.get_bind().dialect.name != "postgresql" or not prepared.rows:
        return False
    if _may_have_landed(stored, prepared.closed):
        return False
    named = (
        key
        for chain in prepared.chains
        for reading in _readings(chain)
        if reading.series is not None
        for key in reading.series
    )
    return all_known(session, named)


def _close_at_once(
    session: Session, stored: StoredWindow, actor: Actor, prepared: PreparedClose
) -> ClosedWindow | None:
    """`add_close` in one statement: the window closed, its snapshots and results stored
    where it was open (None, having written nothing, where another stop came first). The
    writes' lane waits for each statement: apart, a stop's would be three round trips."""
    snapshots = _snapshot_rows(session, stored, prepared.chains)
    params = {
        "closing": stored.pk,
        "closing_at": prepared.stopped_at,
        "closing_by": actor.key,
        "closing_snapshots": rows_json(snapshots, _SNAPSHOT_COLUMNS),
        "closing_results": rows_json(prepared.rows, _RESULT_COLUMNS),
    }
    if session.execute(_CLOSE_AT_ONCE, params).first() is None:
        return None
    stored.window.state, stored.window.stopped_at = WindowState.CLOSED, prepared.stopped_at
    stored.window.stopped_by = actor.key
    return prepared.closed


#: The columns of a stop's snapshots and of its results (`_result_rows`' keys).
_SNAPSHOT_COLUMNS = ("target_id", "phase", "taken_at", "error", "error_kind", "counters")
_RESULT_COLUMNS = ("target_id", "result", *SUMMARY_COLUMNS)


def _close_at_once_statement() -> Any:
    # Its parameters named apart from the columns of the update it is part of (`window_pk`).
    closing = _closing("closing", "closing_at", "closing_by")
    closed = closing.returning(_WINDOWS.c.id).cte("closed_window")
    snapshot_types = {name: _SNAPSHOTS.c[name].type for name in _SNAPSHOT_COLUMNS}
    snapshots, given = given_rows("closing_snapshots", snapshot_types)
    # A row each where the window's close returned its id (one row), none else.
    only_if_closed = sa_select(*snapshots).select_from(closed.join(given, true()))
    stored_snapshots = (
        insert(_SNAPSHOTS)
        .from_select(list(_SNAPSHOT_COLUMNS), only_if_closed)
        .cte("closed_snapshots")
    )
    result_types = {"target_id": _TARGETS.c.id.type} | {
        name: _TARGETS.c[name].type for name in _RESULT_COLUMNS[1:]
    }
    (target_id, *values), _ = given_rows("closing_results", result_types, encoded={"result"})
    return (
        update(_TARGETS)
        .values(dict(zip(_RESULT_COLUMNS[1:], values, strict=True)))
        .where(_TARGETS.c.window_pk == closed.c.id, _TARGETS.c.id == target_id)
        .returning(_TARGETS.c.id)
        .add_cte(closed)
        .add_cte(stored_snapshots)
    )


#: PostgreSQL: the window closed where it is open (a WITH), its snapshots inserted and its
#: targets' results set where it was (each given as one JSON text, `store.json_rows`): rows
#: come back only where it was open.
_CLOSE_AT_ONCE = _close_at_once_statement()


def add_close(
    transaction: WriteTransaction,
    stored: StoredWindow,
    actor: Actor,
    prepared: PreparedClose,
    at_once: bool = True,
) -> ClosedWindow | None:
    """Store what the source read at the stop and every target's result, and close the
    window, in `transaction`; None (having written nothing) if another stop came
    first. The results are computed again if a snapshot (a sample) landed after `prepared`
    read them. On PostgreSQL, one statement where nothing can have changed them
    (`_closes_at_once`), unless not `at_once` (SPECDEC_STOP_WRITE_AT_ONCE)."""
    session = transaction.session
    if at_once and _closes_at_once(session, stored, prepared):
        return _close_at_once(session, stored, actor, prepared)
    ids = [t.id for t in stored.targets]
    closed, rows, stopped_at = prepared.closed, prepared.rows, prepared.stopped_at
    # The conditional update goes first: it takes the write lock, so no sample lands from here
    # on, and of two concurrent stops only the first stores results.
    updated: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        _CLOSE_WINDOW,
        {"window_pk": stored.pk, "stopped_at": stopped_at, "stopped_by": actor.key},
    )
    if updated.rowcount != 1:
        return None
    # In the write, where the series are stored: an endpoint past its budget (rare: a hostile
    # one) has its readings failures, and the results are computed again with them.
    chains = _churn_refused(session, prepared.chains)
    if chains is not prepared.chains or (
        _may_have_landed(stored, closed) and _latest_snapshot(session, ids) != prepared.read_up_to
    ):
        closed = _results(stored, chains, _inputs(session, stored, stopped_at))
        rows = _result_rows(closed)
    insert_snapshots(session, _snapshot_rows(session, stored, chains))
    if rows:  # one Core executemany for all targets (its SET clause from the rows' keys)
        session.execute(_STORE_RESULTS, rows)
    # The stored window as this stop left it (the object is detached: no session sees this).
    stored.window.state, stored.window.stopped_at = WindowState.CLOSED, stopped_at
    stored.window.stopped_by = actor.key
    return closed
