"""Small reads where they cost least: on the event loop where the database is at hand, else
in a thread.

A read of a few rows from SQLite is quick. Sent to the request pool it takes a thread hop,
and under load the hop is what costs: the thread waits for the interpreter's lock behind the
event loop and the other threads, the loop then waits a turn for its answer, and the
hand-offs cost CPU too. A stop's window lookup and a read's check that its window is still
open are such reads; so is a stored key's lookup, on every call with a key.

On SQLite the reads go through a connection of their own whose busy timeout is zero: WAL
readers take no lock, but in a recovery or against a connection in exclusive mode a read
would wait, and the loop with it. Such a read fails at once instead and runs again in a
thread, where it may wait.

A PostgreSQL on the same host answers such a read quickly too, and the hop costs the same.
SQLAlchemy's asyncio engine is no way around it: each await is a turn of a busy loop, and
each read holds its connection meanwhile. But a read on the loop holds up every other call
while it waits, so a PostgreSQL read runs there only while that wait is short
(`_NearPostgres`):

- if the server is near: the fastest of PROBES round trips, timed in a thread as the loop's
  connection is opened (at start-up: `SmallReads.prepare`), took at most NEAR_S. A server
  farther away (another host, or a proxy on this one in front of another host) is read in
  threads, and probed again after AWAY_S. Reads on the loop are not timed for this: under
  load most of their time is the wait for the interpreter's lock once the answer is in;
- for at most DEADLINE_S: a read still running then is cut off (its connection's socket shut
  down from a watchdog thread; its statement timeout, as long, ends one the server is slow
  to run) and runs again in a thread, and the reads after it for AWAY_S;
- on a connection of its own, opened in a thread (connecting takes round trips).
"""

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import StaticPool
from starlette.concurrency import run_in_threadpool

from specdec_collector.store.db import AS_JSON, postgres_connect_args

P = ParamSpec("P")
T = TypeVar("T")

#: A PostgreSQL is near if the fastest of PROBES round trips took at most NEAR_S (a server on
#: the same host is well within it; a probe in a thread under load may wait for the
#: interpreter's lock too).
NEAR_S = 0.002
PROBES = 10
#: The longest a PostgreSQL read may hold the event loop: then it is cut off, and runs again
#: in a thread.
DEADLINE_S = 0.5
#: After a PostgreSQL is found far, or a read on the loop failed or was cut off, its reads run
#: in threads this long before it is probed again.
AWAY_S = 30.0
#: How long opening the loop's PostgreSQL connection (in a thread) may take.
CONNECT_TIMEOUT_S = 5


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


def _shut_down(fd: int) -> None:
    """Shut the socket `fd` down for both directions (a read waiting on it returns at once);
    the descriptor stays open, its owner's to close."""
    try:
        with socket.socket(fileno=os.dup(fd)) as duplicate:
            duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:  # closed already, or never connected
        pass


class _Watchdog:
    """A thread that shuts down the socket of a read still running at its deadline."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._guarded: tuple[int, float] | None = None  # (socket, deadline on the monotonic clock)
        self._closed = False
        self._thread: threading.Thread | None = None
        self.cut_off = 0  # reads cut off so far

    @contextmanager
    def guarding(self, fd: int, limit_s: float) -> Iterator[None]:
        """The block's read on socket `fd` is cut off if it lasts `limit_s`."""
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="specdec-read-watchdog", daemon=True
                )
                self._thread.start()
            self._guarded = (fd, time.monotonic() + limit_s)
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._guarded = None

    def _watch(self) -> None:
        with self._changed:
            while not self._closed:
                if self._guarded is None:
                    self._changed.wait()
                    continue
                fd, deadline = self._guarded
                left = deadline - time.monotonic()
                if left > 0:
                    self._changed.wait(left)
                    continue
                self._guarded = None
                self.cut_off += 1
                _shut_down(fd)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()
        if self._thread is not None:
            self._thread.join()


class _NearPostgres:
    """Reads on the event loop from a PostgreSQL while it is near, each for DEADLINE_S at most,
    on one connection of their own (see the module)."""

    def __init__(self, database: Engine) -> None:
        self.engine = create_engine(
            database.url,
            **AS_JSON,
            poolclass=StaticPool,
            isolation_level="AUTOCOMMIT",
            connect_args=postgres_connect_args(database.url, DEADLINE_S, CONNECT_TIMEOUT_S),
        )
        self.watchdog = _Watchdog()
        self._socket: int | None = None  # its connection's, once opened
        self._usable = False  # opened, and the server found near
        self._opening = asyncio.Lock()
        self._away_until = 0.0
        self.round_trip_s: float | None = None  # the fastest probe's, once probed
        event.listen(self.engine, "connect", self._opened)

    def _opened(self, dbapi_connection: Any, _record: Any) -> None:
        self._socket = dbapi_connection.fileno()

    def _open(self) -> bool:
        """Open the connection and time PROBES round trips on it; whether the server is near
        (if not, the connection is closed: opened and probed again after AWAY_S)."""
        with self.engine.connect() as connection:
            trips = []
            for _ in range(PROBES):
                began = time.perf_counter()
                connection.exec_driver_sql("SELECT 1").scalar_one()
                trips.append(time.perf_counter() - began)
        self.round_trip_s = min(trips)
        if self.round_trip_s <= NEAR_S:
            return True
        self.engine.dispose()
        return False

    async def ready(self) -> bool:
        """Whether a read may run on the loop now; its connection is opened first (in a
        thread) if it is not open."""
        if time.monotonic() < self._away_until:
            return False
        if not self._usable:
            async with self._opening:
                if not self._usable:
                    try:
                        near = await run_in_threadpool(self._open)
                    except Exception:  # unreachable: the threads' reads say why
                        near = False
                    if not near:
                        self._away()
                        return False
                    self._usable = True
        return True

    def run(
        self, function: Callable[Concatenate[Engine, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`function(engine, *args, **kwargs)` on the loop's connection, cut off at
        DEADLINE_S; `OperationalError` if it failed or was cut off (the caller runs it again
        in a thread)."""
        assert self._usable and self._socket is not None, "ready() opened the connection"
        try:
            with self.watchdog.guarding(self._socket, DEADLINE_S):
                return function(self.engine, *args, **kwargs)
        except OperationalError:
            # Opened and probed again, in a thread, before the next read here.
            self._usable = False
            self.engine.dispose()
            self._away()
            raise

    def _away(self) -> None:
        self._away_until = time.monotonic() + AWAY_S

    def close(self) -> None:
        self.watchdog.close()
        self.engine.dispose()


class SmallReads:
    """Runs a read of a few rows, `function(engine, *args)`, where it costs least (see the
    module). Only for reads whose size a caller bounds: on the event loop, the loop waits for
    them."""

    def __init__(self, database: Engine) -> None:
        self.database = database
        self._on_loop = _reader_on_the_loop(database)
        self.near = (
            _NearPostgres(database) if database.url.get_backend_name() == "postgresql" else None
        )

    async def prepare(self) -> None:
        """Open the loop's PostgreSQL connection now, and probe the server (in a thread), not
        at the first read: the probes are timed best on an idle process."""
        if self.near is not None:
            await self.near.ready()

    async def __call__(
        self, function: Callable[Concatenate[Engine, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        if self._on_loop is not None:
            try:
                return function(self._on_loop, *args, **kwargs)
            except OperationalError:  # locked (or failing): a thread may wait, and says why
                pass
        elif self.near is not None and await self.near.ready():
            try:
                return self.near.run(function, *args, **kwargs)
            except OperationalError:  # slow, cut off, or failing: a thread may wait
                pass
        return await run_in_threadpool(function, self.database, *args, **kwargs)

    def close(self) -> None:
        if self._on_loop is not None:
            self._on_loop.dispose()
        if self.near is not None:
            self.near.close()
