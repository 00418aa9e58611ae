"""The statements a window's calls send, counted: each one a round trip in the writes' lane
on PostgreSQL, and a step that gives the interpreter's lock away and wins it back on SQLite.

What each call stores is the tests' (`tests/windows/test_storage.py`, `tests/store/test_lanes.py`,
`tests/windows/test_catalogue.py`, `tests/windows/test_rehearsal.py`); how many statements it
takes to store it is a speed figure, measured here on a fresh SQLite file and a fresh schema
of the suite's throwaway PostgreSQL, each figure against the count the write path was built
to.
"""

import asyncio
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.engine.default import CACHE_HIT, DefaultExecutionContext
from sqlmodel import Session

from specdec_collector.core.exposition import extract_spec_decode
from specdec_collector.core.readings import SnapshotPhase, TargetReading
from specdec_collector.core.targets import parse_target
from specdec_collector.schemas import WindowCreate
from specdec_collector.store.db import open_database, write_alone
from specdec_collector.store.lanes import Lane
from specdec_collector.store.migrate import upgrade_database
from specdec_collector.store.tables import utcnow
from specdec_collector.store.transaction import WriteTransaction
from specdec_collector.windows.catalogue import series_ids
from specdec_collector.windows.closing import _LATEST_SNAPSHOT
from specdec_collector.windows.overlaps import overlaps_of
from specdec_collector.windows.rehearsal import rehearse_window
from specdec_collector.windows.storage import add_baseline, add_window, load_window, store_snapshots
from specdec_collector.windows.stored import Actor
from specdec_collector.windows.views import read_view
from tests.bench.figures import Figure, show
from tests.support.payloads import InstanceCounters, fixture, vllm_payload
from tests.support.postgres import fresh_schema, postgres_server
from tests.support.windows import close_window, store_baseline

COMMAND = "python -m tests.bench.bench_statements"
ACTOR = Actor("default", "t")
SERIES = extract_spec_decode(vllm_payload([InstanceCounters(5, 15, [3, 2, 1])]))


@contextmanager
def _database(url: str) -> Iterator[Engine]:
    upgrade_database(url)
    database = open_database(url)
    try:
        yield database
    finally:
        database.dispose()


@contextmanager
def _recorded(database: Engine) -> Iterator[list[tuple[str, Any, Any]]]:
    """Each statement `database` sends meanwhile: its text, parameters and context."""
    sent: list[tuple[str, Any, Any]] = []

    def record(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, *_: Any
    ) -> None:
        sent.append((statement, parameters, context))

    event.listen(database, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(database, "before_cursor_execute", record)


def _window(database: Engine, window_id: str, count: int = 1, interval: float | None = None) -> Any:
    targets = [parse_target(f"127.0.0.1:{9100 + n}") for n in range(count)]
    body = WindowCreate(targets=[t.name for t in targets], sample_interval_s=interval)
    stored = write_alone(database, add_window, ACTOR, window_id, body, targets, 10, "r", 0)
    assert stored is not None
    return stored, targets


def known_endpoint(database: Engine) -> tuple[int, int]:
    """A second window on a server whose series are stored: its baseline's catalogue
    statements, and its snapshot inserts."""
    first, targets = _window(database, "w")
    reading = TargetReading(targets[0], datetime.now(UTC), SERIES)
    store_baseline(database, first, [reading])
    second, _ = _window(database, "w2")
    with _recorded(database) as sent:
        store_baseline(database, second, [reading])
    statements = [s for s, _, _ in sent]
    return (
        sum("endpoint_series" in s for s in statements),
        sum(s.startswith("INSERT INTO snapshot") for s in statements),
    )


def open_view_overlap_queries(database: Engine) -> int:
    """The overlaps queries (the only ones that read windows by their start) of an open
    window's view: an open window has no results to attach overlaps to."""
    _window(database, "open")
    with _recorded(database) as sent:
        read_view(database, ACTOR.team, "open")
    return sum("window.started_at <" in s for s, _, _ in sent)


def overlaps_asked_again(database: Engine) -> tuple[int, int]:
    """The statements of a closed window's overlaps asked a second time, and how many of
    them read its targets (a window's targets never change: each process reads them once)."""
    _window(database, "beside", 1)
    stored, targets = _window(database, "main", 1)
    store_baseline(database, stored, [TargetReading(targets[0], utcnow(), SERIES)])
    stored = load_window(database, ACTOR.team, "main")
    assert close_window(database, stored, ACTOR, [TargetReading(targets[0], utcnow(), SERIES)])
    stored = load_window(database, ACTOR.team, "main")
    with Session(database) as session:
        overlaps_of(session, stored)
    with _recorded(database) as sent, Session(database) as session:
        overlaps_of(session, stored)
    return len(sent), sum("window_target" in s for s, _, _ in sent)


def baseline_of_five(database: Engine) -> int:
    """The snapshot inserts of a baseline of five targets."""
    stored, targets = _window(database, "five", 5)
    readings = [TargetReading(t, datetime.now(UTC), SERIES) for t in targets]
    with _recorded(database) as sent:
        store_baseline(database, stored, readings)
    return sum(s.startswith("INSERT INTO snapshot") for s, _, _ in sent)


def start_statements(database: Engine) -> int:
    """The statements of a start's write of four targets."""
    with _recorded(database) as sent:
        _window(database, "start", 4)
    return len(sent)


def stop_writes(database: Engine, interval: float | None) -> tuple[int, int]:
    """A stop of one target: its looks for a snapshot landed since, and its writes."""
    stored, targets = _window(database, f"stop-{interval}", 1, interval)
    store_baseline(database, stored, [TargetReading(targets[0], datetime.now(UTC), SERIES)])
    stored = load_window(database, ACTOR.team, stored.window.window_id)
    final = TargetReading(targets[0], datetime.now(UTC), SERIES)
    with _recorded(database) as sent:
        assert close_window(database, stored, ACTOR, [final]) is not None
    statements = [s for s, _, _ in sent]
    writes = sum(s.split()[0] in ("WITH", "INSERT", "UPDATE") for s in statements)
    return sum("max(snapshot.id" in s for s in statements), writes


def team_locks(database: Engine) -> int:
    """The team lock requests of one group of four starts of two teams (PostgreSQL)."""
    lane = Lane("bench", serial=True, database=database)
    target = parse_target("127.0.0.1:9100")
    body = WindowCreate(targets=[target.name])

    async def group() -> list[Any]:
        def start(team: str, window_id: str) -> Any:
            return lane.write(add_window, Actor(team, "k"), window_id, body, [target], 10, "r", 0)

        # The lane held while the four queue: they then run as one group.
        free = threading.Event()
        held = asyncio.ensure_future(lane.run(free.wait))
        starts = [
            start(*which) for which in (("one", "a"), ("two", "a"), ("one", "b"), ("one", "c"))
        ]
        queued = [asyncio.ensure_future(s) for s in starts]
        for _ in range(3):  # each write is queued at its first step
            await asyncio.sleep(0)
        free.set()
        await held
        return list(await asyncio.gather(*queued))

    with _recorded(database) as sent:
        asyncio.run(group())
    lane.close()
    return sum("advisory_xact_lock" in s and "team" in s for s, _, _ in sent)


def purge_count_reads(database: Engine) -> int:
    """The reads of the catalogue's purge count by one transaction of two writes."""
    endpoints = ["http://127.0.0.1:9001/metrics", "http://127.0.0.1:9002/metrics"]

    def two_writes(tx: WriteTransaction) -> None:
        for endpoint in endpoints:
            series_ids(tx.session, {endpoint: set(SERIES)})

    with _recorded(database) as sent:
        write_alone(database, two_writes)
    return sum(
        "catalogue_purge" in s and s.lstrip().upper().startswith("SELECT") for s, _, _ in sent
    )


def compiled_after_rehearsal(database: Engine) -> int:
    """The statements a start, a sample and a stop compile after the rehearsal."""
    rehearse_window(database)
    body = WindowCreate(
        targets=["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"], sample_interval_s=5.0
    )
    targets = body.parsed_targets()
    series = extract_spec_decode(fixture("vllm_v1_dp8_k5.txt"))
    outcomes = [TargetReading(target, utcnow(), series) for target in targets]
    with _recorded(database) as sent:
        stored = write_alone(database, add_window, ACTOR, "rehearsed", body, targets, 10, "r", 30.0)
        assert stored is not None
        write_alone(database, add_baseline, stored, outcomes)
        ids = {t.name: t.id for t in stored.targets}
        write_alone(
            database, lambda tx: store_snapshots(tx.session, ids, SnapshotPhase.SAMPLE, outcomes)
        )
        stored = load_window(database, ACTOR.team, "rehearsed")
        assert close_window(database, stored, ACTOR, outcomes) is not None
    return sum(
        isinstance(context, DefaultExecutionContext)
        and context.compiled is not None
        and context.cache_hit is not CACHE_HIT
        for _, _, context in sent
    )


def latest_snapshot_rows(database: Engine) -> int:
    """The snapshot rows PostgreSQL reads to find a window's newest snapshot, with 3,000
    another window stored since."""
    mine, _ = _window(database, "mine", 2)
    busy, targets = _window(database, "busy", 1)
    samples = [TargetReading(targets[0], utcnow(), SERIES)] * 3000
    ids = {targets[0].name: busy.targets[0].id}
    write_alone(
        database, lambda tx: store_snapshots(tx.session, ids, SnapshotPhase.SAMPLE, samples)
    )
    store_baseline(database, mine, [TargetReading(t, utcnow(), SERIES) for t in targets * 2])
    statement = _LATEST_SNAPSHOT.params(target_ids=[t.id for t in mine.targets]).compile(
        dialect=database.dialect, compile_kwargs={"literal_binds": True}
    )
    with Session(database) as session:
        (plan,) = session.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}")).scalar_one()
    return _rows_read(plan["Plan"], "snapshot")


def _rows_read(plan: dict[str, Any], relation: str) -> int:
    read = 0
    if plan.get("Relation Name") == relation:
        read += int(plan.get("Actual Rows", 0)) + int(plan.get("Rows Removed by Filter", 0))
    return read + sum(_rows_read(child, relation) for child in plan.get("Plans", []))


def _figure(what: str, count: int, target: int, at_most: bool = False) -> Figure:
    met = count <= target if at_most else count == target
    shown = f"≤ {target}" if at_most else str(target)
    return Figure(what, str(count), shown, met, COMMAND)


Schema = Callable[[str], AbstractContextManager[str]]


def measure() -> list[Figure]:
    with tempfile.TemporaryDirectory() as folder, postgres_server() as server:

        @contextmanager
        def sqlite(name: str) -> Iterator[str]:
            yield f"sqlite:///{Path(folder) / name}.db"

        def postgresql(name: str) -> AbstractContextManager[str]:
            return fresh_schema(server)

        return _measured_on("SQLite", sqlite) + _measured_on("PostgreSQL", postgresql)


def _measured_on(kind: str, schema: Schema) -> list[Figure]:
    """Each figure on a database of its own, as `schema` makes them."""

    def on(name: str, measure: Callable[[Engine], Any]) -> Any:
        with schema(name) as url, _database(url) as database:
            return measure(database)

    catalogue, inserts = on("known", known_endpoint)
    unsampled_looks, unsampled_writes = on("stop", lambda d: stop_writes(d, None))
    sampled_looks, _ = on("sampled", lambda d: stop_writes(d, 1.0))
    stop_target = 1 if kind == "PostgreSQL" else 3
    overlaps, target_reads = on("overlaps", overlaps_asked_again)
    figures = [
        _figure(f"{kind}: catalogue statements of a known server's baseline", catalogue, 0),
        _figure(f"{kind}: snapshot inserts of that baseline", inserts, 1),
        _figure(
            f"{kind}: snapshot inserts of a baseline of 5 targets", on("five", baseline_of_five), 1
        ),
        _figure(
            f"{kind}: an unsampled stop's looks for a snapshot landed since", unsampled_looks, 0
        ),
        _figure(f"{kind}: a sampled stop's looks for a snapshot landed since", sampled_looks, 1),
        _figure(
            f"{kind}: writes of an unsampled stop of known series", unsampled_writes, stop_target
        ),
        _figure(
            f"{kind}: overlaps queries of an open window's view",
            on("open", open_view_overlap_queries),
            0,
        ),
        _figure(f"{kind}: statements of a window's overlaps asked again", overlaps, 1),
        _figure(f"{kind}: of them, reads of its targets", target_reads, 0),
        _figure(
            f"{kind}: purge count reads of a transaction of two writes",
            on("purges", purge_count_reads),
            1,
        ),
        _figure(
            f"{kind}: statements compiled by a window after the rehearsal",
            on("rehearsed", compiled_after_rehearsal),
            0,
        ),
    ]
    if kind == "PostgreSQL":
        figures += [
            _figure("PostgreSQL: statements of a start's write", on("start", start_statements), 2),
            _figure(
                "PostgreSQL: team lock requests of a group of 4 starts of 2 teams",
                on("locks", team_locks),
                2,
            ),
            _figure(
                "PostgreSQL: snapshot rows read for a stop's newest snapshot",
                on("latest", latest_snapshot_rows),
                2,
                at_most=True,
            ),
        ]
    return figures


if __name__ == "__main__":
    show(measure())
