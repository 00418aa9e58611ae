"""The schema comes from the migrations, and the migrations agree with the models."""

import hashlib
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import JSON, column, inspect, select, table, text

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


def test_0007_gives_stored_results_full_floats(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "0006")
    # As versions before 0007 stored the design's worked example: 163 drafts, 815 draft tokens,
    # 809 accepted, the rate and the length rounded.
    rates = {"0": 0.9939, "1": 0.9939, "2": 0.9939, "3": 0.9939, "4": 0.9877}
    data = {"num_drafts": 163, "draft_tokens": 815, "accepted_tokens": 809, "acceptance_rate": 99.26,
            "acceptance_length": 5.963, "per_position_acceptance_rates": rates}  # fmt: skip
    stored = {"status": "ok", "url": "http://h:1/metrics", "error": None, "data": data,
              "raw": {"before": None, "after": None}, "counter_resets": 0}  # fmt: skip
    failed = {"status": "na", "url": "http://h:2/metrics", "error": "[before] x", "data": None}
    engine = create_db_engine(database_url)
    try:
        window = table("window", column("id"), column("window_id"), column("state"), column("labels"),
                       column("started_at"), column("team"), column("started_by"))  # fmt: skip
        target = table("window_target", column("id"), column("window_pk"), column("ordinal"),
                       column("target"), column("url"), column("result", JSON()),
                       column("acceptance_rate"), column("acceptance_length"))  # fmt: skip
        with engine.begin() as connection:
            connection.execute(window.insert().values(id=1, window_id="w", state="closed", labels="{}",
                                                      started_at=datetime(2026, 11, 30, tzinfo=UTC),
                                                      team="default", started_by="anonymous"))  # fmt: skip
            for row_id, result in ((1, stored), (2, failed)):
                connection.execute(target.insert().values(
                    id=row_id, window_pk=1, ordinal=row_id - 1, target=f"h:{row_id}", url="u",
                    result=result, acceptance_rate=data["acceptance_rate"] if row_id == 1 else None,
                    acceptance_length=data["acceptance_length"] if row_id == 1 else None))  # fmt: skip
        upgrade_database(database_url)
        read = select(target.c.result, target.c.acceptance_rate, target.c.acceptance_length)
        with engine.connect() as connection:
            ok, na = connection.execute(read.order_by(target.c.id)).all()
    finally:
        engine.dispose()
    # AISBench's own numbers for these counts (the design's example).
    assert ok.result["data"]["acceptance_rate"] == ok.acceptance_rate == 99.2638036809816
    assert ok.result["data"]["acceptance_length"] == ok.acceptance_length == 5.96319018404908
    assert ok.acceptance_rate == pytest.approx(float(Fraction(809 * 100, 815)), rel=1e-15)
    assert ok.result["data"]["per_position_acceptance_rates"] == rates
    assert {k: v for k, v in ok.result.items() if k != "data"} == {
        k: v for k, v in stored.items() if k != "data"
    }
    assert tuple(na) == (failed, None, None)


def test_0008_and_0009_carry_stored_series_and_results_over(database_url: str) -> None:
    """0008 keys each stored series by the SHA-256 of its labels; 0009 summarises the results
    stored before engines were told apart as vLLM's, exact."""
    command.upgrade(alembic_config(database_url), "0007")
    labels = '[["engine","0"],["model_name","m"]]'
    engine = create_db_engine(database_url)
    window = table("window", column("id"), column("window_id"), column("state"), column("labels"),
                   column("started_at"), column("team"), column("started_by"))  # fmt: skip
    target = table("window_target", column("id"), column("window_pk"), column("ordinal"),
                   column("target"), column("url"), column("status"))  # fmt: skip
    series = table("target_series", column("id"), column("target_id"), column("family"),
                   column("labels"))  # fmt: skip
    try:
        with engine.begin() as connection:
            connection.execute(window.insert().values(id=1, window_id="w", state="closed", labels="{}",
                                                      started_at=datetime(2026, 11, 30, tzinfo=UTC),
                                                      team="default", started_by="anonymous"))  # fmt: skip
            for row_id, status in ((1, "ok"), (2, "na")):
                connection.execute(target.insert().values(id=row_id, window_pk=1, ordinal=row_id,
                                                          target=f"h:{row_id}", url="u", status=status))  # fmt: skip
            connection.execute(series.insert().values(id=7, target_id=1, family="num_drafts",
                                                      labels=labels))  # fmt: skip
        upgrade_database(database_url)
        with engine.connect() as connection:
            stored = connection.execute(
                text("SELECT id, family, labels, labels_digest FROM target_series")
            ).all()
            summaries = connection.execute(
                text("SELECT id, result_engine, exact FROM window_target ORDER BY id")
            ).all()
    finally:
        engine.dispose()
    assert [tuple(row) for row in stored] == [
        (7, "num_drafts", labels, hashlib.sha256(labels.encode()).hexdigest())
    ]
    assert [(row[0], row[1], None if row[2] is None else bool(row[2])) for row in summaries] == [
        (1, "vllm", True), (2, None, None)
    ]  # fmt: skip
