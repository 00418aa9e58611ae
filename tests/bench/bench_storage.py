"""Database bytes per stored sample, measured on the SQLite file after a WAL checkpoint."""

import tempfile
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text
from sqlmodel import Session

from app.db import create_db_engine, upgrade_database
from app.models import Window, WindowTarget
from app.promtext import extract_spec_decode
from app.sampler import store_samples
from app.scrape import ScrapeOutcome
from app.targets import parse_target
from tests.payloads import fixture


def bytes_per_sample(payload: str, count: int, folder: Path) -> float:
    """Store `count` samples of `payload` for one target; the file's growth per sample."""
    url = f"sqlite:///{folder / 'size.db'}"
    upgrade_database(url)
    engine = create_db_engine(url)
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

    def size() -> int:
        with engine.connect() as connection:
            connection.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
            pages = connection.execute(text("PRAGMA page_count")).scalar_one()
            page_size = connection.execute(text("PRAGMA page_size")).scalar_one()
        return int(pages * page_size)

    store()  # the first sample also adds the target's series catalogue
    before = size()
    for _ in range(count):
        store()
    grown = size() - before
    engine.dispose()
    return grown / count


def main() -> None:
    for name in ("vllm_v1_dp1_k5.txt", "vllm_v1_dp8_k5.txt"):
        with tempfile.TemporaryDirectory() as folder:
            per_sample = bytes_per_sample(fixture(name), 2000, Path(folder))
        print(f"{name:<22} {per_sample:>8.0f} bytes per stored sample (SQLite, 2000 samples)")


if __name__ == "__main__":
    main()
