"""The schema comes from the migrations, and the migrations agree with the models."""

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from app.db import create_db_engine, upgrade_database
from app.models import metadata


def test_upgrade_of_an_empty_database_matches_the_models(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    upgrade_database(url)
    engine = create_db_engine(url)
    try:
        with engine.connect() as connection:
            diff = compare_metadata(
                MigrationContext.configure(connection, opts={"compare_type": True}), metadata
            )
            assert diff == []
            assert set(inspect(connection).get_table_names()) == {
                "alembic_version", "window", "window_target", "target_series", "snapshot",
            }  # fmt: skip
    finally:
        engine.dispose()


def test_upgrade_is_idempotent_and_creates_the_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nested' / 'dir' / 'db.sqlite'}"
    upgrade_database(url)
    upgrade_database(url)
    engine = create_db_engine(url)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert (
                connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
                == "0001"
            )
    finally:
        engine.dispose()
