"""Database bytes per stored sample: SQLite file growth, or PostgreSQL relation growth."""

import tempfile
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.db import create_db_engine, upgrade_database
from app.models import Window, WindowTarget
from app.promtext import extract_spec_decode
from app.sampler import store_samples
from app.scrape import ScrapeOutcome
from app.targets import parse_target
from tests.bench.figures import Figure, show
from tests.payloads import fixture
from tests.postgres import fresh_schema, postgres_server


def _size(engine: Engine) -> int:
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
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
    engine = create_db_engine(database_url)
    target = parse_target("h:1")
    with Session(engine) as session:
        window = Window(window_id="size", sample_interval_s=1)
        session.add(window)
        session.flush()
        row = WindowTarget(window_pk=window.id or 0, ordinal=0, target=target.key, url=target.url)
        session.add(row)
        session.commit()
        window_pk, ids = window.id or 0, {target.key: row.id or 0}
    series = extract_spec_decode(payload)

    def store() -> None:
        outcome = ScrapeOutcome(target, datetime.now(UTC), series=series)
        assert store_samples(engine, window_pk, [outcome], ids)

    store()  # the first sample also adds the target's series catalogue
    before = _size(engine)
    for _ in range(count):
        store()
    grown = _size(engine) - before
    engine.dispose()
    return grown / count


def measure() -> list[Figure]:
    figures = []
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
