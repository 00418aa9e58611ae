"""Start, stop and read windows: scraping and storage, with idempotent retries.

Database work runs in the thread pool (SQLModel sessions are synchronous); scraping runs on
the event loop with the shared client. Every write is one short transaction that begins with
a write, so concurrent callers serialise on SQLite's write lock instead of failing.

Start is two transactions on purpose: the window row first (its unique `window_id` decides
which of several concurrent starts creates it), then the baseline. A start retried after a
crash between the two finds the window and does not scrape again; its stop then reports the
missing baseline instead of inventing one.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import update
from sqlalchemy.engine import CursorResult, Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select
from starlette.concurrency import run_in_threadpool

from app.config import Settings
from app.models import (
    Snapshot,
    TargetPublic,
    Window,
    WindowCreate,
    WindowPublic,
    WindowTarget,
    utcnow,
)
from app.promtext import series_from_json, series_to_json
from app.scrape import ScrapeOutcome, scrape_all
from app.specdecode import Phase, absolute_totals, build_result
from app.targets import Target, parse_target

logger = logging.getLogger(__name__)

NO_BASELINE = "baseline was never stored (the collector stopped before the start scrape finished)"


class WindowNotFound(LookupError):
    """No window has this id."""


class WindowConflict(Exception):
    """The call contradicts the stored window (other targets, or already stopped)."""


class WindowOpen(Exception):
    """The window has no results yet: it is still open."""


@dataclass(frozen=True, slots=True)
class _StoredTarget:
    id: int
    target: str
    url: str
    before: Snapshot | None
    result: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class _StoredWindow:
    window: Window
    targets: list[_StoredTarget]


def _as_utc(moment: datetime) -> datetime:
    # SQLite returns naive datetimes; every stored time is UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _load(session: Session, window_id: str) -> _StoredWindow | None:
    window = session.exec(select(Window).where(Window.window_id == window_id)).first()
    if window is None:
        return None
    rows = session.exec(
        select(WindowTarget)
        .where(WindowTarget.window_pk == window.id)
        .order_by(col(WindowTarget.ordinal))
    ).all()
    befores = {
        snapshot.target_id: snapshot
        for snapshot in session.exec(
            select(Snapshot)
            .where(col(Snapshot.target_id).in_([row.id for row in rows]))
            .where(Snapshot.phase == "before")
        ).all()
    }
    targets = [
        _StoredTarget(row.id or 0, row.target, row.url, befores.get(row.id or 0), row.result)
        for row in rows
    ]
    return _StoredWindow(window, targets)


def _phase_of(snapshot: Snapshot | None) -> Phase:
    if snapshot is None:
        return NO_BASELINE
    if snapshot.series is None:
        return snapshot.error or "scrape failed"
    return series_from_json(snapshot.series)


def _public(stored: _StoredWindow) -> WindowPublic:
    targets = []
    for target in stored.targets:
        before = target.before
        targets.append(
            TargetPublic(
                target=target.target,
                url=target.url,
                before=(
                    absolute_totals(series_from_json(before.series)).raw()
                    if before is not None and before.series is not None
                    else None
                ),
                before_error=before.error if before is not None else None,
                result=target.result,
            )
        )
    window = stored.window
    return WindowPublic(
        id=window.window_id,
        state=window.state,
        labels=window.labels,
        sample_interval_s=window.sample_interval_s,
        started_at=_as_utc(window.started_at),
        stopped_at=_as_utc(window.stopped_at) if window.stopped_at else None,
        targets=targets,
    )


def read_window(engine: Engine, window_id: str) -> WindowPublic:
    """The window with its targets and, once closed, their results."""
    with Session(engine) as session:
        stored = _load(session, window_id)
    if stored is None:
        raise WindowNotFound(window_id)
    return _public(stored)


def read_results(engine: Engine, window_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(`host:port`, result) of every target of a closed window, in the order started."""
    with Session(engine) as session:
        stored = _load(session, window_id)
    if stored is None:
        raise WindowNotFound(window_id)
    if stored.window.state != "closed":
        raise WindowOpen(window_id)
    return [(t.target, t.result or {}) for t in stored.targets]


def _insert_window(
    engine: Engine, window_id: str, body: WindowCreate, targets: Sequence[Target]
) -> bool:
    with Session(engine) as session:
        window = Window(
            window_id=window_id, labels=body.labels, sample_interval_s=body.sample_interval_s
        )
        session.add(window)
        try:
            session.flush()
        except IntegrityError:
            session.rollback()
            return False
        assert window.id is not None
        for ordinal, target in enumerate(targets):
            session.add(
                WindowTarget(
                    window_pk=window.id, ordinal=ordinal, target=target.key, url=target.url
                )
            )
        session.commit()
        return True


def _store_snapshot_rows(
    session: Session, ids: dict[str, int], phase: str, outcomes: Sequence[ScrapeOutcome]
) -> None:
    for outcome in outcomes:
        session.add(
            Snapshot(
                target_id=ids[outcome.target.key],
                phase=phase,
                taken_at=outcome.taken_at,
                error=outcome.error,
                series=series_to_json(outcome.series) if outcome.series is not None else None,
            )
        )


def _store_baseline(engine: Engine, window_id: str, outcomes: Sequence[ScrapeOutcome]) -> None:
    with Session(engine) as session:
        stored = _load(session, window_id)
        assert stored is not None
        ids = {t.target: t.id for t in stored.targets}
        _store_snapshot_rows(session, ids, "before", outcomes)
        session.commit()


def _close_window(
    engine: Engine,
    stored: _StoredWindow,
    outcomes: Sequence[ScrapeOutcome],
    results: dict[str, dict[str, Any]],
) -> None:
    with Session(engine) as session:
        # The conditional update goes first: it takes the write lock, and of two concurrent
        # stops only the one that still sees the window open stores its results.
        closed: CursorResult[Any] = session.execute(  # type: ignore[assignment]
            update(Window)
            .where(col(Window.id) == stored.window.id, col(Window.state) == "open")
            .values(state="closed", stopped_at=utcnow())
        )
        if closed.rowcount != 1:
            session.rollback()
            return
        ids = {t.target: t.id for t in stored.targets}
        _store_snapshot_rows(session, ids, "after", outcomes)
        for target in stored.targets:
            session.execute(
                update(WindowTarget)
                .where(col(WindowTarget.id) == target.id)
                .values(result=results[target.target])
            )
        session.commit()


def _same_targets(stored: _StoredWindow, targets: Sequence[Target]) -> bool:
    return {(t.target, t.url) for t in stored.targets} == {(t.key, t.url) for t in targets}


async def start_window(
    engine: Engine,
    client: httpx.AsyncClient,
    settings: Settings,
    window_id: str,
    body: WindowCreate,
) -> tuple[bool, WindowPublic]:
    """Create the window and store every target's baseline; `True` when it was created here.

    A start of an existing open window with the same targets is a retry: it returns the
    window unchanged and scrapes nothing.
    """
    targets = body.parsed_targets()
    created = await run_in_threadpool(_insert_window, engine, window_id, body, targets)
    if not created:
        stored = await run_in_threadpool(_load_or_raise, engine, window_id)
        if stored.window.state != "open":
            raise WindowConflict(f"window {window_id} is already stopped")
        if not _same_targets(stored, targets):
            known = ", ".join(t.target for t in stored.targets)
            raise WindowConflict(f"window {window_id} already exists with other targets: {known}")
        return False, _public(stored)
    outcomes = await scrape_all(
        client, targets, timeout_s=settings.scrape_timeout_s, max_bytes=settings.max_metrics_bytes
    )
    await run_in_threadpool(_store_baseline, engine, window_id, outcomes)
    failed = sum(outcome.error is not None for outcome in outcomes)
    logger.info("window %s started: %d targets, %d failed", window_id, len(targets), failed)
    return True, await run_in_threadpool(read_window, engine, window_id)


def _load_or_raise(engine: Engine, window_id: str) -> _StoredWindow:
    with Session(engine) as session:
        stored = _load(session, window_id)
    if stored is None:
        raise WindowNotFound(window_id)
    return stored


async def stop_window(
    engine: Engine, client: httpx.AsyncClient, settings: Settings, window_id: str
) -> WindowPublic:
    """Take the final scrape, compute and store every target's result, close the window.

    A stop of a closed window returns the stored results and scrapes nothing.
    """
    stored = await run_in_threadpool(_load_or_raise, engine, window_id)
    if stored.window.state == "closed":
        return _public(stored)
    targets = [parse_target(t.url) for t in stored.targets]
    outcomes = await scrape_all(
        client, targets, timeout_s=settings.scrape_timeout_s, max_bytes=settings.max_metrics_bytes
    )
    results: dict[str, dict[str, Any]] = {}
    for target, outcome in zip(stored.targets, outcomes, strict=True):
        after: Phase = outcome.series if outcome.series is not None else outcome.error or ""
        results[target.target] = build_result(target.url, _phase_of(target.before), after)
    await run_in_threadpool(_close_window, engine, stored, outcomes, results)
    ok = sum(result["status"] == "ok" for result in results.values())
    logger.info("window %s stopped: %d of %d targets ok", window_id, ok, len(results))
    return await run_in_threadpool(read_window, engine, window_id)
