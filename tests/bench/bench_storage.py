"""Database bytes per stored sample (SQLite file growth, or PostgreSQL relation growth), and
per stopped window of one one-instance target on the real `specdec serve` (SQLite)."""

import tempfile
from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from specdec_collector.core.exposition import extract_spec_decode
from specdec_collector.core.readings import TargetReading
from specdec_collector.core.targets import parse_target
from specdec_collector.store.db import open_database
from specdec_collector.store.migrate import upgrade_database
from specdec_collector.store.tables import Window, WindowTarget
from specdec_collector.windows.leases import store_samples
from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.support.collector import run_collector
from tests.support.payloads import fixture
from tests.support.postgres import fresh_schema, postgres_server


def _size(database: Engine) -> int:
    with database.connect() as connection:
        if database.dialect.name == "postgresql":
            return int(
                connection.execute(
                    text(
                        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                    )
                ).scalar_one()
            )
        connection.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
        pages = connection.execute(text("PRAGMA page_count")).scalar_one()
        page_size = connection.execute(text("PRAGMA page_size")).scalar_one()
        return int(pages * page_size)


def bytes_per_sample(payload: str, count: int, database_url: str) -> float:
    """Store `count` samples of `payload` for one target; the storage's growth per sample."""
    upgrade_database(database_url)
    database = open_database(database_url)
    target = parse_target("h:1")
    with Session(database) as session:
        window = Window(window_id="size", sample_interval_s=1)
        session.add(window)
        session.flush()
        row = WindowTarget(window_pk=window.id or 0, ordinal=0, target=target.name, url=target.url)
        session.add(row)
        session.commit()
        window_pk, ids = window.id or 0, {target.name: row.id or 0}
    series = extract_spec_decode(payload)

    def store() -> None:
        outcome = TargetReading(target, datetime.now(UTC), series)
        assert store_samples(database, window_pk, [outcome], ids)

    store()  # the first sample also adds the target's series catalogue
    before = _size(database)
    for _ in range(count):
        store()
    grown = _size(database) - before
    database.dispose()
    return grown / count


def bytes_per_window(count: int) -> float:
    """SQLite growth per window of one one-instance target, started and stopped `count` times
    on the real collector (after one window that adds the endpoint's series)."""
    with (
        tempfile.TemporaryDirectory() as folder,
        run_collector(f"sqlite:///{Path(folder) / 'w.db'}", Path(folder)) as collector,
        run_farm(1, "vllm_v1_dp1_k5.txt") as targets,
        httpx.Client(base_url=collector.base_url, timeout=60) as api,
    ):
        database = open_database(collector.database_url)

        def window(window_id: str) -> None:
            assert api.post(f"/windows/{window_id}/start", json={"targets": targets}).is_success
            assert api.post(f"/windows/{window_id}/stop").is_success

        window("first")
        before = _size(database)
        for index in range(count):
            window(f"run-{index:05d}")
        grown = _size(database) - before
        database.dispose()
    return grown / count


def measure() -> list[Figure]:
    per_window = bytes_per_window(500)
    figures = [
        Figure(
            "database bytes per stopped window of one one-instance target (SQLite; 500 windows)",
            f"**{per_window:.0f} bytes**",
            "≤ 1.5 KB",
            per_window <= 1536,
            "python -m tests.bench.bench_storage",
        )
    ]
    with postgres_server() as postgres:
        for name, what in (
            ("vllm_v1_dp1_k5.txt", "one engine"),
            ("vllm_v1_dp8_k5.txt", "eight engines"),
        ):
            with tempfile.TemporaryDirectory() as folder:
                sqlite_url = f"sqlite:///{Path(folder) / 'b.db'}"
                sqlite = bytes_per_sample(fixture(name), 2000, sqlite_url)
            with fresh_schema(postgres) as postgres_url:
                on_postgres = bytes_per_sample(fixture(name), 2000, postgres_url)
            figures.append(
                Figure(
                    f"database bytes per stored sample, {what} (k=5; 2000 samples)",
                    f"SQLite {sqlite:.0f}, PostgreSQL {on_postgres:.0f}",
                    "",
                    None,
                    "python -m tests.bench.bench_storage",
                )
            )
    return figures


if __name__ == "__main__":
    show(measure())
