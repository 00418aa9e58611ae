"""The database: its connection pool (SQLAlchemy's `Engine`), read and write sessions.

SQLite is the default store (one process); PostgreSQL through psycopg 3 is the store of a
shared deployment with several replicas. Its schema is brought up to date by `store.migrate`.
"""

import fcntl
import math
import os
import shutil
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import IO, Any, Concatenate, Generic, ParamSpec, TypeVar
from weakref import WeakKeyDictionary

import pydantic_core
from sqlalchemy import event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import (
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    InvalidatePoolError,
    OperationalError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlmodel import Session, create_engine

from specdec_collector.store.transaction import WriteTransaction


class EncodedJSON(str):
    """JSON text that a JSON column stores as it is: encoded already (by pydantic, in one
    pass, rather than dumped to Python objects and then through `json.dumps`)."""


def compact_json(value: Any) -> str:
    """JSON columns as compact text (no spaces after `,` and `:`, which would only add to a
    stored window's bytes), written by pydantic's encoder, which is faster than `json.dumps`:
    every scrape stores a snapshot's counters."""
    if isinstance(value, EncodedJSON):
        return value
    return pydantic_core.to_json(value).decode()


def _read_json(text: str | bytes) -> Any:
    """JSON columns read back by pydantic's parser (faster than `json.loads`), which gives the
    same lists, numbers and strings."""
    return pydantic_core.from_json(text)


#: Every engine of a database reads and writes JSON columns the same way.
AS_JSON: dict[str, Any] = {"json_serializer": compact_json, "json_deserializer": _read_json}


def postgres_connect_args(
    url: URL, statement_timeout_s: float, connect_timeout_s: float
) -> dict[str, Any]:
    """A PostgreSQL connection's arguments: its connect timeout, and its statement timeout
    beside the options the URL carries (a search_path, say)."""
    options = str(url.query.get("options", ""))
    options = f"{options} -c statement_timeout={int(statement_timeout_s * 1000)}".strip()
    return {"connect_timeout": max(1, math.ceil(connect_timeout_s)), "options": options}


def open_database(
    database_url: str,
    *,
    pool_size: int = 10,
    statement_timeout_s: float = 10,
    connect_timeout_s: float = 5,
) -> Engine:
    """The database at `database_url`: SQLAlchemy's `Engine`, a pool of connections.

    PostgreSQL gets a bounded pool, a statement timeout and a connect timeout, and checks a
    connection idle for a while before use (`_check_when_idle`), so the service recovers by
    itself when the database returns.
    SQLite gets WAL, a busy timeout and foreign keys; its folder is created so that
    `./data/specdec.db` works on a fresh clone.
    """
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        database = create_engine(
            url,
            **AS_JSON,
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_timeout=connect_timeout_s,
            connect_args=postgres_connect_args(url, statement_timeout_s, connect_timeout_s),
        )
        _check_when_idle(database)
        return database
    if url.get_backend_name() != "sqlite":
        return create_engine(url, **AS_JSON, pool_pre_ping=True)
    return _open_sqlite(url, statement_timeout_s)


def _open_sqlite(url: URL, statement_timeout_s: float) -> Engine:
    """SQLite: WAL, a busy timeout and foreign keys; a connection opened read-only (a full or
    read-only disk) is treated as lost, so the service recovers by itself."""
    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    busy_ms = int(statement_timeout_s * 3000)
    database = create_engine(
        url,
        **AS_JSON,
        connect_args={"check_same_thread": False, "timeout": busy_ms / 1000},
        # One connection per worker thread (anyio's pool has 40): no waits, no reconnects.
        pool_size=40,
        max_overflow=10,
    )
    # An executemany of an INSERT as one multi-row statement (per 1000 rows), not one step per
    # row: sqlite3 gives the GIL away around each step, and under load each one takes long to
    # win back, which would hold up the writes' lane.
    database.dialect.use_insertmanyvalues_wo_returning = True
    _WRITE_LOCKS[database] = threading.Lock()
    if url.database and url.database != ":memory:":
        _WRITER_FILES[database] = _WriterFile(Path(f"{url.database}.writer-lock"))

    @event.listens_for(database, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        # WAL lets readers proceed while one writer commits; busy_timeout makes a second
        # writer wait for the lock instead of failing with "database is locked".
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.close()

    _recover_read_only(database, url.database)
    return database


def _recover_read_only(database: Engine, file: str | None) -> None:
    """Treat a connection SQLite opened read-only as lost, so a fresh one is opened once the
    files are writable again."""

    @event.listens_for(database, "handle_error")
    def _read_only_connection_is_lost(context: Any) -> None:
        # SQLite opens the file read-only when it cannot open it for writing (a read-only or
        # full disk, an immutable file) and the connection stays so after the file is writable
        # again: treated as lost, the pool opens a fresh one, and the service recovers by itself.
        if "readonly database" in str(context.original_exception):
            context.is_disconnect = True

    if file and file != ":memory:":
        files = [file, f"{file}-wal"]

        def writable() -> bool:
            return all(os.access(path, os.W_OK) for path in files if os.path.exists(path))

        @event.listens_for(database, "connect")
        def _note_read_only(dbapi_connection: Any, record: Any) -> None:
            if not writable():
                record.info["opened_read_only"] = True

        @event.listens_for(database, "checkout")
        def _reopen_once_writable(dbapi_connection: Any, record: Any, proxy: Any) -> None:
            # Such a connection fails its first write after the files are writable again (the
            # first request after a disk comes back answered 503): the pool opens a fresh one
            # instead of handing it out.
            if record.info.get("opened_read_only") and writable():
                raise DisconnectionError("the database files are writable again")


#: A pooled connection unused for longer than this is checked (one round trip) before it is
#: handed out again.
CHECK_AFTER_IDLE_S = 1.0


def _check_when_idle(database: Engine) -> None:
    """Check a connection before use once it was idle a while, not at every checkout as
    SQLAlchemy's `pool_pre_ping` does: that would be a round trip for each of the many
    checkouts of a window.

    A database that went away while the service was idle (a restart, a failover) is found
    out before use: the connection that fails its check is dropped with every one opened
    before it, and a fresh one is opened in its place, as with `pool_pre_ping`. A connection
    used within the last CHECK_AFTER_IDLE_S is not checked: if the database went away since,
    that one call fails (a 503 `database unavailable`), and the pool is renewed the same way;
    the calls during an outage fail anyway."""

    @event.listens_for(database, "checkin")
    def _idle_from(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_from"] = time.monotonic()

    @event.listens_for(database, "checkout")
    def _checked_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_from = record.info.pop("idle_from", None)
        if idle_from is None or time.monotonic() - idle_from < CHECK_AFTER_IDLE_S:
            return  # just opened, or just used
        dialect = database.dialect
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi_connection, None):
                raise InvalidatePoolError(f"a pooled connection is lost: {exc}") from None
            raise


_WRITE_LOCKS: "WeakKeyDictionary[Engine, threading.Lock]" = WeakKeyDictionary()
# Beside a SQLite file: the lock the writers of every process (`specdec serve --workers N`)
# take turns on, as this process's writers do on `_WRITE_LOCKS`.
_WRITER_FILES: "WeakKeyDictionary[Engine, _WriterFile]" = WeakKeyDictionary()


class _WriterFile:
    """The lock file of one database, opened once (not for every write) and closed with the
    database's last reference. The threads of a process share it: they take `_WRITE_LOCKS`
    first, so one of them at a time holds its lock."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._handle: IO[str] | None = None

    def handle(self) -> IO[str] | None:
        """The open file; None where it cannot be made (a read-only folder: tried again next
        time)."""
        if self._handle is None:
            try:
                self._handle = self._path.open("a")
            except OSError:
                return None
            weakref.finalize(self, self._handle.close)
        return self._handle


def takes_turns(database: Engine) -> bool:
    """Whether the writers of `database` take turns (SQLite: one write at a time)."""
    return database in _WRITE_LOCKS


@contextmanager
def _every_process_turn(database: Engine) -> Iterator[None]:
    """Every process's turn: a file lock, where the file can be made (a read-only folder only
    loses the fairness, not the write)."""
    file = _WRITER_FILES.get(database)
    handle = file.handle() if file is not None else None
    if handle is None:
        yield
        return
    fcntl.flock(handle, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def read_connection(database: Engine) -> Iterator[Connection]:
    """A connection for reads only.

    On PostgreSQL it runs in autocommit: in a transaction a read takes two round trips more
    (psycopg's BEGIN before it, SQLAlchemy's ROLLBACK when done), a large part of a small
    read's time, and under READ COMMITTED each statement sees its own snapshot either way.
    SQLite's reads keep their transaction: one snapshot for all their statements.
    """
    with database.connect() as connection:
        if database.dialect.name == "postgresql":
            connection.execution_options(isolation_level="AUTOCOMMIT")
        yield connection


@contextmanager
def read_session(database: Engine) -> Iterator[Session]:
    """A session for reads only: on PostgreSQL on a `read_connection`; on SQLite in a
    transaction, one snapshot for all its statements."""
    if database.dialect.name != "postgresql":
        with Session(database) as session:
            yield session
        return
    with read_connection(database) as connection, Session(bind=connection) as session:
        yield session


@contextmanager
def write_session(database: Engine) -> Iterator[WriteTransaction]:
    """A write transaction (`WriteTransaction`): unlike a `read_session` on PostgreSQL,
    whose statements each commit, it holds every lock it takes until it ends.

    On SQLite the writers take turns on a lock, of this process and then of every process on
    the file: waiting there is fair and wakes at once, where SQLite's own busy handler sleeps
    up to 100 ms between tries, which under load costs more than the writes.
    """
    lock = _WRITE_LOCKS.get(database)
    if lock is None:
        with Session(database) as session:
            yield WriteTransaction(session)
        return
    with lock, _every_process_turn(database), Session(database) as session:
        yield WriteTransaction(session)


P = ParamSpec("P")
T = TypeVar("T")
M = TypeVar("M")

#: Values per `IN (…)` list at the most (SQLite's bound on a statement's variables).
MAX_IN_LIST = 500


def write_alone(
    database: Engine,
    write: Callable[Concatenate[WriteTransaction, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """`write(transaction, *args, **kwargs)` in a write transaction of its own, committed."""
    with write_session(database) as transaction:
        result = write(transaction, *args, **kwargs)
        transaction.commit()
        return result


class PerEngine(Generic[M]):
    """One `M` per database, made on first use: what a process remembers of the rows
    of a database that never change (the engines of a test process are many databases)."""

    def __init__(self, make: Callable[[], M]) -> None:
        self._make = make
        self._made: WeakKeyDictionary[Engine, M] = WeakKeyDictionary()
        self._lock = threading.Lock()

    def of(self, session: Session) -> M:
        bind = session.get_bind()
        database = bind.engine if isinstance(bind, Connection) else bind
        with self._lock:
            made = self._made.get(database)
            if made is None:
                made = self._made[database] = self._make()
            return made


class DatabaseBusy(Exception):
    """Another writer held the database's write lock for longer than the caller would wait."""


@contextmanager
def short_write(database: Engine, wait_s: float) -> Iterator[Connection]:
    """A write transaction that waits at most `wait_s` for SQLite's write lock, else
    `DatabaseBusy` (a health check must answer while a long write runs).

    The wait is bounded twice: for this process's writers' lock, and, on a connection whose
    busy timeout is lowered for the transaction and restored before it goes back to the pool,
    for other processes' writes. PostgreSQL writers do not share one lock: nothing to bound.
    """
    lock = _WRITE_LOCKS.get(database)
    if lock is None:
        with database.begin() as connection:
            yield connection
        return
    if not lock.acquire(timeout=wait_s):
        raise DatabaseBusy(f"a write of this service held the database over {wait_s:g} s")
    try:
        with database.connect() as connection:
            busy_ms = connection.exec_driver_sql("PRAGMA busy_timeout").scalar_one()
            connection.exec_driver_sql(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
            connection.commit()
            try:
                with connection.begin():
                    yield connection
            except OperationalError as exc:
                if "locked" in str(exc.orig) or "busy" in str(exc.orig):
                    raise DatabaseBusy(f"another process held the database: {exc.orig}") from None
                raise
            finally:
                connection.exec_driver_sql(f"PRAGMA busy_timeout={busy_ms}")
                connection.commit()
    finally:
        lock.release()


@lru_cache(maxsize=64)
def _folder_of(file: str) -> Path:
    """A file's folder, resolved once: the sampler asks before every run, and resolving walks
    the path's every part."""
    return Path(file).resolve().parent


def free_disk_bytes(database: Engine) -> int | None:
    """The room left on the disk of a SQLite file's folder; None for a server database (its
    disk is not this process's to see) or an in-memory one."""
    if database.dialect.name != "sqlite" or not database.url.database:
        return None
    if database.url.database == ":memory:":
        return None
    try:
        return shutil.disk_usage(_folder_of(database.url.database)).free
    except OSError:
        return None


def upsert_insert(dialect_name: str) -> Any:
    """The `insert` of this dialect, the one with `on_conflict_do_nothing/update`."""
    if dialect_name == "postgresql":
        return postgresql.insert
    return sqlite.insert


def database_unavailable(exc: Exception) -> str | None:
    """Why the database cannot serve (a connection or lock problem), or None for other errors.

    Such failures pass: the service answers 503 meanwhile and recovers by itself: a lost
    connection is dropped with every one opened before it. Other database errors are bugs
    and stay 500s.
    """
    if isinstance(exc, (OperationalError, InterfaceError, PoolTimeout)) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    ):
        original = getattr(exc, "orig", None) or exc
        reason = (
            str(original).strip().splitlines()[0]
            if str(original).strip()
            else type(original).__name__
        )
        return reason[:300]
    return None


def connections_left(database: Engine) -> int | None:
    """How many more connections a PostgreSQL server takes (`max_connections` less those open
    and those reserved for superusers); None on SQLite."""
    if database.dialect.name != "postgresql":
        return None
    with read_connection(database) as connection:
        allowed = int(connection.execute(text("SHOW max_connections")).scalar_one())
        reserved = int(connection.execute(text("SHOW superuser_reserved_connections")).scalar_one())
        used = int(connection.execute(text("SELECT count(*) FROM pg_stat_activity")).scalar_one())
    return allowed - reserved - used


def shown_url(database_url: str) -> str:
    """A database URL fit to print: its password hidden."""
    return make_url(database_url).render_as_string(hide_password=True)
