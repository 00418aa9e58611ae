"""The schema comes from the migrations, and the migrations agree with the models."""

import hashlib
import os
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import JSON, TableClause, column, inspect, select, table, text

from specdec_collector.store.db import open_database
from specdec_collector.store.migrate import HEAD_REVISION, alembic_config, upgrade_database
from specdec_collector.store.tables import metadata


def test_upgrade_of_an_empty_database_matches_the_models(database_url: str) -> None:
    url = database_url
    upgrade_database(url)
    database = open_database(url)
    try:
        with database.connect() as connection:
            diff = compare_metadata(
                MigrationContext.configure(connection, opts={"compare_type": True}), metadata
            )
            assert diff == []
            assert set(inspect(connection).get_table_names()) == {
                "alembic_version", "window", "window_target", "endpoint_series", "snapshot", "api_key",
                "heartbeat", "catalogue_purge", "key_event",
            }  # fmt: skip
    finally:
        database.dispose()


def test_upgrade_is_idempotent_and_creates_the_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nested' / 'dir' / 'db.sqlite'}"
    upgrade_database(url)
    upgrade_database(url)
    database = open_database(url)
    try:
        with database.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
            head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
            assert version == head
    finally:
        database.dispose()


def test_the_head_the_service_knows_is_alembics(tmp_path: Path) -> None:
    """A migration added without moving `HEAD_REVISION` would never run on a database at the
    old head."""
    config = alembic_config(f"sqlite:///{tmp_path / 'db'}")
    assert ScriptDirectory.from_config(config).get_current_head() == HEAD_REVISION


def test_a_database_at_head_is_told_without_alembic_and_one_behind_is_migrated(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    command.upgrade(alembic_config(database_url), "0017")
    upgrade_database(database_url)  # one behind: migrated
    database = open_database(database_url)
    try:
        with database.connect() as connection:
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
        assert version == HEAD_REVISION
    finally:
        database.dispose()

    def no_alembic(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a database at head was migrated again")

    monkeypatch.setattr(command, "upgrade", no_alembic)
    upgrade_database(database_url)


def test_windows_of_0001_keep_their_data_through_0002(database_url: str) -> None:
    """SQLite rebuilds the window table in batch mode; the rows must come through."""
    url = database_url
    command.upgrade(alembic_config(url), "0001")
    database = open_database(url)
    try:
        with database.begin() as connection:
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
        with database.connect() as connection:
            row = connection.execute(text('SELECT window_id, team, started_by FROM "window"')).one()
        assert tuple(row) == ("run-1", "default", "anonymous")
    finally:
        database.dispose()


def _window_tables() -> tuple[TableClause, TableClause]:
    """The columns of `window` and `window_target` that every revision has, for old rows."""
    window = table("window", column("id"), column("window_id"), column("state"), column("labels"),
                   column("started_at"), column("team"), column("started_by"))  # fmt: skip
    target = table("window_target", column("id"), column("window_pk"), column("ordinal"),
                   column("target"), column("url"), column("result", JSON()))  # fmt: skip
    return window, target


def test_0005_fills_the_summary_columns_from_stored_results(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "0004")
    database = open_database(database_url)
    try:
        window, target = _window_tables()
        result = {
            "status": "ok",
            "data": {"acceptance_rate": 61.5, "acceptance_length": 2.8, "num_drafts": 42},
        }
        with database.begin() as connection:
            connection.execute(window.insert().values(id=1, window_id="w", state="closed", labels="{}",
                                                      started_at=datetime(2026, 11, 30, tzinfo=UTC),
                                                      team="default", started_by="anonymous"))  # fmt: skip
            connection.execute(target.insert().values(id=1, window_pk=1, ordinal=0, target="h:1",
                                                      url="http://h:1/metrics", result=result))  # fmt: skip
        upgrade_database(database_url)
        with database.connect() as connection:
            row = connection.execute(
                text(
                    "SELECT status, acceptance_rate, acceptance_length, num_drafts FROM window_target"
                )
            ).one()
        assert tuple(row) == ("ok", 61.5, 2.8, 42)
    finally:
        database.dispose()


def test_0013_copies_each_stored_results_restarts_into_its_column(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "0012")
    database = open_database(database_url)
    try:
        window, target = _window_tables()
        results = [{"status": "ok", "restarts": 2}, {"status": "na", "error": "x"}, None]
        with database.begin() as connection:
            connection.execute(window.insert().values(id=1, window_id="w", state="closed", labels="{}",
                                                      started_at=datetime(2026, 12, 1, tzinfo=UTC),
                                                      team="default", started_by="anonymous"))  # fmt: skip
            for ordinal, result in enumerate(results):
                connection.execute(target.insert().values(
                    id=ordinal + 1, window_pk=1, ordinal=ordinal, target=f"h:{ordinal + 1}",
                    url=f"http://h:{ordinal + 1}/metrics", result=result,
                ))  # fmt: skip
        upgrade_database(database_url)
        with database.connect() as connection:
            rows = connection.execute(text("SELECT restarts FROM window_target ORDER BY id")).all()
        assert [row[0] for row in rows] == [2, None, None]
    finally:
        database.dispose()


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
    database = open_database(database_url)
    try:
        window = table("window", column("id"), column("window_id"), column("state"), column("labels"),
                       column("started_at"), column("team"), column("started_by"))  # fmt: skip
        target = table("window_target", column("id"), column("window_pk"), column("ordinal"),
                       column("target"), column("url"), column("result", JSON()),
                       column("acceptance_rate"), column("acceptance_length"))  # fmt: skip
        with database.begin() as connection:
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
        with database.connect() as connection:
            ok, na = connection.execute(read.order_by(target.c.id)).all()
    finally:
        database.dispose()
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
    database = open_database(database_url)
    window = table("window", column("id"), column("window_id"), column("state"), column("labels"),
                   column("started_at"), column("team"), column("started_by"))  # fmt: skip
    target = table("window_target", column("id"), column("window_pk"), column("ordinal"),
                   column("target"), column("url"), column("status"))  # fmt: skip
    series = table("target_series", column("id"), column("target_id"), column("family"),
                   column("labels"))  # fmt: skip
    try:
        with database.begin() as connection:
            connection.execute(window.insert().values(id=1, window_id="w", state="closed", labels="{}",
                                                      started_at=datetime(2026, 11, 30, tzinfo=UTC),
                                                      team="default", started_by="anonymous"))  # fmt: skip
            for row_id, status in ((1, "ok"), (2, "na")):
                connection.execute(target.insert().values(id=row_id, window_pk=1, ordinal=row_id,
                                                          target=f"h:{row_id}", url="u", status=status))  # fmt: skip
            connection.execute(series.insert().values(id=7, target_id=1, family="num_drafts",
                                                      labels=labels))  # fmt: skip
        command.upgrade(alembic_config(database_url), "0010")
        with database.connect() as connection:
            stored = connection.execute(
                text("SELECT id, family, labels, labels_digest FROM target_series")
            ).all()
            summaries = connection.execute(
                text("SELECT id, result_engine, exact FROM window_target ORDER BY id")
            ).all()
    finally:
        database.dispose()
    assert [tuple(row) for row in stored] == [
        (7, "num_drafts", labels, hashlib.sha256(labels.encode()).hexdigest())
    ]
    assert [(row[0], row[1], None if row[2] is None else bool(row[2])) for row in summaries] == [
        (1, "vllm", True), (2, None, None)
    ]  # fmt: skip


def test_0011_keys_the_catalogue_by_endpoint_and_every_window_reads_as_before(
    database_url: str,
) -> None:
    """Three windows, two of them on one endpoint: after 0011 every stored snapshot reads the
    same series and values through the shared catalogue, and the downgrade gives them back."""
    command.upgrade(alembic_config(database_url), "0010")
    database = open_database(database_url)
    window = table("window", column("id"), column("window_id"), column("state"), column("labels"),
                   column("started_at"), column("team"), column("started_by"))  # fmt: skip
    target = table("window_target", column("id"), column("window_pk"), column("ordinal"),
                   column("target"), column("url"))  # fmt: skip
    series = table("target_series", column("id"), column("target_id"), column("family"),
                   column("labels"), column("labels_digest"))  # fmt: skip
    snapshot = table("snapshot", column("id"), column("target_id"), column("phase"),
                     column("taken_at"), column("error"), column("counters", JSON))  # fmt: skip
    engine0 = '[["engine","0"]]'
    engine1 = '[["engine","1"]]'
    position0 = '[["engine","0"],["position","0"]]'
    # (series id, target id, family, labels): targets 1 and 3 read one endpoint, in two windows.
    old_series = [
        (10, 1, "num_drafts", engine0), (11, 1, "num_draft_tokens", engine0),
        (12, 1, "accepted_per_position", position0),
        (20, 3, "num_drafts", engine0), (21, 3, "num_drafts", engine1),
        (30, 4, "sglang:verify_calls", "[]"),
    ]  # fmt: skip
    old_snapshots: list[tuple[int, int, str, str | None, list[list[float | None]] | None]] = [
        (1, 1, "before", None, [[10, 5.0, 1.5], [11, 15.0, None], [12, 3.0, None]]),
        (2, 1, "after", None, [[10, 9.0, 1.5], [11, 27.0, None], [12, 8.0, None]]),
        (3, 3, "before", None, [[20, 7.0, None], [21, 1.0, None]]),
        (4, 4, "before", None, [[30, 2.0, None]]),
        (5, 4, "after", "connection refused", None),
    ]
    family_labels = {row[0]: (row[2], row[3]) for row in old_series}
    # What every snapshot reads, by (family, labels): what must come through both ways.
    expected = {
        snapshot_id: None if counters is None else
        sorted((*family_labels[int(c[0] or 0)], c[1], c[2]) for c in counters)
        for snapshot_id, _, _, _, counters in old_snapshots
    }  # fmt: skip
    urls = {1: "http://a:1/metrics", 2: "http://b:2/metrics", 3: "http://a:1/metrics",
            4: "http://c:3/metrics"}  # fmt: skip
    moment = datetime(2026, 11, 30, 10, tzinfo=UTC)

    def readings(connection: Any, catalogue_sql: str) -> dict[int, Any]:
        catalogue = {row[0]: (row[1], row[2], row[3])
                     for row in connection.execute(text(catalogue_sql))}  # fmt: skip
        found: dict[int, Any] = {}
        for snapshot_id, target_id, counters in connection.execute(
            select(snapshot.c.id, snapshot.c.target_id, snapshot.c.counters)
        ):
            if counters is None:
                found[snapshot_id] = None
                continue
            rows = []
            for series_id, value, created in counters:
                owner, family, labels = catalogue[int(series_id)]
                assert owner in (target_id, urls[target_id])  # the snapshot's own target/endpoint
                rows.append((family, labels, value, created))
            found[snapshot_id] = sorted(rows)
        return found

    try:
        with database.begin() as connection:
            for window_pk in (1, 2, 3):
                connection.execute(window.insert().values(
                    id=window_pk, window_id=f"w{window_pk}", state="closed", labels="{}",
                    started_at=moment, team="default", started_by="anonymous"))  # fmt: skip
            for target_id, window_pk in ((1, 1), (2, 1), (3, 2), (4, 3)):
                connection.execute(target.insert().values(
                    id=target_id, window_pk=window_pk, ordinal=target_id,
                    target=f"h:{target_id}", url=urls[target_id]))  # fmt: skip
            for series_id, target_id, family, labels in old_series:
                connection.execute(series.insert().values(
                    id=series_id, target_id=target_id, family=family, labels=labels,
                    labels_digest=hashlib.sha256(labels.encode()).hexdigest()))  # fmt: skip
            for snapshot_id, target_id, phase, error, counters in old_snapshots:
                connection.execute(snapshot.insert().values(
                    id=snapshot_id, target_id=target_id, phase=phase, taken_at=moment,
                    error=error, counters=counters))  # fmt: skip
        upgrade_database(database_url)
        with database.connect() as connection:
            after_upgrade = readings(
                connection, "SELECT id, endpoint, family, labels FROM endpoint_series"
            )
            endpoints = connection.execute(
                text("SELECT endpoint, family, labels FROM endpoint_series")
            ).all()
            errors = connection.execute(text("SELECT id, error FROM snapshot ORDER BY id")).all()
        command.downgrade(alembic_config(database_url), "0010")
        with database.connect() as connection:
            after_downgrade = readings(
                connection, "SELECT id, target_id, family, labels FROM target_series"
            )
    finally:
        database.dispose()
    assert after_upgrade == expected
    # Series 20 is series 10 of the same endpoint (one row); 21 differs by its labels.
    assert sorted(tuple(row) for row in endpoints) == sorted([
        ("http://a:1/metrics", "num_drafts", engine0),
        ("http://a:1/metrics", "num_draft_tokens", engine0),
        ("http://a:1/metrics", "accepted_per_position", position0),
        ("http://a:1/metrics", "num_drafts", engine1),
        ("http://c:3/metrics", "sglang:verify_calls", "[]"),
    ])  # fmt: skip
    assert [tuple(row) for row in errors] == [(i, e) for i, _, _, e, _ in old_snapshots]
    assert after_downgrade == expected


def test_0019_shares_each_series_between_endpoints_and_every_window_reads_as_before(
    database_url: str,
) -> None:
    """Two endpoints showed the same series, each in rows of its own: after 0019 they share
    the oldest row, every snapshot reads the same series and values, and the downgrade gives
    each endpoint its own rows again."""
    command.upgrade(alembic_config(database_url), "0018")
    database = open_database(database_url)
    window, target = _window_tables()
    series = table("endpoint_series", column("id"), column("endpoint"), column("family"),
                   column("labels"), column("labels_digest"))  # fmt: skip
    snapshot = table("snapshot", column("id"), column("target_id"), column("phase"),
                     column("taken_at"), column("counters", JSON))  # fmt: skip
    engine0, engine1 = '[["engine","0"]]', '[["engine","1"]]'
    a, b = "http://a:1/metrics", "http://b:2/metrics"
    # (id, endpoint, family, labels): b shows a's two series, and one of its own.
    old_series = [(10, a, "num_drafts", engine0), (11, a, "num_drafts", engine1),
                  (20, b, "num_drafts", engine0), (21, b, "num_drafts", engine1),
                  (22, b, "num_draft_tokens", engine0)]  # fmt: skip
    old_snapshots: list[tuple[int, int, list[list[float | None]]]] = [
                     (1, 1, [[10, 5.0, 1.5], [11, 6.0, None]]),
                     (2, 2, [[20, 7.0, None], [21, 8.0, None], [22, 21.0, None]]),
                     (3, 2, [[20, 9.0, None]])]  # fmt: skip
    family_labels = {row[0]: (row[2], row[3]) for row in old_series}
    expected = {snapshot_id: sorted((*family_labels[int(c[0] or 0)], c[1], c[2]) for c in counters)
                for snapshot_id, _, counters in old_snapshots}  # fmt: skip
    moment = datetime(2026, 12, 6, tzinfo=UTC)

    def stored() -> tuple[list[tuple[Any, ...]], dict[int, Any], bool]:
        """The catalogue's rows, what each snapshot reads, and whether each snapshot names
        only rows of its own endpoint."""
        with database.connect() as connection:
            rows = {row[0]: tuple(row[1:]) for row in connection.execute(
                select(series.c.id, series.c.endpoint, series.c.family, series.c.labels))}  # fmt: skip
            readings, own = {}, True
            for snapshot_id, target_id, counters in connection.execute(
                select(snapshot.c.id, snapshot.c.target_id, snapshot.c.counters)
            ):
                readings[snapshot_id] = sorted((*rows[int(c[0])][1:], c[1], c[2]) for c in counters)
                own &= {rows[int(c[0])][0] for c in counters} == {(a, b)[target_id - 1]}
        return sorted(rows.values()), readings, own

    try:
        with database.begin() as connection:
            connection.execute(window.insert().values(
                id=1, window_id="w", state="closed", labels="{}", started_at=moment,
                team="default", started_by="anonymous"))  # fmt: skip
            for target_id, url in ((1, a), (2, b)):
                connection.execute(target.insert().values(
                    id=target_id, window_pk=1, ordinal=target_id, target=f"h:{target_id}",
                    url=url))  # fmt: skip
            for series_id, endpoint, family, labels in old_series:
                connection.execute(series.insert().values(
                    id=series_id, endpoint=endpoint, family=family, labels=labels,
                    labels_digest=hashlib.sha256(labels.encode()).hexdigest()))  # fmt: skip
            for snapshot_id, target_id, counters in old_snapshots:
                connection.execute(snapshot.insert().values(
                    id=snapshot_id, target_id=target_id, phase="before", taken_at=moment,
                    counters=counters))  # fmt: skip
        upgrade_database(database_url)
        shared, after_upgrade, _ = stored()
        command.downgrade(alembic_config(database_url), "0018")
        rows, after_downgrade, own = stored()
    finally:
        database.dispose()
    assert shared == sorted([(a, "num_drafts", engine0), (a, "num_drafts", engine1),
                             (b, "num_draft_tokens", engine0)])  # fmt: skip
    assert after_upgrade == expected
    assert after_downgrade == expected
    assert own and len(rows) == len(old_series)


def test_sqlite_writers_of_every_process_take_turns_on_a_file_lock(tmp_path: Path) -> None:
    """`--workers N` runs N processes on one SQLite file: a write holds the lock file beside
    it, so another process's writer waits there (woken at once) rather than in SQLite's
    sleeping busy handler."""
    import fcntl

    from specdec_collector.store.db import write_session

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade_database(url)
    database = open_database(url)
    lock_file = tmp_path / "db.sqlite.writer-lock"
    try:
        # Another open file stands for another process.
        with (
            write_session(database),
            lock_file.open("a") as other,
            pytest.raises(BlockingIOError),
        ):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with lock_file.open("a") as other:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the write is done
        for _ in range(3):
            with write_session(database):
                pass
        # Opened once per engine, not for every write.
        opened = [fd for fd in Path("/proc/self/fd").iterdir() if _target(fd) == str(lock_file)]
        assert len(opened) == 1
    finally:
        database.dispose()


def _target(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:  # closed meanwhile
        return ""


def test_0014_keeps_each_stored_failures_kind_as_its_text_says(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "0013")
    database = open_database(database_url)
    errors = [
        "Metrics endpoint returned HTTP 503",
        "Failed to fetch metrics from http://h:1/metrics: timed out after 5 s",
        "Failed to fetch metrics from http://h:1/metrics: ConnectError: All connection attempts failed",
        "Window force-closed by an admin: no final scrape was taken",
        "Failed to query Prometheus at http://p:9090: timed out after 10 s",
        "something no release of the collector wrote",
        None,
    ]
    try:
        window, target = _window_tables()
        snapshot = table("snapshot", column("id"), column("target_id"), column("phase"),
                         column("taken_at"), column("error"), column("counters", JSON()))  # fmt: skip
        with database.begin() as connection:
            connection.execute(window.insert().values(id=1, window_id="w", state="closed", labels="{}",
                                                      started_at=datetime(2026, 12, 1, tzinfo=UTC),
                                                      team="default", started_by="anonymous"))  # fmt: skip
            connection.execute(target.insert().values(id=1, window_pk=1, ordinal=0, target="h:1",
                                                      url="http://h:1/metrics"))  # fmt: skip
            for number, error in enumerate(errors, start=1):
                connection.execute(snapshot.insert().values(
                    id=number, target_id=1, phase="sample", taken_at=datetime(2026, 12, 1, tzinfo=UTC),
                    error=error, counters=None if error else [[1, 2, None]],
                ))  # fmt: skip
        upgrade_database(database_url)
        with database.connect() as connection:
            rows = connection.execute(text("SELECT error_kind FROM snapshot ORDER BY id")).all()
        assert [row[0] for row in rows] == [
            "http_status",
            "timeout",
            "connect",
            "force_closed",
            "prometheus",
            "unrecorded",
            None,
        ]
    finally:
        database.dispose()


def test_a_downgrade_keeps_every_target_and_snapshot(database_url: str) -> None:
    """Downgrades that drop `window_target` columns do it in place: a SQLite batch copy of the
    table would delete its snapshots with the old table (ON DELETE CASCADE)."""
    upgrade_database(database_url)
    database = open_database(database_url)
    window, target = _window_tables()
    snapshot = table("snapshot", column("id"), column("target_id"), column("phase"),
                     column("taken_at"), column("error"))  # fmt: skip
    moment = datetime(2026, 12, 2, 8, tzinfo=UTC)
    try:
        with database.begin() as connection:
            connection.execute(window.insert().values(
                id=1, window_id="w", state="closed", labels="{}", started_at=moment,
                team="default", started_by="anonymous"))  # fmt: skip
            connection.execute(target.insert().values(
                id=1, window_pk=1, ordinal=0, target="h:1", url="http://h:1/metrics"))  # fmt: skip
            for snapshot_id, phase in ((1, "before"), (2, "after")):
                connection.execute(snapshot.insert().values(
                    id=snapshot_id, target_id=1, phase=phase, taken_at=moment,
                    error="connection refused"))  # fmt: skip
        command.downgrade(alembic_config(database_url), "0004")
        with database.connect() as connection:
            targets = connection.execute(text("SELECT count(*) FROM window_target")).scalar()
            snapshots = connection.execute(text("SELECT count(*) FROM snapshot")).scalar()
    finally:
        database.dispose()
    assert (targets, snapshots) == (1, 2)
