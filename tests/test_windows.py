"""Window storage under concurrency, on SQLite and PostgreSQL."""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from app.db import create_db_engine, upgrade_database
from app.models import WindowCreate
from app.promtext import extract_spec_decode
from app.scrape import ScrapeOutcome
from app.targets import parse_target
from app.windows import Actor, _insert_window, _store_baseline, load_window, read_window
from tests.payloads import EngineCounters, vllm_payload


@pytest.fixture
def engines(database_url: str) -> Iterator[tuple[Engine, Engine]]:
    """Two engines on one database: a reader, and a writer that commits in between."""
    upgrade_database(database_url)
    reader, writer = create_db_engine(database_url), create_db_engine(database_url)
    yield reader, writer
    reader.dispose()
    writer.dispose()


def test_a_baseline_committed_during_a_read_never_breaks_it(engines: tuple[Engine, Engine]) -> None:
    """The baseline (series and snapshot) commits between the read's statements."""
    reader, writer = engines
    target = parse_target("127.0.0.1:9100")
    body = WindowCreate(targets=[target.key])
    assert _insert_window(writer, Actor("default", "test"), "w", body, [target], 10, "r", 0)
    stored = load_window(writer, "default", "w")
    series = extract_spec_decode(
        vllm_payload([EngineCounters(drafts=5, draft_tokens=15, accepted_per_pos=[3, 2, 1])])
    )
    outcome = ScrapeOutcome(target, datetime.now(UTC), series=series)
    committed: list[bool] = []

    def commit_baseline_once(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not committed and ("snapshot" in statement or "target_series" in statement):
            committed.append(True)
            _store_baseline(writer, stored, [outcome])

    event.listen(reader, "after_cursor_execute", commit_baseline_once)
    try:
        window = read_window(reader, "default", "w")
    finally:
        event.remove(reader, "after_cursor_execute", commit_baseline_once)
    assert committed == [True]
    # Read before the baseline landed, or after: either is right; a half-seen baseline is not.
    assert window.targets[0].before in (None, {"num_drafts": 5, "num_draft_tokens": 15, "num_accepted_tokens": 6,
                                               "accepted_per_pos": {"0": 3, "1": 2, "2": 1}})  # fmt: skip
    assert read_window(reader, "default", "w").targets[0].before is not None
