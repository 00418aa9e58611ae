"""Migrations: the schema brought up to head by Alembic, one process at a time.

Migrations take a lock first (an advisory lock on PostgreSQL, a file lock beside the SQLite
file), so replicas that boot together migrate once. A database at head already is told by
one read of its version, without Alembic, so that a start of `specdec serve` (and each of
its workers) does not pay for importing it and loading the migrations' scripts.
"""

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path
from typing import Any

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import SQLAlchemyError

from specdec_collector.store.db import open_database

# Any 64-bit number: every replica of every version of this service takes the same one.
MIGRATION_LOCK_ID = 0x5EC_DEC_0001

#: The newest migration's revision (`migrations/versions`); a test holds it to Alembic's head.
HEAD_REVISION = "0019"


def alembic_config(database_url: str, connection: Connection | None = None) -> Any:
    """An Alembic `Config` for the shipped migrations and `database_url`."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(files("specdec_collector.migrations")))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sqlite_not_made(database_url: str) -> bool:
    """Whether `database_url` is a SQLite database with no file yet (in memory, or a file not
    made): opening it would make one."""
    url = make_url(database_url)
    file = url.database if url.database and url.database != ":memory:" else None
    return url.get_backend_name() == "sqlite" and (file is None or not Path(file).is_file())


def not_collector_database(database_url: str) -> str | None:
    """Why `database_url` is not a database the collector has migrated (no such file, never
    migrated: no Alembic version table, cannot be reached), or None when it is; never
    creates one (SQLAlchemy would make a missing SQLite file)."""
    if _sqlite_not_made(database_url):
        return "no such file"
    database = open_database(database_url, pool_size=1)
    try:
        with database.connect() as connection:
            migrated = inspect(connection).has_table("alembic_version")
    except SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc
        return f"it cannot be reached: {type(cause).__name__}"
    finally:
        database.dispose()
    return None if migrated else "never migrated by `specdec serve`"


def at_head(database_url: str) -> bool:
    """Whether the database is migrated to `HEAD_REVISION`, as one read tells (False if it
    was never migrated, or is a SQLite file not made yet). A database that cannot be reached
    raises, as the migration would."""
    if _sqlite_not_made(database_url):
        return False
    database = open_database(database_url, pool_size=1)
    try:
        with database.connect() as connection:
            try:
                versions = connection.execute(text("SELECT version_num FROM alembic_version"))
                return [version for (version,) in versions] == [HEAD_REVISION]
            except SQLAlchemyError:  # no version table: never migrated
                return False
    finally:
        database.dispose()


def upgrade_database(database_url: str) -> None:
    """Apply every migration up to head, one process at a time."""
    if at_head(database_url):
        return
    from alembic import command

    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        database = open_database(database_url, pool_size=1)
        try:
            with database.connect() as connection:
                # A session-level lock: held across the migration's own transactions.
                connection.execute(text("SELECT pg_advisory_lock(:id)"), {"id": MIGRATION_LOCK_ID})
                connection.commit()
                try:
                    command.upgrade(alembic_config(database_url, connection), "head")
                    connection.commit()
                finally:
                    connection.execute(
                        text("SELECT pg_advisory_unlock(:id)"), {"id": MIGRATION_LOCK_ID}
                    )
                    connection.commit()
        finally:
            database.dispose()
        return
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        with _file_lock(Path(url.database + ".migrate.lock")):
            command.upgrade(alembic_config(database_url), "head")
        return
    command.upgrade(alembic_config(database_url), "head")
