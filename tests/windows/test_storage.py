"""Window storage under concurrency, on SQLite and PostgreSQL."""

import asyncio
import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, func, text
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from specdec_collector.core.exposition import (
    ExtractionLimits,
    SeriesKey,
    extract_spec_decode,
)
from specdec_collector.core.figures import build_result
from specdec_collector.core.readings import (
    Failure,
    FailureKind,
    Reading,
    SnapshotPhase,
    TargetReading,
)
from specdec_collector.core.results import (
    MAX_NAMED_OVERLAPS,
    UNREADABLE_RESULT,
    FlagKind,
    TargetResult,
)
from specdec_collector.core.targets import Target, parse_target
from specdec_collector.schemas import WindowCreate
from specdec_collector.service.auth import any_db_key
from specdec_collector.sources.protocol import Chain
from specdec_collector.store.db import open_database, write_alone, write_session
from specdec_collector.store.migrate import upgrade_database
from specdec_collector.store.store import Cost, Store, run_to_end
from specdec_collector.store.tables import TABLES, EndpointSeries, Snapshot, utcnow
from specdec_collector.windows.answers import view_json
from specdec_collector.windows.cache import OpenViews, ResultsCache
from specdec_collector.windows.catalogue import (
    ROWS_PER_INSERT,
    KnownSeries,
    labels_digest,
    labels_from_text,
    labels_to_text,
    series_ids,
)
from specdec_collector.windows.closing import ClosedWindow, prepare_close
from specdec_collector.windows.overlaps import overlaps_of
from specdec_collector.windows.service import WindowService
from specdec_collector.windows.storage import (
    add_baseline,
    add_window,
    load_window,
    store_snapshots,
)
from specdec_collector.windows.stored import Actor, StoredWindow
from specdec_collector.windows.views import read_view
from tests.support.databases import migrate
from tests.support.payloads import InstanceCounters, vllm_payload
from tests.support.windows import close_window, store_baseline


@pytest.fixture
def engines(database_url: str) -> Iterator[tuple[Engine, Engine]]:
    """Two engines on one database: a reader, and a writer that commits in between."""
    migrate(database_url)
    reader, writer = open_database(database_url), open_database(database_url)
    yield reader, writer
    reader.dispose()
    writer.dispose()


def test_a_baseline_committed_during_a_read_never_breaks_it(engines: tuple[Engine, Engine]) -> None:
    """The baseline (series and snapshot) commits between the read's statements."""
    reader, writer = engines
    target = parse_target("127.0.0.1:9100")
    body = WindowCreate(targets=[target.name])
    assert write_alone(
        writer, add_window, Actor("default", "test"), "w", body, [target], 10, "r", 0
    )
    stored = load_window(writer, "default", "w")
    series = extract_spec_decode(
        vllm_payload([InstanceCounters(drafts=5, draft_tokens=15, accepted_per_pos=[3, 2, 1])])
    )
    outcome = TargetReading(target, datetime.now(UTC), series)
    committed: list[bool] = []

    def commit_baseline_once(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not committed and ("snapshot" in statement or "endpoint_series" in statement):
            committed.append(True)
            store_baseline(writer, stored, [outcome])

    event.listen(reader, "after_cursor_execute", commit_baseline_once)
    try:
        window = read_view(reader, "default", "w")
    finally:
        event.remove(reader, "after_cursor_execute", commit_baseline_once)
    assert committed == [True]
    # Read before the baseline landed, or after: either is right; a half-seen baseline is not.
    before = window.targets[0].before
    assert (None if before is None else before.model_dump()) in (None, {"num_drafts": 5, "num_draft_tokens": 15, "num_accepted_tokens": 6,
                                               "accepted_per_pos": {"0": 3, "1": 2, "2": 1}})  # fmt: skip
    assert read_view(reader, "default", "w").targets[0].before is not None


# --- the results cache ----------------------------------------------------------------------


def test_results_cache_keeps_the_most_recently_read_windows_encoded() -> None:
    cache = ResultsCache(max_windows=2)
    result = TargetResult(status="na", url="http://h:1/metrics", error="réponse: é")
    one = [("h:1", result)]
    stored = cache.put("team-a", "w1", one)
    assert json.loads(stored.encoded("h:1") or b"") == result.as_json()
    assert "é".encode() in (stored.encoded("h:1") or b"")  # UTF-8, as JSONResponse sends it
    assert stored.encoded("h:2") is None  # not a target of the window
    assert cache.get("team-a", "w1") is stored
    assert cache.get("team-b", "w1") is None  # per team: another team's id is another window
    cache.put("team-a", "w2", one)
    assert cache.get("team-a", "w1") is stored  # w1 read last: w2 is now the oldest
    cache.put("team-a", "w3", one)
    assert cache.get("team-a", "w2") is None
    assert cache.get("team-a", "w1") is stored and cache.get("team-a", "w3") is not None


def test_results_cache_of_size_zero_keeps_nothing() -> None:
    cache = ResultsCache(max_windows=0)
    result = TargetResult(status="na", url="u")
    assert cache.put("t", "w", [("h:1", result)]).encoded("h:1") == (
        result.model_dump_json().encode()
    )
    assert cache.get("t", "w") is None


def _service_for_reads(database: Engine) -> WindowService:
    """A window service with what reads use (the engine, the kept results and views)."""
    unused: Any = None  # sources, sampler, settings, lanes: a read uses none
    return WindowService(
        store=Store(database),
        sources=unused,
        sampler=unused,
        settings=unused,
        kept_results=ResultsCache(8),
        open_views=OpenViews(8, 1 << 20),
        read_budget=unused,
    )


@pytest.mark.anyio
async def test_an_open_windows_view_is_kept_until_another_replica_closes_it(
    engines: tuple[Engine, Engine],
) -> None:
    """A read of an open window answers the view it keeps until the window is closed, here
    through another engine (another replica's stop). (The statements such a read sends are
    `make bench`'s: `bench_statements`.)"""
    database, other = engines
    target = _window_of_one_target(database)
    stored = load_window(database, "default", "w")
    counters = InstanceCounters(drafts=5, draft_tokens=15, accepted_per_pos=[3, 2, 1])
    series = extract_spec_decode(vllm_payload([counters]))
    store_baseline(database, stored, [TargetReading(target, datetime.now(UTC), series)])
    service = _service_for_reads(database)
    first = await view_json(service, "default", "w")
    before = json.loads(first)["targets"][0]["before"]
    assert before == {
        "num_drafts": 5, "num_draft_tokens": 15, "num_accepted_tokens": 6,
        "accepted_per_pos": {"0": 3, "1": 2, "2": 1},
    }  # fmt: skip
    again = await view_json(service, "default", "w")
    assert again is first  # kept
    later = InstanceCounters(drafts=9, draft_tokens=27, accepted_per_pos=[6, 4, 1])
    final = TargetReading(target, datetime.now(UTC), extract_spec_decode(vllm_payload([later])))
    assert close_window(other, stored, Actor("default", "t"), [final]) is not None
    shown = json.loads(await view_json(service, "default", "w"))
    assert shown["state"] == "closed"
    data = shown["targets"][0]["result"]["data"]
    assert (data["num_drafts"], data["draft_tokens"], data["accepted_tokens"]) == (4, 12, 5)
    assert data["acceptance_rate"] == 5 / 12 * 100
    again_closed = await view_json(service, "default", "w")
    assert json.loads(again_closed) == shown and service.open_views.get("default", "w") is None


def test_open_views_keep_the_windows_read_last_and_forget_a_dropped_one() -> None:
    views: OpenViews = OpenViews(max_windows=2, max_weight=100)
    made = [f"view {index}".encode() for index in range(3)]
    for index, view in enumerate(made):
        views.put("t", f"w{index}", view, len(view))
    assert views.get("t", "w0") is None and views.get("t", "w2") is made[2]
    views.drop("t", "w2")
    assert views.get("t", "w2") is None and views.get("t", "w1") is made[1]
    views.drop("t", "w9")  # never kept: nothing to do
    nothing: OpenViews = OpenViews(max_windows=0, max_weight=100)
    nothing.put("t", "w", made[0], len(made[0]))
    assert nothing.get("t", "w") is None


def test_kept_windows_are_bounded_by_their_weight_too() -> None:
    """A few wide windows cannot take the memory the many narrow ones were given."""
    views: OpenViews = OpenViews(max_windows=100, max_weight=100)
    for index in range(5):
        views.put("t", f"narrow{index}", b"x" * 10, 10)
    views.put("t", "wide", b"x" * 60, 60)  # 110 in all: the one read longest ago goes
    gone = [views.get("t", f"narrow{i}") is None for i in range(5)]
    assert gone == [True, False, False, False, False]
    views.put("t", "wide", b"x" * 30, 30)  # put again: weighs its new size only
    assert views.get("t", "narrow2") is not None and views.get("t", "wide") == b"x" * 30
    views.put("t", "huge", b"x" * 101, 101)  # heavier than everything: not kept, nothing lost
    assert views.get("t", "huge") is None and views.get("t", "narrow2") is not None
    results = ResultsCache(max_windows=10, max_targets=5)
    wide = [(f"h:{port}", TargetResult(status="na", url="u")) for port in range(4)]
    results.put("t", "a", wide[:2])
    results.put("t", "b", wide)  # 6 targets: `a` goes
    assert results.get("t", "a") is None and results.get("t", "b") is not None


def test_series_another_writer_adds_first_are_read_back(postgres_url: str) -> None:
    """Another writer can add a series this process does not know just before our insert:
    the insert keeps its row, returns nothing for it, and its id comes from a read."""
    upgrade_database(postgres_url)
    database, other = open_database(postgres_url), open_database(postgres_url)
    target = parse_target("127.0.0.1:9100")
    inserted = write_alone(
        database,
        add_window,
        Actor("default", "t"),
        "w",
        WindowCreate(targets=[target.name]),
        [target],
        10,
        "r",
        0,
    )
    assert inserted is not None
    target_id = inserted.targets[0].id
    series = extract_spec_decode(
        vllm_payload([InstanceCounters(drafts=5, draft_tokens=15, accepted_per_pos=[3, 2, 1])])
    )
    first = next(iter(series))
    raced: list[int] = []

    def add_one_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if (
            not raced
            and statement.lstrip().upper().startswith("INSERT")
            and "endpoint_series" in statement
        ):
            with other.begin() as connection:
                raced.append(
                    connection.execute(
                        TABLES["endpoint_series"].insert().returning(TABLES["endpoint_series"].c.id),
                        {"endpoint": target.url, "family": first.role.value,
                         "labels": labels_to_text(first.labels),
                         "labels_digest": labels_digest(labels_to_text(first.labels))},
                    ).scalar_one()
                )  # fmt: skip

    event.listen(database, "before_cursor_execute", add_one_first)
    try:
        with write_session(database) as transaction:
            store_snapshots(
                transaction.session, {target.name: target_id}, SnapshotPhase.BEFORE,
                [TargetReading(target, datetime.now(UTC), series)],
            )  # fmt: skip
            transaction.commit()
    finally:
        event.remove(database, "before_cursor_execute", add_one_first)
    assert raced  # the race happened
    window = read_view(database, "default", "w")
    before = window.targets[0].before
    assert before is not None and before.num_drafts == 5 and before.num_accepted_tokens == 6
    with Session(database) as session:
        counters = session.exec(select(Snapshot)).one().counters
    assert counters is not None and raced[0] in {int(row[0]) for row in counters if row[0]}
    database.dispose()
    other.dispose()


def _window_of_one_target(database: Engine, sample_interval_s: float | None = None) -> Target:
    """Window `w` of team `default`, open, on one target (returned)."""
    target = parse_target("127.0.0.1:9100")
    body = WindowCreate(targets=[target.name], sample_interval_s=sample_interval_s)
    assert write_alone(database, add_window, Actor("default", "t"), "w", body, [target], 10, "r", 0)
    return target


def test_label_sets_of_any_length_are_stored_and_read_back(
    engines: tuple[Engine, Engine],
) -> None:
    """PostgreSQL held label text in VARCHAR(4096) under a B-tree unique index (~2700 bytes)."""
    database, _ = engines
    target = _window_of_one_target(database)
    stored = load_window(database, "default", "w")
    long = {"pod": "p" * 20_000, "note": "é\x00" * 3000}
    payload = vllm_payload([InstanceCounters(5, 15, [3, 2, 1], extra_labels=long)])
    limits = ExtractionLimits(max_label_chars=100_000)
    outcome = TargetReading(target, datetime.now(UTC), extract_spec_decode(payload, limits))
    store_baseline(database, stored, [outcome])
    store_baseline(database, stored, [outcome])  # the same series again: found, not added twice
    with Session(database) as session:
        catalogue = session.exec(select(EndpointSeries)).all()
    assert len(catalogue) == len(outcome.series or {}) == 6 + 6  # with the six witnesses
    assert {labels_from_text(row.labels) for row in catalogue} == {
        key.labels for key in outcome.series or {}
    }
    assert read_view(database, "default", "w").targets[0].before is not None


def test_a_stored_result_that_does_not_read_is_na_and_never_breaks_a_read(
    engines: tuple[Engine, Engine],
) -> None:
    """Older versions stored `ok` results whose figures were inf: null once written as JSON."""
    database, _ = engines
    target = _window_of_one_target(database)
    broken: dict[str, Any] = {"status": "ok", "url": target.url, "error": None, "raw": {},
              "data": {"num_drafts": 5, "draft_tokens": None, "accepted_tokens": 3,
                       "acceptance_rate": None, "acceptance_length": None,
                       "per_position_acceptance_rates": {}}}  # fmt: skip
    with database.begin() as connection:
        connection.execute(TABLES["window_target"].update().values(result=broken, status="ok"))
        connection.execute(TABLES["window"].update().values(state="closed"))
    (shown,) = read_view(database, "default", "w").targets
    assert shown.result is not None
    assert (shown.result.status, shown.result.error, shown.result.data) == (
        "na", UNREADABLE_RESULT, None
    )  # fmt: skip


def test_windows_on_the_same_server_share_its_series(
    engines: tuple[Engine, Engine],
) -> None:
    """A second window on the same server adds no series, and each window's snapshot reads
    back its values (the statements a known server's snapshot takes: `bench_statements`)."""
    database, _ = engines
    target = _window_of_one_target(database)
    series = extract_spec_decode(vllm_payload([InstanceCounters(5, 15, [3, 2, 1])]))
    outcome = TargetReading(target, datetime.now(UTC), series)
    store_baseline(database, load_window(database, "default", "w"), [outcome])
    assert write_alone(database, add_window, Actor("default", "t"), "w2", WindowCreate(targets=[target.name]),
                         [target], 10, "r", 0)  # fmt: skip
    store_baseline(database, load_window(database, "default", "w2"), [outcome])
    with Session(database) as session:
        assert len(session.exec(select(EndpointSeries)).all()) == len(series) == 6 + 6
    for window_id in ("w", "w2"):
        before = read_view(database, "default", window_id).targets[0].before
        assert before is not None and (before.num_drafts, before.num_accepted_tokens) == (5, 6)


def test_servers_that_show_the_same_series_share_their_rows(
    engines: tuple[Engine, Engine],
) -> None:
    """The servers of one deployment show the same series: each is one row, kept by the server
    that showed it first, and each server's snapshot reads back its own values."""
    database, _ = engines
    targets = [parse_target(f"127.0.0.1:{port}") for port in (9100, 9101, 9102)]
    body = WindowCreate(targets=[target.name for target in targets])
    stored = write_alone(
        database, add_window, Actor("default", "t"), "w", body, targets, 10, "r", 0
    )
    assert stored is not None
    outcomes = [
        TargetReading(target, datetime.now(UTC), extract_spec_decode(vllm_payload(
            [InstanceCounters(drafts, 3 * drafts, [drafts, drafts // 2, 1])])))
        for target, drafts in zip(targets, (5, 7, 9), strict=True)
    ]  # fmt: skip
    store_baseline(database, stored, outcomes)
    with Session(database) as session:
        rows = session.exec(select(EndpointSeries)).all()
    assert len(rows) == len(outcomes[0].series or {}) == 6 + 6
    assert {row.endpoint for row in rows} == {targets[0].url}
    shown = read_view(database, "default", "w").targets
    assert [t.before.num_drafts if t.before else None for t in shown] == [5, 7, 9]


def test_more_new_series_than_one_insert_holds_are_all_stored_once(
    engines: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """New series go in statements of `ROWS_PER_INSERT` rows: more than one statement holds,
    some of them stored before by another process (inserted again, they are read back),
    each gets one row and one id, the same for every process; a series two endpoints show is
    one row, kept by the endpoint that showed it first."""
    database, other = engines
    series = extract_spec_decode(vllm_payload([InstanceCounters(5, 15, [3, 2, 1])]))

    def own(n: int) -> set[SeriesKey]:  # series no other server shows
        return {
            SeriesKey(key.role, tuple(sorted((*key.labels, ("server", str(n))))), key.engine)
            for key in series
        }

    endpoints = [f"http://10.0.0.1:{9000 + n}/metrics" for n in range(ROWS_PER_INSERT // 6 + 20)]
    wanted = {endpoint: own(n) | set(series) for n, endpoint in enumerate(endpoints)}
    distinct = {key for keys in wanted.values() for key in keys}
    assert len(distinct) > ROWS_PER_INSERT
    early = {endpoint: wanted[endpoint] for endpoint in endpoints[::3]}  # another process's
    with write_session(other) as transaction:
        stored_early, _ = series_ids(transaction.session, early)
        transaction.commit()
    # This process has met none of them (the other one stands for another process).
    monkeypatch.setattr(KnownSeries, "remember", lambda self, rows: None)
    with write_session(database) as transaction:
        ids, refused = series_ids(transaction.session, wanted)
        transaction.commit()
    assert refused == {}
    assert set(ids) == distinct
    assert len(set(ids.values())) == len(ids)
    assert {key: ids[key] for key in stored_early} == stored_early
    with Session(database) as session:
        rows = session.exec(select(EndpointSeries)).all()
    assert len(rows) == len(ids)
    added_by = {row.id: row.endpoint for row in rows}
    assert {added_by[ids[key]] for key in series} == {endpoints[0]}  # shown by all, first by it
    assert all(added_by[ids[key]] == endpoint for n, endpoint in enumerate(endpoints)
               for key in own(n))  # fmt: skip


def test_series_added_by_a_rolled_back_write_are_not_remembered(
    engines: tuple[Engine, Engine],
) -> None:
    """A write that rolls back takes its new series with it (SQLite may give their ids to
    other rows): the next write adds them again rather than naming ids that do not exist."""
    database, _ = engines
    target = _window_of_one_target(database)
    stored = load_window(database, "default", "w")
    ids = {target.name: stored.targets[0].id}
    series = extract_spec_decode(vllm_payload([InstanceCounters(5, 15, [3, 2, 1])]))
    outcome = TargetReading(target, datetime.now(UTC), series)
    with write_session(database) as transaction:
        store_snapshots(transaction.session, ids, SnapshotPhase.BEFORE, [outcome])
        transaction.rollback()
    with Session(database) as session:
        assert session.exec(select(EndpointSeries)).all() == []
    store_baseline(database, stored, [outcome])
    with Session(database) as session:
        assert len(session.exec(select(EndpointSeries)).all()) == len(series)
    before = read_view(database, "default", "w").targets[0].before
    assert before is not None and (before.num_drafts, before.num_draft_tokens) == (5, 15)


def test_a_result_is_stored_without_its_defaults_and_url_and_reads_back_whole() -> None:
    """Stored results leave out what the model puts back (defaults, the row's URL)."""
    before = extract_spec_decode(vllm_payload([InstanceCounters(5, 15, [3, 2, 1])]))
    after = extract_spec_decode(vllm_payload([InstanceCounters(9, 27, [6, 4, 2])]))
    from specdec_collector.core.figures import build_result

    for result in (
        build_result("http://h:1/metrics", before, after),
        build_result(
            "http://h:1/metrics", before, Failure(FailureKind.CONNECT, "connection refused")
        ),
    ):
        stored = json.loads(result.as_stored())
        assert "url" not in stored and "samples" not in stored
        assert TargetResult.from_stored(stored, result.url) == result
        assert len(result.as_stored()) < len(result.model_dump_json())


def test_a_sample_stored_while_a_stop_computes_its_results_is_counted(
    engines: tuple[Engine, Engine],
) -> None:
    """A stop computes its results before it takes the write lock; a sample that lands in
    between (another worker's sampler) makes it compute them again under the lock."""
    from tests.support.windows import close_window

    database, writer = engines
    target = _window_of_one_target(database, sample_interval_s=1.0)
    stored = load_window(database, "default", "w")
    ids = {target.name: stored.targets[0].id}
    reading = extract_spec_decode(vllm_payload([InstanceCounters(5, 15, [3, 2, 1])]))
    later = extract_spec_decode(vllm_payload([InstanceCounters(9, 27, [6, 4, 2])]))
    store_baseline(database, stored, [TargetReading(target, datetime.now(UTC), reading)])
    sample = TargetReading(target, datetime.now(UTC), later)
    final = TargetReading(target, datetime.now(UTC), later)
    landed: list[bool] = []

    def land_a_sample(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not landed and "FROM snapshot" in statement:
            landed.append(True)
            with write_session(writer) as transaction:
                store_snapshots(transaction.session, ids, SnapshotPhase.SAMPLE, [sample])
                transaction.commit()

    event.listen(database, "after_cursor_execute", land_a_sample)
    try:
        closed = close_window(database, stored, Actor("default", "t"), [final])
    finally:
        event.remove(database, "after_cursor_execute", land_a_sample)
    assert landed and closed is not None
    result = closed.results[stored.targets[0].id]
    assert result is not None and result.samples.taken == 1
    assert result.data is not None and result.data.num_drafts == 4


def _closed_with(
    database: Engine, stored: StoredWindow, final: Reading, event_name: str, listener: Any
) -> ClosedWindow | None:
    """`stored` (one target) closed with the final reading `final`, `listener` listening to
    `event_name` of `database` meanwhile."""
    from tests.support.windows import close_window

    event.listen(database, event_name, listener)
    try:
        reading = TargetReading(stored.targets[0].parsed(), datetime.now(UTC), final)
        return close_window(database, stored, Actor("default", "t"), [reading])
    finally:
        event.remove(database, event_name, listener)


def test_a_baseline_stored_while_a_stop_computes_its_results_is_counted(
    engines: tuple[Engine, Engine],
) -> None:
    """A stop that comes while its window's start is still taking the baselines may read
    none; one that lands before the stop's write makes it compute the results again with it."""
    database, writer = engines
    target = _window_of_one_target(database)
    stored = load_window(database, "default", "w")
    before = extract_spec_decode(vllm_payload([InstanceCounters(5, 15, [3, 2, 1])]))
    after = extract_spec_decode(vllm_payload([InstanceCounters(9, 27, [6, 4, 2])]))
    landed: list[bool] = []

    def land_the_baseline(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not landed and "FROM snapshot" in statement:
            landed.append(True)
            baseline = TargetReading(target, datetime.now(UTC), before)
            store_baseline(writer, stored, [baseline])

    closed = _closed_with(database, stored, after, "after_cursor_execute", land_the_baseline)
    assert landed and closed is not None
    result = closed.results[stored.targets[0].id]
    assert result is not None and result.data is not None
    assert result.data.num_drafts == 4  # 9 - 5: from the baseline that landed


def test_a_stop_on_postgresql_written_in_one_statement_reads_back_as_three_write_it(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL, an unsampled window whose series are known: its stop closes it, stores its
    snapshots (a failed one too) and its results in one statement (`bench_statements`); they
    read back as the three statements of any other stop (or of this one with
    `SPECDEC_STOP_WRITE_AT_ONCE=false`) write them. A second stop of it writes nothing."""
    from specdec_collector.windows import closing
    from tests.support.windows import close_window

    upgrade_database(postgres_url)
    database = open_database(postgres_url)
    targets = [parse_target("127.0.0.1:9100"), parse_target("127.0.0.1:9101")]
    before = extract_spec_decode(vllm_payload([InstanceCounters(5, 15, [3, 2, 1])]))
    after = extract_spec_decode(vllm_payload([InstanceCounters(9, 27, [6, 4, 2])]))
    refused = Failure(FailureKind.CONNECT, "connection refused")
    decided: list[bool] = []
    real = closing._closes_at_once

    def stored_as(window_id: str, at_once: bool) -> tuple[Any, ...]:
        body = WindowCreate(targets=[t.name for t in targets])
        actor = Actor("default", "t")
        assert write_alone(database, add_window, actor, window_id, body, targets, 10, "r", 0)
        stored = load_window(database, "default", window_id)
        now = datetime.now(UTC)
        store_baseline(database, stored, [TargetReading(t, now, before) for t in targets])
        finals = [TargetReading(targets[0], now, after), TargetReading(targets[1], now, refused)]

        def deciding(*args: Any) -> bool:
            decided.append(real(*args))
            return decided[-1]

        monkeypatch.setattr(closing, "_closes_at_once", deciding)
        try:
            assert close_window(database, stored, actor, finals, at_once) is not None
            # Another stop came first: nothing written.
            assert close_window(database, stored, actor, finals, at_once) is None
        finally:
            monkeypatch.undo()
        with database.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT w.state, w.stopped_by, t.ordinal, t.result::text, t.status, "
                    "t.acceptance_rate, t.acceptance_length, t.num_drafts, t.result_engine, "
                    "t.exact, t.restarts, s.phase, s.error, s.error_kind, s.counters::text "
                    'FROM "window" w JOIN window_target t ON t.window_pk = w.id '
                    "JOIN snapshot s ON s.target_id = t.id WHERE w.window_id = :id "
                    "ORDER BY t.ordinal, s.id"
                ),
                {"id": window_id},
            ).all()
        return tuple(rows)

    try:
        at_once = stored_as("at-once", at_once=True)
        assert decided[0] is True  # written in one statement
        decided.clear()
        apart = stored_as("apart", at_once=False)
        assert decided == []  # the knob turned it off: never asked
    finally:
        database.dispose()
    assert len(at_once) == 4  # two targets, a baseline and a final snapshot each
    assert at_once == apart
    assert at_once[-1][13] == FailureKind.CONNECT and at_once[-1][14] == "null"


_Plan = Sequence[tuple[str, str, list[Target], float, float | None]]


def _plant(database: Engine, plan: _Plan, t0: datetime) -> None:
    """Windows as `plan` has them: (team, id, targets, started, stopped) in seconds after
    `t0`; one never stopped is open."""
    table = TABLES["window"]
    for team, window_id, targets, started, stopped in plan:
        body = WindowCreate(targets=[t.name for t in targets])
        assert write_alone(
            database, add_window, Actor(team, "k"), window_id, body, targets, 100, "r", 0
        )
        with database.begin() as connection:
            connection.execute(
                table.update()
                .where(table.c.window_id == window_id)
                .values(
                    started_at=t0 + timedelta(seconds=started),
                    stopped_at=None if stopped is None else t0 + timedelta(seconds=stopped),
                    state="open" if stopped is None else "closed",
                )
            )


def test_overlaps_name_each_shared_target_and_count_other_teams(
    engines: tuple[Engine, Engine],
) -> None:
    """Windows sharing some of a window's targets: each target lists the same team's windows
    that used it (in the order they started), and counts the other teams' ones, with the
    seconds each was open during the window; a window on none of them is not there."""
    database, _ = engines
    a, b, c, d = (parse_target(f"127.0.0.1:{port}") for port in (9101, 9102, 9103, 9104))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    # (team, id, targets, started, stopped) in seconds after t0; "main" runs 100-200.
    plan = [
        ("x", "main", [a, b, c], 100, 200),
        ("x", "late", [c], 150, None),  # open still: overlaps until the main window's end
        ("x", "early", [b, c], 50, 130),
        ("x", "apart", [d], 100, 200),
        ("x", "before", [a], 10, 100),  # ended as main started: no overlap
        ("y", "theirs", [a, c], 120, 170),
        ("y", "theirs-2", [c], 90, 110),
    ]
    _plant(database, plan, t0)
    stored = load_window(database, "x", "main")
    with Session(database) as session:
        found = overlaps_of(session, stored)
    shown = {key: overlaps.model_dump() for key, overlaps in found.items()}
    none = {"windows": 0, "seconds": 0.0}
    assert shown == {
        a.name: {
            "windows": [],
            "more_windows": none,
            "other_teams": {"windows": 1, "seconds": 50.0},
        },
        b.name: {
            "windows": [{"id": "early", "seconds": 30.0}],
            "more_windows": none,
            "other_teams": none,
        },
        c.name: {
            "windows": [{"id": "early", "seconds": 30.0}, {"id": "late", "seconds": 50.0}],
            "more_windows": none,
            "other_teams": {"windows": 2, "seconds": 60.0},
        },
    }
    # Asked again (a window's targets, read once per process: `bench_statements`), the same.
    with Session(database) as session:
        again = overlaps_of(session, stored)
    assert {key: overlaps.model_dump() for key, overlaps in again.items()} == shown


def test_overlaps_name_the_longest_of_many_and_count_the_rest(
    engines: tuple[Engine, Engine],
) -> None:
    """Beside more windows of its team than an overlap names, a target lists the longest
    overlaps (in the order they started) and counts the others with their seconds; the flag
    counts every one."""
    database, _ = engines
    target = parse_target("127.0.0.1:9101")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    extra = 5
    # Window i runs from 100 + i for 3 + 7 * i % 23 seconds: overlaps of mixed lengths.
    lengths = [3 + (7 * i) % 23 for i in range(MAX_NAMED_OVERLAPS + extra)]
    plan: _Plan = [
        ("x", "main", [target], 100, 200),
        *(("x", f"w{i}", [target], 100 + i, 100 + i + length) for i, length in enumerate(lengths)),
    ]
    _plant(database, plan, t0)
    stored = load_window(database, "x", "main")
    with Session(database) as session:
        overlaps = overlaps_of(session, stored)[target.name]
    # Longest first, ties to the earlier start: the ones named.
    ranked = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    named, counted = sorted(ranked[:MAX_NAMED_OVERLAPS]), ranked[MAX_NAMED_OVERLAPS:]
    assert overlaps.windows == [{"id": f"w{i}", "seconds": float(lengths[i])} for i in named]
    assert overlaps.more_windows.windows == extra
    assert overlaps.more_windows.seconds == pytest.approx(sum(lengths[i] for i in counted))
    assert overlaps.other_teams.windows == 0
    before, after = (
        extract_spec_decode(vllm_payload([InstanceCounters(d, 3 * d, [d, d // 2, 0])]))
        for d in (5, 50)
    )
    result = build_result(target.url, before, after).with_overlaps(overlaps)
    reasons = [flag.reason for flag in result.flags or [] if flag.kind is FlagKind.OVERLAPS]
    assert reasons and f"{len(lengths)} other window(s)" in reasons[0]


def test_overlap_seconds_are_the_stored_times_apart_to_the_millisecond(
    engines: tuple[Engine, Engine],
) -> None:
    """Times stored to the microsecond: each overlap is the times apart as timedeltas give
    them, rounded to the millisecond; one that rounds to nothing is no overlap."""
    database, _ = engines
    target = parse_target("127.0.0.1:9101")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    main_start, main_stop = 100.000001, 200.999999
    # (started, stopped) in seconds after t0, down to the microsecond.
    spans = [(99.5, 100.000401), (99.9, 100.0015), (150.123456, 201.5), (120.0004, 120.2009)]
    spans += [(100 + i * 0.777777, 100.5 + i * 1.234567) for i in range(1, 12)]
    plan: _Plan = [
        ("x", "main", [target], main_start, main_stop),
        *(("x", f"w{i}", [target], a, b) for i, (a, b) in enumerate(spans)),
    ]
    _plant(database, plan, t0)
    stored = load_window(database, "x", "main")
    with Session(database) as session:
        overlaps = overlaps_of(session, stored)[target.name]

    def moment(seconds: float) -> datetime:
        return t0 + timedelta(microseconds=round(seconds * 10**6))

    expected = []  # in the order they started
    for i, (a, b) in sorted(enumerate(spans), key=lambda pair: pair[1][0]):
        apart = min(moment(main_stop), moment(b)) - max(moment(main_start), moment(a))
        if (seconds := round(apart.total_seconds(), 3)) > 0:
            expected.append({"id": f"w{i}", "seconds": seconds})
    assert len(expected) == len(spans) - 1  # the first rounds to nothing
    assert overlaps.windows == expected


@pytest.mark.anyio
async def test_a_stop_computed_on_the_event_loop_equals_one_computed_in_a_thread(
    engines: tuple[Engine, Engine],
) -> None:
    """The store runs a stop's computation stepped on the event loop (a small stop on SQLite)
    or to its end in a thread: the same baselines, results with their overlaps, and rows."""
    database, _ = engines
    targets = [parse_target(f"127.0.0.1:{port}") for port in (9301, 9302, 9303)]
    names = [t.name for t in targets]
    for window_id in ("mine", "beside"):
        assert write_alone(database, add_window, Actor("default", "t"), window_id,
                           WindowCreate(targets=names), targets, 10, "r", 0)  # fmt: skip
    stored = load_window(database, "default", "mine")
    now = datetime.now(UTC)

    def reading(target: Target, drafts: int) -> TargetReading:
        counters = InstanceCounters(drafts, 3 * drafts, [drafts, drafts // 2, 0])
        return TargetReading(target, now, extract_spec_decode(vllm_payload([counters])))

    failed = Failure(FailureKind.CONNECT, "Connection refused")
    store_baseline(database, stored, [reading(targets[0], 4), reading(targets[1], 4),
                                      TargetReading(targets[2], now, failed)])  # fmt: skip
    chains = [Chain(reading(targets[0], 40)), Chain(TargetReading(targets[1], now, failed)),
              Chain(reading(targets[2], 9))]  # fmt: skip
    lanes = await asyncio.to_thread(run_to_end, prepare_close(database, stored, chains, now))
    here = await Store(database).compute(Cost(readings=1), prepare_close, stored, chains, now)
    assert here.closed == lanes.closed and here.read_up_to == lanes.read_up_to
    assert here.rows == lanes.rows
    first = here.closed.results[stored.targets[0].id]
    assert first is not None and first.data is not None and first.data.num_drafts == 36
    assert first.overlaps is not None and [w["id"] for w in first.overlaps.windows] == ["beside"]


def test_a_baseline_of_many_targets_gives_each_target_its_own_row(tmp_path: Path) -> None:
    """The snapshots of a window's targets go in together (one multi-row statement:
    `bench_statements`), each row its own target's."""
    url = f"sqlite:///{tmp_path / 'one.db'}"
    upgrade_database(url)
    database = open_database(url)
    targets = [parse_target(f"127.0.0.1:{9100 + i}") for i in range(5)]
    body = WindowCreate(targets=[t.name for t in targets])
    stored = write_alone(
        database, add_window, Actor("default", "t"), "w", body, targets, 10, "r", 0
    )
    assert stored is not None
    # Each target its own counters: a target id given to the wrong target would show.
    outcomes = [
        TargetReading(t, datetime.now(UTC), extract_spec_decode(
            vllm_payload([InstanceCounters(5 + i, 15, [3, 2, 1])])
        ))
        for i, t in enumerate(targets)
    ]  # fmt: skip
    store_baseline(database, stored, outcomes)
    befores = [t.before for t in read_view(database, "default", "w").targets]
    assert [before.num_drafts if before else None for before in befores] == [5, 6, 7, 8, 9]
    database.dispose()


def test_a_stops_look_for_new_samples_finds_its_own_newest_snapshot(postgres_url: str) -> None:
    """A stop looks, in its write, for a snapshot stored since it read its window's: the
    newest of its targets' snapshots, whatever other windows stored since (how many rows
    PostgreSQL reads for it: `bench_statements`)."""
    from specdec_collector.windows.closing import _latest_snapshot

    upgrade_database(postgres_url)
    database = open_database(postgres_url)
    actor = Actor(team="t", key="k")
    series = extract_spec_decode(vllm_payload([InstanceCounters(5, 15, [3, 2, 1])]))
    stored_ids = []
    for window_id, count in (("mine", 2), ("busy", 1)):
        body = WindowCreate(targets=[f"10.0.0.{n}:8000" for n in range(count)])
        stored = write_alone(
            database, add_window, actor, window_id, body, body.parsed_targets(), 10, "r", 30.0
        )
        assert stored is not None
        readings = [TargetReading(target, utcnow(), series) for target in body.parsed_targets()]
        write_alone(database, add_baseline, stored, readings)
        stored_ids.append([t.id for t in stored.targets])
    mine, busy = stored_ids
    samples = [TargetReading(parse_target("10.0.0.0:8000"), utcnow(), series)] * 3000
    ids = {"10.0.0.0:8000": busy[0]}
    write_alone(
        database, lambda tx: store_snapshots(tx.session, ids, SnapshotPhase.SAMPLE, samples)
    )
    with Session(database) as session:
        newest = session.execute(
            select(func.max(Snapshot.id)).where(col(Snapshot.target_id).in_(mine))
        ).scalar_one()
        assert _latest_snapshot(session, mine) == newest
    database.dispose()


def test_a_start_on_postgresql_returns_its_targets_ids_in_their_order(postgres_url: str) -> None:
    """A start's one insert of the window and its targets (`bench_statements` counts its
    statements) returns the targets' ids in the targets' order, as they read back."""
    upgrade_database(postgres_url)
    database = open_database(postgres_url)
    targets = [parse_target(f"127.0.0.1:{9300 + i}") for i in (3, 1, 2, 0)]
    try:
        body = WindowCreate(targets=[t.name for t in targets])
        stored = write_alone(
            database, add_window, Actor("default", "t"), "w", body, targets, 10, "r", 0
        )
        assert stored is not None
        reloaded = load_window(database, "default", "w")
    finally:
        database.dispose()
    assert [(t.id, t.name) for t in stored.targets] == [(t.id, t.name) for t in reloaded.targets]
    assert [t.name for t in stored.targets] == [t.name for t in targets]


def test_reads_on_postgresql_run_outside_a_transaction_and_writes_inside_one(
    postgres_url: str,
) -> None:
    """A read sends no BEGIN (and so no ROLLBACK after it): after each of its statements the
    server holds no transaction open. A write's statements run in one. The connection a read
    used serves a write next with its transaction as before."""
    upgrade_database(postgres_url)
    database = open_database(postgres_url, pool_size=1)
    target = parse_target("127.0.0.1:9100")
    in_transaction: list[tuple[str, bool]] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        status = conn.connection.dbapi_connection.info.transaction_status
        in_transaction.append((statement.split()[0], status != psycopg.pq.TransactionStatus.IDLE))

    event.listen(database, "after_cursor_execute", record)
    try:
        body = WindowCreate(targets=[target.name])
        write_alone(database, add_window, Actor("default", "t"), "w", body, [target], 10, "r", 0)
        writes, in_transaction[:] = list(in_transaction), []
        load_window(database, "default", "w")
        read_view(database, "default", "w")
        assert any_db_key(database) is False
        reads, in_transaction[:] = list(in_transaction), []
        write_alone(database, add_window, Actor("default", "t"), "w2", body, [target], 10, "r", 0)
        writes_after = list(in_transaction)
    finally:
        event.remove(database, "after_cursor_execute", record)
        database.dispose()
    assert len(reads) >= 4 and not any(inside for _, inside in reads), reads
    for statements in (writes, writes_after):
        assert any(verb in ("INSERT", "WITH") for verb, _ in statements)  # WITH: an insert's
        assert all(inside for _, inside in statements), statements
