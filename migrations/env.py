"""Alembic environment: the models' metadata, batch mode for SQLite, one transaction."""

from alembic import context
from sqlalchemy.engine import Connection

import specdec_collector.store.tables  # noqa: F401  (registers the tables on the metadata)
from specdec_collector.config import get_settings
from specdec_collector.store.db import open_database
from specdec_collector.store.tables import metadata

config = context.config


def _run(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things; batch mode copies the table instead.
        render_as_batch=sqlite,
        compare_type=True,
    )
    if not sqlite:
        with context.begin_transaction():
            context.run_migrations()
        return
    # A batch copy drops the old table: with foreign keys enforced, that deletes every row
    # that refers to it (ON DELETE CASCADE: a window's targets, a target's snapshots). Off
    # while migrating (outside a transaction, where SQLite takes the pragma), checked after.
    connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
    connection.commit()
    try:
        with context.begin_transaction():
            context.run_migrations()
        broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise RuntimeError(f"a migration left rows whose references are gone: {broken[:5]}")
    finally:
        connection.exec_driver_sql("PRAGMA foreign_keys=ON")
        connection.commit()


def run_migrations_online() -> None:
    """Run against the connection the caller passed, else against SPECDEC_DATABASE_URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or get_settings().database_url
    database = open_database(url)
    try:
        with database.connect() as connection:
            _run(connection)
    finally:
        database.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
