"""The schema comes from the migrations, and the migrations agree with the models."""

from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import JSON, column, inspect, table, text

from app.db import alembic_config, create_db_engine, upgrade_database
from app.models import metadata


def test_upgrade_of_an_empty_database_matches_the_models(database_url: str) -> None:
    url = database_url
    upgrade_database(url)
    engine = create_db_engine(url)
    try:
        with engine.connect() as connection:
            diff = compare_metadata(
                MigrationContext.configure(connection, opts={"compare_type": True}), metadata
            )
            assert diff == []
            assert set(inspect(connection).get_table_names()) == {
                "alembic_version", "window", "window_target", "target_series", "snapshot", "api_key", "heartbeat",
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
            head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
            assert version == head
    finally:
        engine.dispose()


def test_windows_of_0001_keep_their_data_through_0002(database_url: str) -> None:
    """SQLite rebuilds the window table in batch mode; the rows must come through."""
    url = database_url
    command.upgrade(alembic_config(url), "0001")
    engine = create_db_engine(url)
    try:
        with engine.begin() as connection:
            old_window = table(
                "window", column("id"), column("window_id"), column("state"), column("labels"),
                column("started_at"),
            )  # fmt: skip
            connection.execute(
                old_window.insert().values(
                    id=1,
                    window_id="run-1",
                    state="closed",
                    labels="{}",
                    started_at=datetime(2026, 11, 30, 10, tzinfo=UTC),
                )
            )
        upgrade_database(url)
        with engine.connect() as connection:
            row = connection.execute(text('SELECT window_id, team, started_by FROM "window"')).one()
        assert tuple(row) == ("run-1", "default", "anonymous")
    finally:
        engine.dispose()


def test_0005_fills_the_summary_columns_from_stored_results(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "0004")
    engine = create_db_engine(database_url)
    try:
        window = table("window", column("id"), column("window_id"), column("state"), column("labels"),
                       column("started_at"), column("team"), column("started_by"))  # fmt: skip
        target = table("window_target", column("id"), column("window_pk"), column("ordinal"),
                       column("target"), column("url"), column("result", JSON()))  # fmt: skip
        result = {
            "status": "ok",
            "data": {"acceptance_rate": 61.5, "acceptance_length": 2.8, "num_drafts": 42},
        }
        with engine.begin() as connection:
            connection.execute(window.insert().values(id=1, window_id="w", state="closed", labels="{}",
                                                      started_at=datetime(2026, 11, 30, tzinfo=UTC),
                                                      team="default", started_by="anonymous"))  # fmt: skip
            connection.execute(target.insert().values(id=1, window_pk=1, ordinal=0, target="h:1",
                                                      url="http://h:1/metrics", result=result))  # fmt: skip
        upgrade_database(database_url)
        with engine.connect() as connection:
            row = connection.execute(
                text(
                    "SELECT status, acceptance_rate, acceptance_length, num_drafts FROM window_target"
                )
            ).one()
        assert tuple(row) == ("ok", 61.5, 2.8, 42)
    finally:
        engine.dispose()
