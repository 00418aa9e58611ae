"""The start-up rehearsal of a window: it compiles what a start and a stop run, keeps nothing."""

from typing import Any

from sqlalchemy import event, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.engine.default import CACHE_HIT, DefaultExecutionContext
from sqlmodel import Session

from specdec_collector.core.exposition import extract_spec_decode
from specdec_collector.core.readings import SnapshotPhase, TargetReading
from specdec_collector.schemas import WindowCreate
from specdec_collector.store.db import write_alone
from specdec_collector.store.tables import TABLES, utcnow
from specdec_collector.windows.catalogue import _KNOWN
from specdec_collector.windows.rehearsal import rehearse_window
from specdec_collector.windows.storage import add_baseline, add_window, load_window, store_snapshots
from specdec_collector.windows.stored import Actor
from tests.support.payloads import fixture
from tests.support.windows import close_window


def _rows(database: Engine) -> dict[str, int]:
    with database.connect() as connection:
        return {
            name: connection.execute(select(func.count()).select_from(table)).scalar_one()
            for name, table in TABLES.items()
        }


def _start_sample_stop(database: Engine) -> None:
    """A window of three targets (the rehearsal has two), started, sampled and stopped."""
    actor = Actor(team="t", key="k")
    body = WindowCreate(targets=["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"],
                        sample_interval_s=5.0)  # fmt: skip
    targets = body.parsed_targets()
    series = extract_spec_decode(fixture("vllm_v1_dp8_k5.txt"))
    outcomes = [TargetReading(target, utcnow(), series) for target in targets]
    stored = write_alone(database, add_window, actor, "w", body, targets, 10, "r", 30.0)
    assert stored is not None
    write_alone(database, add_baseline, stored, outcomes)
    ids = {t.name: t.id for t in stored.targets}
    write_alone(
        database, lambda tx: store_snapshots(tx.session, ids, SnapshotPhase.SAMPLE, outcomes)
    )
    stored = load_window(database, actor.team, "w")
    assert close_window(database, stored, actor, outcomes) is not None


def test_the_rehearsal_stores_nothing_and_remembers_no_series(database: Engine) -> None:
    before = _rows(database)
    rehearse_window(database)
    assert _rows(database) == before
    with Session(database) as session:
        known = _KNOWN.of(session)
    assert known.ids == {} and known.keys == {}


def test_after_the_rehearsal_a_start_and_a_stop_compile_nothing(database: Engine) -> None:
    """Every statement of a window's start, samples and stop was compiled by the rehearsal
    (SQLAlchemy's cache of compiled statements, per engine): none is compiled again."""
    rehearse_window(database)
    misses: list[str] = []

    @event.listens_for(database, "before_cursor_execute")
    def seen(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        assert isinstance(context, DefaultExecutionContext)
        if context.compiled is not None and context.cache_hit is not CACHE_HIT:
            misses.append(statement.split("\n")[0][:80])

    _start_sample_stop(database)
    assert misses == []
