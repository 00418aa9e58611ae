"""Small reads where they cost least: on SQLite from the event loop, elsewhere in a thread.

A read of a few rows from SQLite takes tens of microseconds. Sent to the request pool it
takes a thread hop, and under load the hop is what costs: the thread waits for the
interpreter's lock behind the event loop and the other threads, and the loop then waits a
turn for its answer. A stop's window lookup waited 150-270 ms there (median, 200 clients on
one worker), and the hand-offs cost CPU too: with it and a read's check that its window is
still open on the loop, one worker served 79-80 windows a second against 65 (alternating runs;
`docs/performance.md`). A stored key's lookup, on every call with a key, makes the same hop.

On SQLite the reads go through a connection of their own whose busy timeout is zero: WAL
readers take no lock, but in a recovery or against a connection in exclusive mode a read
would wait, and the loop with it. Such a read fails at once instead and runs again in a
thread, where it may wait. PostgreSQL's reads are round trips over a network: they always
run in a thread.
"""

from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy import create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import StaticPool
from starlette.concurrency import run_in_threadpool

from specdec_collector.store.db import AS_JSON

P = ParamSpec("P")
T = TypeVar("T")


def _reader_on_the_loop(database: Engine) -> Engine | None:
    """One connection to the same SQLite file that fails at once rather than wait for a
    lock; None for other databases and for one in memory."""
    url = database.url
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return create_engine(
        url,
        **AS_JSON,
        poolclass=StaticPool,
        connect_args={"check_same_thread": False, "timeout": 0},
    )


class SmallReads:
    """Runs a read of a few rows, `function(engine, *args)`, where it costs least (see the
    module). Only for reads whose size a caller bounds: on SQLite the event loop waits for
    them."""

    def __init__(self, database: Engine) -> None:
        self.database = database
        self._on_loop = _reader_on_the_loop(database)

    async def __call__(
        self, function: Callable[Concatenate[Engine, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        if self._on_loop is not None:
            try:
                return function(self._on_loop, *args, **kwargs)
            except OperationalError:  # locked (or failing): a thread may wait, and says why
                pass
        return await run_in_threadpool(function, self.database, *args, **kwargs)

    def close(self) -> None:
        if self._on_loop is not None:
            self._on_loop.dispose()
