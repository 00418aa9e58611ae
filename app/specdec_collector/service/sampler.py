"""The background sampler: APScheduler jobs that scrape open windows every few seconds.

One job per open window with a `sample_interval_s`; it scrapes all the window's targets at
once and stores one `sample` snapshot per target (a failed scrape is stored with its reason).
A job never runs twice at once and missed runs are coalesced, so a slow target cannot pile
up scrapes.

Several replicas may share one database; each open window is sampled by exactly one of them,
the holder of its lease (`window.sampler_owner`, `window.sampler_lease_until`). The holder
renews the lease with each stored sample, and apart only when it is near its end (see
`windows.leases`), so a run on time is one write transaction, not a renewal before every
scrape as well. A store whose lease was lost is dropped, so no instant is sampled twice.
Every replica scans for windows whose lease ran out (or that are its own, after a restart)
every `SPECDEC_SAMPLER_SCAN_S` and takes them over: a dead owner's windows are sampled again
within two intervals, and the time nobody sampled shows as a gap, nothing is invented.

A daily job deletes the samples of windows closed longer ago than the retention.

At shutdown the runs in flight are given the scrape timeout and a second to finish and store
what they read; the rest are cancelled, each ending quietly (APScheduler logs a job's
cancellation as an error with its traceback).
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from sqlalchemy.exc import SQLAlchemyError

from specdec_collector.core.readings import TargetReading
from specdec_collector.core.targets import Target
from specdec_collector.store.db import (
    free_disk_bytes,
)
from specdec_collector.store.store import Store
from specdec_collector.store.tables import utcnow
from specdec_collector.telemetry import SAMPLES_SKIPPED
from specdec_collector.windows.catalogue import purge_catalogue
from specdec_collector.windows.leases import (
    claim_windows,
    claimable_windows,
    lease_seconds,
    purge_samples,
    renew_lease,
    renewal_due,
    renewal_margin_s,
    store_samples,
)
from specdec_collector.windows.stored import StoredTarget

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SampledWindow:
    """A window this replica samples: its targets as stored (their ids) and as scraped (parsed
    once for every run: a stored target is its URL and headers as text)."""

    pk: int
    team: str
    targets: list[StoredTarget]
    parsed: list[Target]
    interval_s: float


def _job_id(window_pk: int) -> str:
    return f"sample-window-{window_pk}"


class SampleReader(Protocol):
    """Where samples are read from (the scrape source: `sources.scrape.source.ScrapeSource`)."""

    @property
    def timeout_s(self) -> float:
        """The longest one reading takes."""
        ...

    async def read_samples(self, targets: Sequence[Target], team: str) -> list[TargetReading]:
        """A reading of every target, taken now, in the targets' order."""
        ...


class Sampler:
    """Owns the scheduler, this replica's sampling jobs and the lease scan.

    The scan is a task of its own rather than a scheduler job, and a lookup of the store's
    (on SQLite, on the event loop through a connection that never waits for a lock): it runs
    four times a second in every replica, and a scheduler's run and a thread hop each
    time would be a large share of what an idle collector does.
    """

    def __init__(
        self,
        store: Store,
        reader: SampleReader,
        retention_days: float,
        replica_id: str = "local",
        scan_interval_s: float = 0.25,
        min_free_disk_bytes: int = 0,
    ) -> None:
        self.store = store
        self.min_free_disk_bytes = min_free_disk_bytes
        self._low_disk_logged = 0.0
        self.reader = reader
        self.retention_days = retention_days
        self.replica_id = replica_id
        self.scan_interval_s = scan_interval_s
        self.scheduler = AsyncIOScheduler(timezone=UTC)
        self.watched: set[int] = set()
        self._running: set[asyncio.Task[Any]] = set()
        self._scan: asyncio.Task[None] | None = None
        # When each lease this replica holds ends, at the latest, by what it wrote last (the
        # database's end is as late or later: it is reckoned after the write begins).
        self._lease_ends: dict[int, float] = {}

    async def start(self) -> None:
        """Start the scheduler, take over the windows to sample, schedule the scan and retention."""
        self.scheduler.start()
        await self.claim(include_own=True)
        self._scan = asyncio.get_running_loop().create_task(self._scan_forever())
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

    async def stop(self) -> None:
        """Stop the scheduler; let the runs in flight finish within the scrape timeout, then
        cancel the rest (their writes are atomic: a cancelled run stores nothing)."""
        if self._scan is not None:
            self._scan.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan
            self._scan = None
        if not self.scheduler.running:
            return
        self.scheduler.pause()  # no new runs; the scheduler's shutdown cancels those running
        running = set(self._running)
        if running:
            await asyncio.wait(running, timeout=self.reader.timeout_s + 1.0)
        late = set(self._running)
        self.scheduler.shutdown(wait=False)
        if late:
            await asyncio.wait(late)

    @contextlib.contextmanager
    def _job(self, what: str) -> Iterator[None]:
        """One run of a job: known to `stop`, and ending quietly when cancelled there."""
        task = asyncio.current_task()
        if task is not None:
            self._running.add(task)
        try:
            yield
        except asyncio.CancelledError:
            logger.info("%s cancelled: the service stops", what)
        finally:
            if task is not None:
                self._running.discard(task)

    def watch(
        self,
        window_pk: int,
        team: str,
        targets: Sequence[StoredTarget],
        interval_s: float,
        *,
        at_once: bool = False,
    ) -> None:
        """Sample `targets` every `interval_s` s until `unwatch` (this replica holds the lease).

        The first run comes one interval on, or at once for a window taken over.
        """
        self.watched.add(window_pk)
        self._lease_ends.pop(window_pk, None)  # unknown here: the first run renews it
        first: dict[str, Any] = {"next_run_time": datetime.now(UTC)} if at_once else {}
        parsed = [t.parsed() for t in targets]
        window = SampledWindow(window_pk, team, list(targets), parsed, interval_s)
        self.scheduler.add_job(
            self.sample,
            "interval",
            seconds=interval_s,
            args=[window],
            id=_job_id(window_pk),
            replace_existing=True,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(interval_s)),
            **first,
        )

    def unwatch(self, window_pk: int) -> None:
        """Remove the window's job, if it has one."""
        self.watched.discard(window_pk)
        self._lease_ends.pop(window_pk, None)
        with contextlib.suppress(JobLookupError):
            self.scheduler.remove_job(_job_id(window_pk))

    async def _scan_forever(self) -> None:
        """The lease scan, every `scan_interval_s` after the last one ended, until `stop`
        cancels it (a claim cut short writes nothing: each is one conditional update)."""
        while True:
            await asyncio.sleep(self.scan_interval_s)
            await self._claim(include_own=False)

    async def claim(self, include_own: bool = False) -> None:
        """Take over the windows whose lease ran out (and at start-up this replica's own)."""
        with self._job("lease scan"):
            await self._claim(include_own)

    async def _claim(self, include_own: bool) -> None:
        owner = self.replica_id
        try:
            candidates = await self.store.lookup(claimable_windows, owner, include_own)
            if all(window_pk in self.watched for window_pk, _, _ in candidates):
                return
            claimed = await self.store.run(
                claim_windows, owner, set(self.watched), include_own, candidates
            )
        except SQLAlchemyError as exc:
            logger.warning("lease scan failed: %s", type(exc).__name__)
            return
        for window_pk, team, interval_s, targets in claimed:
            logger.info("replica %s samples window %d from now on", self.replica_id, window_pk)
            self.watch(window_pk, team, targets, interval_s, at_once=True)

    async def sample(self, window: SampledWindow) -> None:
        """One sampling run: confirm the lease, scrape every target at once, store it all."""
        with self._job(f"sample of window {window.pk}"):
            await self._sample(window)

    async def _sample(self, window: SampledWindow) -> None:
        window_pk, interval_s = window.pk, window.interval_s
        try:
            if not await self._hold_lease(window_pk, interval_s):
                self.unwatch(window_pk)
                return
            if self._disk_low():
                return  # the room left is the starts' and stops'
            scraping = asyncio.ensure_future(self.reader.read_samples(window.parsed, window.team))
            outcomes = await self._scraped_holding_lease(scraping, window_pk, interval_s)
            if outcomes is None:
                self.unwatch(window_pk)
                return
            ids = {t.name: t.id for t in window.targets}
            writing = time.time()  # the lease's end is reckoned from a moment after this one
            stored = await self.store.run(
                store_samples, window_pk, outcomes, ids, self.replica_id, interval_s
            )
        except SQLAlchemyError as exc:
            # The database is away: keep the job; the lease decides who samples once it is back.
            logger.warning("sample of window %d not stored: %s", window_pk, type(exc).__name__)
            return
        except Exception as exc:
            # One line, not APScheduler's traceback every interval; the stop still closes it.
            logger.error("sample of window %d failed: %s", window_pk, type(exc).__name__)
            return
        if not stored:
            self.unwatch(window_pk)
            return
        self._renewed(window_pk, writing, interval_s)

    def _renewed(self, window_pk: int, writing: float, interval_s: float) -> None:
        """Remember the end of a lease renewed by a write begun at `writing`."""
        self._lease_ends[window_pk] = writing + lease_seconds(interval_s)

    async def _hold_lease(self, window_pk: int, interval_s: float) -> bool:
        """Renew the window's lease if it is due (`renewal_due`); `False` if it is lost."""
        if not renewal_due(self._lease_ends.get(window_pk), time.time(), interval_s):
            return True
        writing = time.time()
        owned = await self.store.run(renew_lease, window_pk, self.replica_id, interval_s)
        if owned:
            self._renewed(window_pk, writing, interval_s)
        return owned

    async def _scraped_holding_lease(
        self,
        scraping: "asyncio.Future[list[TargetReading]]",
        window_pk: int,
        interval_s: float,
    ) -> list[TargetReading] | None:
        """The scrape's outcomes, renewing the lease each time it comes due while the scrape
        runs; `None` (the scrape cancelled) if the lease is lost meanwhile."""
        try:
            while True:
                lease_end = self._lease_ends.get(window_pk)
                if lease_end is not None:
                    due_in = lease_end - renewal_margin_s(interval_s) - time.time()
                    await asyncio.wait({scraping}, timeout=max(due_in, 0.0))
                if scraping.done():
                    return scraping.result()
                if not await self._hold_lease(window_pk, interval_s):
                    return None
        finally:
            if not scraping.done():
                scraping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await scraping

    def _disk_low(self) -> bool:
        """Whether the SQLite file's disk has less room than SPECDEC_MIN_FREE_DISK_BYTES: then
        no sample is taken, so that starts and stops still find room (said once a minute)."""
        free = free_disk_bytes(self.store.database)
        if free is None or free >= self.min_free_disk_bytes:
            return False
        SAMPLES_SKIPPED.inc()
        if time.monotonic() - self._low_disk_logged > 60:
            self._low_disk_logged = time.monotonic()
            logger.warning(
                "samples skipped: %d bytes free on the database's disk, less than "
                "SPECDEC_MIN_FREE_DISK_BYTES (%d)",
                free,
                self.min_free_disk_bytes,
            )
        return True

    async def purge(self) -> None:
        """The daily retention run."""
        cutoff = utcnow() - timedelta(days=self.retention_days)
        deleted = await self.store.run(purge_samples, cutoff)
        if deleted:
            logger.info("deleted %d samples of windows closed before %s", deleted, cutoff)
        unused = await self.store.run(purge_catalogue)
        if unused:
            logger.info("deleted %d catalogue series no snapshot names", unused)
