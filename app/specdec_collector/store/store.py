"""The one owner of where database work runs: `Store`, made once by the service's lifespan.

`windows/` and `service/` touch the database only through it: they say what to run and how
large it is (`Cost`); the store decides where (the event loop, the request pool, a write lane,
the computations lane), from the database it has and the thresholds below.
"""

import asyncio
import time
from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.engine import Engine
from starlette.concurrency import run_in_threadpool

from specdec_collector.gcpause import uncollected
from specdec_collector.store.db import open_database, takes_turns
from specdec_collector.store.lanes import MAX_WRITES_TOGETHER, Lane, WriteLanes
from specdec_collector.store.migrate import upgrade_database
from specdec_collector.store.small_reads import SmallReads
from specdec_collector.store.transaction import WriteTransaction

P = ParamSpec("P")
T = TypeVar("T")

#: Steps of a computation: it yields between steps, where the event loop may run other work.
Steps = Generator[None, None, T]

#: The most readings (snapshots read from the database and computed over) a computation may
#: have to run on the event loop (SQLite only: its reads are at hand) by default
#: (SPECDEC_STOP_ON_LOOP_READINGS); more go to the computations lane.
ON_LOOP_READINGS = 64
#: The most series a computation that reads nothing may arrange on the event loop; more go to
#: the request pool.
ON_LOOP_SERIES = 512
#: How long a computation on the event loop runs before it lets the loop's other work go
#: between its steps.
ON_LOOP_SLICE_S = 0.001


@dataclass(frozen=True, slots=True)
class Cost:
    """What a computation's time grows with: the snapshots it reads from the database and
    computes over (None: not known, as many as a sampled window was long)."""

    readings: int | None


@dataclass(frozen=True, slots=True)
class StoreKnobs:
    """Where the store may run work for speed, each part with the setting that turns it off
    (docs/performance.md): the write lanes (SPECDEC_DB_WRITE_LANES), the writes one
    transaction takes (SPECDEC_DB_WRITES_TOGETHER), lookups on the event loop
    (SPECDEC_DB_LOOKUPS_ON_LOOP), the readings of a stop computed there
    (SPECDEC_STOP_ON_LOOP_READINGS)."""

    write_lanes: int = 1
    writes_together: int = MAX_WRITES_TOGETHER
    lookups_on_loop: bool = True
    on_loop_readings: int = ON_LOOP_READINGS


class Store:
    """Where database work runs. The concurrency contract of each call:

    - `lookup(function, *args)`: `function(database, *args)` reads a few rows, a number its
      caller bounds. It may run on the event loop (SQLite; a PostgreSQL near enough), holding
      it meanwhile (`store.small_reads`). Sees what is committed; safe beside any other call.
    - `run(function, *args)`: `function(database, *args)` in the request pool: any read, or a
      write that opens and commits its own transactions (`db.write_session`). Safe beside any
      other call; writes of one key that must keep their order go through `write` instead.
    - `write(key, function, *args)`: `function(transaction, *args)` in the write lane of
      `key`, after the writes of that key that came before it, perhaps in one transaction
      with other writes (`store.lanes`); committed when the call returns. `function` may raise
      a `SpecdecError` or `RunAlone` only before it has written anything: the other writes of
      its transaction go on (a `RunAlone` runs again alone after them). Any other exception
      rolls the transaction back, and each of its writes runs again alone: one write's failure
      is never another's.
    - `write_after(cost, key, function, *args)`: `write`, of what a computation of `cost`
      made: without garbage collection where that computation ran without it.
    - `compute(cost, steps, *args)`: the result `steps(database, *args)` returns, a
      generator that reads the database, then yields between steps. On SQLite a small one
      (`Cost`) runs on the event loop, letting other work go after each ON_LOOP_SLICE_S; a
      larger one, one at a time in the computations lane (on PostgreSQL, in the request
      pool), without garbage collection (`gcpause`). Safe beside any other call: it reads
      committed rows only.
    - `arrange(series, function, *args)`: `function(*args)`, which reads nothing and arranges
      `series` series: on the event loop if they are few, else in the request pool without
      garbage collection.
    """

    def __init__(self, database: Engine, knobs: "StoreKnobs | None" = None) -> None:
        self.database = database
        self.knobs = knobs or StoreKnobs()
        self._lookups = SmallReads(database) if self.knobs.lookups_on_loop else None
        # Writes take turns in their lane (SQLite has one), those that wait together in one
        # transaction; SQLite computes one stop at a time too, PostgreSQL several at once.
        self._writes = WriteLanes(
            "specdec-writes", database, self.knobs.write_lanes, self.knobs.writes_together
        )
        self._computations = Lane("specdec-computations", serial=takes_turns(database))

    @classmethod
    async def open(cls, url: str, knobs: "StoreKnobs | None" = None, **options: Any) -> "Store":
        """The store of the database at `url`, migrated first (`store.migrate`), opened with
        `options` (`db.open_database`), and what its first calls would open opened now (the
        loop's PostgreSQL connection, the server probed)."""
        await run_in_threadpool(upgrade_database, url)
        store = cls(open_database(url, **options), knobs)
        if store._lookups is not None:
            await store._lookups.prepare()
        return store

    async def lookup(
        self, function: Callable[Concatenate[Engine, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        if self._lookups is None:
            return await self.run(function, *args, **kwargs)
        return await self._lookups(function, *args, **kwargs)

    async def run(
        self, function: Callable[Concatenate[Engine, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await run_in_threadpool(function, self.database, *args, **kwargs)

    async def write(
        self,
        key: Hashable,
        function: Callable[Concatenate[WriteTransaction, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        return await self._writes.write(key, function, *args, **kwargs)

    async def write_after(
        self,
        cost: Cost,
        key: Hashable,
        function: Callable[Concatenate[WriteTransaction, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        run = function if self._on_loop(cost) else uncollected(function)
        return await self._writes.write(key, run, *args, **kwargs)

    def _on_loop(self, cost: Cost) -> bool:
        """Whether a computation of `cost` runs on the event loop."""
        return (
            self._computations.serial
            and cost.readings is not None
            and cost.readings <= self.knobs.on_loop_readings
        )

    async def compute(
        self,
        cost: Cost,
        steps: Callable[Concatenate[Engine, P], Steps[T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        made = steps(self.database, *args, **kwargs)  # nothing runs until it is stepped
        if self._on_loop(cost):
            return await _stepped(made)
        return await self._computations.run(uncollected(run_to_end), made)

    async def arrange(
        self, series: int, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        if series <= ON_LOOP_SERIES:
            return function(*args, **kwargs)
        return await run_in_threadpool(uncollected(function), *args, **kwargs)

    async def aclose(self) -> None:
        """Run the writes and computations already queued, stop their threads, and close the
        database's connections."""
        await run_in_threadpool(self._computations.close)
        await run_in_threadpool(self._writes.close)
        if self._lookups is not None:
            self._lookups.close()
        self.database.dispose()


async def _stepped(steps: Steps[T]) -> T:
    """Run `steps` on the event loop, letting other work go after each ON_LOOP_SLICE_S: a
    turn after every step would make a computation of many steps wait for as many turns of a
    busy loop."""
    began = time.perf_counter()
    try:
        while True:
            next(steps)
            if time.perf_counter() - began >= ON_LOOP_SLICE_S:
                await asyncio.sleep(0)
                began = time.perf_counter()
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def run_to_end(steps: Steps[T]) -> T:
    """Run `steps` to their end, in the calling thread."""
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
