"""The background sampler: APScheduler jobs that scrape open windows every few seconds.

One job per open window with a `sample_interval_s`; it scrapes all the window's targets at
once and stores one `sample` snapshot per target (a failed scrape is stored with its reason).
A job never runs twice at once and missed runs are coalesced, so a slow target cannot pile
up scrapes. The lifespan owns the scheduler: at start it recreates the jobs of every open
window from the database (a restart leaves a gap, never invented samples), and a daily job
deletes the samples of windows closed longer ago than `SPECDEC_SAMPLE_RETENTION_DAYS`.
"""

import contextlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from sqlalchemy import delete, update
from sqlalchemy.engine import CursorResult, Engine
from sqlmodel import Session, col, select
from starlette.concurrency import run_in_threadpool

from app.models import Snapshot, Window, WindowTarget, utcnow
from app.scrape import ScrapeConfig, ScrapeOutcome, scrape_all
from app.windows import StoredTarget, store_snapshots

logger = logging.getLogger(__name__)


def _job_id(window_pk: int) -> str:
    return f"sample-window-{window_pk}"


def store_samples(
    engine: Engine, window_pk: int, outcomes: Sequence[ScrapeOutcome], ids: dict[str, int]
) -> bool:
    """Store one sample per outcome unless the window was closed meanwhile; `True` if stored."""
    with Session(engine) as session:
        # Writing the window row first serialises with a stop: once the window is closed, a
        # late sample finds no open row and is dropped instead of landing after the result.
        touched: CursorResult[Any] = session.execute(  # type: ignore[assignment]
            update(Window)
            .where(col(Window.id) == window_pk, col(Window.state) == "open")
            .values(last_sampled_at=utcnow())
        )
        if touched.rowcount != 1:
            session.rollback()
            return False
        store_snapshots(session, ids, "sample", outcomes)
        session.commit()
        return True


def purge_samples(engine: Engine, closed_before: datetime) -> int:
    """Delete the samples of windows closed before `closed_before`; results stay. Returns count."""
    with Session(engine) as session:
        old_targets = (
            select(WindowTarget.id)
            .join(Window, col(Window.id) == col(WindowTarget.window_pk))
            .where(col(Window.state) == "closed", col(Window.stopped_at) < closed_before)
        )
        deleted: CursorResult[Any] = session.execute(  # type: ignore[assignment]
            delete(Snapshot).where(
                col(Snapshot.phase) == "sample", col(Snapshot.target_id).in_(old_targets)
            )
        )
        session.commit()
        return deleted.rowcount


def _open_windows(engine: Engine) -> list[tuple[int, float, list[StoredTarget]]]:
    with Session(engine) as session:
        windows = session.exec(
            select(Window).where(Window.state == "open", col(Window.sample_interval_s).is_not(None))
        ).all()
        found = []
        for window in windows:
            targets = session.exec(
                select(WindowTarget).where(WindowTarget.window_pk == window.id)
            ).all()
            stored = [StoredTarget.of(t) for t in targets]
            found.append((window.id or 0, window.sample_interval_s or 0.0, stored))
        return found


class Sampler:
    """Owns the scheduler and the jobs of open windows."""

    def __init__(
        self,
        engine: Engine,
        client: httpx.AsyncClient,
        scrape: ScrapeConfig,
        retention_days: float,
    ) -> None:
        self.engine = engine
        self.client = client
        self.scrape = scrape
        self.retention_days = retention_days
        self.scheduler = AsyncIOScheduler(timezone=UTC)

    async def start(self) -> None:
        """Start the scheduler, recreate the jobs of open windows, schedule the retention job."""
        self.scheduler.start()
        for window_pk, interval_s, targets in await run_in_threadpool(_open_windows, self.engine):
            self.watch(window_pk, targets, interval_s)
        self.scheduler.add_job(
            self.purge,
            "interval",
            hours=24,
            id="purge-samples",
            next_run_time=datetime.now(UTC) + timedelta(minutes=1),
            max_instances=1,
            coalesce=True,
            replace_existing=True,
        )

    def shutdown(self) -> None:
        """Stop the scheduler without waiting for running jobs (their writes are atomic)."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    def watch(self, window_pk: int, targets: Sequence[StoredTarget], interval_s: float) -> None:
        """Sample `targets` every `interval_s` s until `unwatch`; the first run one interval on."""
        self.scheduler.add_job(
            self.sample,
            "interval",
            seconds=interval_s,
            args=[window_pk, list(targets)],
            id=_job_id(window_pk),
            replace_existing=True,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(interval_s)),
        )

    def unwatch(self, window_pk: int) -> None:
        """Remove the window's job, if it has one."""
        with contextlib.suppress(JobLookupError):
            self.scheduler.remove_job(_job_id(window_pk))

    def watching(self, window_pk: int) -> bool:
        """Whether the window has a sampling job."""
        return self.scheduler.get_job(_job_id(window_pk)) is not None

    async def sample(self, window_pk: int, targets: list[StoredTarget]) -> None:
        """One sampling run: scrape every target at once, store what came back."""
        outcomes = await scrape_all(self.client, [t.parsed() for t in targets], self.scrape)
        ids = {t.key: t.id for t in targets}
        stored = await run_in_threadpool(store_samples, self.engine, window_pk, outcomes, ids)
        if not stored:
            self.unwatch(window_pk)

    async def purge(self) -> None:
        """The daily retention run."""
        cutoff = utcnow() - timedelta(days=self.retention_days)
        deleted = await run_in_threadpool(purge_samples, self.engine, cutoff)
        if deleted:
            logger.info("deleted %d samples of windows closed before %s", deleted, cutoff)
