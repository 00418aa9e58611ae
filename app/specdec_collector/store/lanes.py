"""Lanes: a thread that runs jobs one at a time, first come first served; writes in groups,
in the lane of their key.

SQLite takes one write at a time, and a process computes one stop's results at a time (stops
computing at once contend for the GIL and none finishes sooner; one computing beside
another's write overlap, since SQLite runs statements without the GIL). Were each such job to
wait for its turn in a thread of the request pool, the waiting threads would hold the pool's
places, and under load every read, key check and stop's read of its targets would queue
behind them, and a stop's final scrape with it. A lane's thread gets only a share of the GIL
against a busy event loop, though: a small stop's results (most of them) are computed on the
loop instead (`store.store.Store.compute`), the larger ones' here.

A lane's jobs wait in its queue instead, and the pool stays free. The queue is first come first
served: a start's writes and a stop's alike. Both are what a benchmark waits on (for its run to
begin, and for its results); letting starts go first would make a loaded collector's stops
wait the longest.

Writes that wait together are written together: one transaction, one commit (group commit).
Many clients starting at once queue as many claims, each of which alone costs mostly its
commit and winning the GIL back after each statement; together they share both. A write
function raises a domain error (`SpecdecError`) only before it has written anything, so the
others of its transaction go on; any other failure rolls the transaction back and each write
of it runs again alone, so that one write's failure is never another's.

On PostgreSQL too the writes take turns in a lane and are grouped: each transaction costs
round trips and a commit's flush, and one team's starts take turns on the team's lock held to
each commit, so a group pays those once for all its writes. A group never waits for a team's
lock that another process holds: a write that would (`RunAlone`) runs alone after the
group's commit, so two replicas' groups cannot deadlock on two teams' locks taken in opposite
orders (it then waits, and the lane's next writes with it, for that other transaction: one
group's time). The other jobs (a stop's results) run in the request pool at once there.
"""

import asyncio
import queue
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.engine import Engine
from starlette.concurrency import run_in_threadpool

from specdec_collector.exceptions import SpecdecError
from specdec_collector.store.db import takes_turns, write_alone, write_session
from specdec_collector.store.transaction import RunAlone, WriteTransaction

P = ParamSpec("P")
T = TypeVar("T")

#: The most writes one transaction takes by default (SPECDEC_DB_WRITES_TOGETHER).
MAX_WRITES_TOGETHER = 64


@dataclass(slots=True)
class _Job:
    # A write takes the transaction; any other job nothing.
    run: Callable[..., Any]
    done: "Future[Any]"
    write: bool = False


# Put in the queue to stop the thread; it comes after every job queued, so it drains them first.
_STOP = _Job(lambda: None, Future())


class Lane:
    """Runs jobs one at a time, in the order they came, in a thread named `name` (`serial`);
    else each in the request pool, at once. A serial lane's writes go to `database`."""

    def __init__(
        self,
        name: str,
        *,
        serial: bool,
        database: Engine | None = None,
        together: int = MAX_WRITES_TOGETHER,
    ) -> None:
        self._database = database
        self._together = together  # the most writes one transaction takes
        self._queue: queue.SimpleQueue[_Job] | None = None
        self._thread: threading.Thread | None = None
        # The job taken from the queue that its thread runs next (a job that is not a write
        # ends a group of writes, and waits for them in its place).
        self._next: _Job | None = None
        if serial:
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
            self._thread.start()

    @property
    def serial(self) -> bool:
        """Whether its jobs take turns in its thread (SQLite)."""
        return self._queue is not None

    async def run(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`function(*args, **kwargs)`'s result once it ran, after the jobs queued before it.
        A job whose caller is cancelled (its client went away) before it starts is not run;
        one that started runs to its end."""
        if self._queue is None:
            return await run_in_threadpool(function, *args, **kwargs)
        return await self._queued(lambda: function(*args, **kwargs), write=False)

    async def write(
        self,
        function: Callable[Concatenate[WriteTransaction, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """`function(transaction, *args, **kwargs)`'s result once its transaction is
        committed, with the other writes waiting beside it. Only a serial lane writes."""
        assert self._database is not None, "a lane that writes has a database"
        return await self._queued(lambda tx: function(tx, *args, **kwargs), write=True)

    async def _queued(self, run: Callable[..., T], *, write: bool) -> T:
        assert self._queue is not None
        done: Future[T] = Future()
        self._queue.put(_Job(run, done, write))
        return await asyncio.wrap_future(done)

    def _take(self) -> _Job:
        assert self._queue is not None
        job, self._next = self._next, None
        return job if job is not None else self._queue.get()

    def _serve(self) -> None:
        assert self._queue is not None
        while (job := self._take()) is not _STOP:
            if not job.write:
                if job.done.set_running_or_notify_cancel():  # else cancelled before it started
                    _settle(job, job.run)
                continue
            writes = [job]
            # The writes that waited meanwhile join this one's transaction; anything else
            # waits for it, in its place (the next to run).
            while len(writes) < self._together:
                try:
                    waiting = self._queue.get_nowait()
                except queue.Empty:
                    break
                if not waiting.write:
                    self._next = waiting
                    break
                writes.append(waiting)
            self._write_together(writes)

    def _write_together(self, jobs: list[_Job]) -> None:
        database = self._database
        assert database is not None, "a lane that writes has a database"
        jobs = [job for job in jobs if job.done.set_running_or_notify_cancel()]
        if not jobs:
            return
        settled: list[tuple[_Job, Any, SpecdecError | None]] = []
        later: list[_Job] = []
        try:
            with write_session(database) as transaction:
                transaction.together = True
                for job in jobs:
                    try:
                        settled.append((job, job.run(transaction), None))
                    except SpecdecError as exc:  # raised before it wrote: the others go on
                        settled.append((job, None, exc))
                    except RunAlone:  # raised before it wrote, too
                        later.append(job)
                transaction.commit()
        except Exception:
            # Each alone, so that one write's failure (or the commit's) is its own only.
            for job in jobs:
                _settle(job, partial(write_alone, database, job.run))
            return
        for job, result, error in settled:
            if error is None:
                job.done.set_result(result)
            else:
                job.done.set_exception(error)
        for job in later:  # the lock it waits for is the only one its transaction holds
            _settle(job, partial(write_alone, database, job.run))

    def close(self) -> None:
        """Run the jobs already queued, then stop the thread."""
        if self._queue is None or self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join()


class WriteLanes:
    """The writes of starts and stops in `count` serial lanes (`Lane`), each write in the lane
    its key picks: a team's starts in one, a window's other writes in one, in the order they
    came.

    A lane sends its statements one after another and waits for each, so on a PostgreSQL a
    few milliseconds away the round trips bound it, not the CPU; lanes wait for theirs side
    by side, and more lanes serve more windows. On the same host the interpreter's lock
    bounds it instead, and more lanes only contend for it: one lane is the default
    (SPECDEC_DB_WRITE_LANES).

    Two lanes never write the same row of a window, and a team's starts take turns in one
    lane, as the team's lock needs. Two groups adding the same new series to the catalogue
    wait for each other's commit; where each waits for the other (a deadlock), PostgreSQL
    rolls one back, and its writes run again, each alone (`Lane`). SQLite takes one write
    at a time: one lane, whatever `count`.
    """

    def __init__(
        self, name: str, database: Engine, count: int = 1, together: int = MAX_WRITES_TOGETHER
    ) -> None:
        if takes_turns(database):
            count = 1
        self._lanes = [
            Lane(
                name if count == 1 else f"{name}-{index}",
                serial=True,
                database=database,
                together=together,
            )
            for index in range(count)
        ]

    @property
    def count(self) -> int:
        """How many lanes there are."""
        return len(self._lanes)

    async def write(
        self,
        key: Hashable,
        function: Callable[Concatenate[WriteTransaction, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """`Lane.write` in the lane of `key`: writes of the same key keep their order."""
        lane = self._lanes[hash(key) % len(self._lanes)]
        return await lane.write(function, *args, **kwargs)

    def close(self) -> None:
        """Run the writes already queued in every lane, then stop their threads."""
        for lane in self._lanes:
            lane.close()


def _settle(job: _Job, run: Callable[[], Any]) -> None:
    """Run `job` (started: by `run`) and hand its result or error to its caller."""
    try:
        job.done.set_result(run())
    except BaseException as exc:  # the caller raises it, as from the request pool
        job.done.set_exception(exc)
