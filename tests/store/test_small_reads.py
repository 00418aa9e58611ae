"""Small reads on the event loop on SQLite and on a PostgreSQL near, else in a thread
(`store.small_reads`)."""

import asyncio
import signal
import subprocess
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from specdec_collector.service.keys import create_key
from specdec_collector.store import small_reads
from specdec_collector.store.db import open_database, read_connection
from specdec_collector.store.migrate import upgrade_database
from specdec_collector.store.small_reads import SmallReads
from tests.conftest import SessionServices
from tests.support import clients
from tests.support.collector import serve_collector
from tests.support.delay_proxy import postgres_forwarded
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import drafts_payload
from tests.support.waiting import patience


def _on_the_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_a_windows_lookups_and_a_stored_keys_run_on_the_event_loop(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop's window lookup, a read's check that its window is still open and a stored
    key's lookup (on every call with a key) run on the event loop, not in the request pool:
    under load each hop there waited 150-270 ms for the interpreter's lock. On PostgreSQL
    too, the suite's being on this host (near: its probes are allowed more here, as the
    suite's load on the machine may slow them; `test_a_postgresql_farther_away_is_read_in_threads`
    holds the threshold)."""
    monkeypatch.setattr(small_reads, "NEAR_S", 0.05)
    upgrade_database(database_url)
    setup = open_database(database_url)
    _, key = create_key(setup, "team-r", "write", "test")
    setup.dispose()
    ran: dict[str, set[bool]] = {"key": set(), "state": set(), "window": set()}

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        text = " ".join(statement.replace('"', "").split())
        if "FROM api_key WHERE api_key.key_hash" in text:
            ran["key"].add(_on_the_loop())
        elif text.startswith("SELECT window.state FROM window"):
            ran["state"].add(_on_the_loop())
        elif text.startswith("SELECT window.id,") and "WHERE window.team" in text:
            ran["window"].add(_on_the_loop())

    headers = {"Authorization": f"Bearer {key}"}
    with (
        serve_metrics(body=drafts_payload(100)) as server,
        serve_collector(database_url) as url,
        clients.client(base_url=url, headers=headers, timeout=30) as api,
    ):
        event.listen(Engine, "before_cursor_execute", record)
        try:
            assert (
                api.post("/windows/w/start", json={"targets": [server.target]}).status_code == 201
            )
            assert api.get("/windows/w").json()["state"] == "open"
            stopped = api.post("/windows/w/stop")
        finally:
            event.remove(Engine, "before_cursor_execute", record)
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["targets"][0]["result"]["status"] == "na"  # the counters never moved
    assert ran == {"key": {True}, "state": {True}, "window": {True}}


@pytest.mark.anyio
async def test_a_read_that_fails_on_the_loop_runs_again_in_a_thread_and_says_why(
    tmp_path: Any,
) -> None:
    """A read that fails on the loop's connection (here: no such table) runs again in the
    request pool, whose error is the one raised."""
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    database = open_database(url)
    reads = SmallReads(database)
    where: list[bool] = []

    def count(engine: Engine) -> int:
        where.append(_on_the_loop())
        with engine.connect() as connection:
            return int(connection.exec_driver_sql("SELECT count(*) FROM missing").scalar_one())

    try:
        with pytest.raises(Exception, match="no such table: missing"):
            await reads(count)
    finally:
        reads.close()
        database.dispose()
    assert where == [True, False]


def _one(where: list[bool]) -> Any:
    """A small read that notes whether it ran on the event loop."""

    def read(engine: Engine) -> int:
        where.append(_on_the_loop())
        with read_connection(engine) as connection:
            return int(connection.exec_driver_sql("SELECT 42").scalar_one())

    return read


@asynccontextmanager
async def _reads_through_forwarder(
    services: SessionServices, folder: Path, delay_s: float
) -> AsyncIterator[tuple[SmallReads, Engine, "subprocess.Popen[bytes]"]]:
    """`SmallReads`, prepared, on a fresh PostgreSQL schema reached through a forwarder that
    delays `delay_s` each way; the threads' engine, and the forwarder's process."""
    with (
        services.fresh_database("postgresql", folder) as url,
        postgres_forwarded(url, delay_s) as (forwarded_url, forwarder),
    ):
        database = open_database(forwarded_url)
        reads = SmallReads(database)
        try:
            await reads.prepare()
            yield reads, database, forwarder
        finally:
            reads.close()
            database.dispose()


@pytest.mark.anyio
async def test_a_postgresql_farther_away_is_read_in_threads(
    services: SessionServices, tmp_path: Path
) -> None:
    """A PostgreSQL 6 ms away (a forwarder in front of the suite's delays 3 ms each way) is
    found far by the probes of the loop's connection, and its reads run in threads: on the
    loop, each would hold up every other call for its round trip."""
    where: list[bool] = []
    async with _reads_through_forwarder(services, tmp_path, 0.003) as (reads, _, _):
        assert [await reads(_one(where)) for _ in range(3)] == [42, 42, 42]
    assert where == [False, False, False]
    assert reads.near is not None and reads.near.round_trip_s is not None
    assert reads.near.round_trip_s >= 0.006 > small_reads.NEAR_S


@pytest.mark.anyio
async def test_a_read_on_the_loop_from_a_postgresql_that_hangs_is_cut_off_and_runs_in_a_thread(
    services: SessionServices, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that stops answering mid-read (here: the forwarder in front of it stopped)
    holds the event loop for DEADLINE_S at most: the watchdog shuts the read's socket down,
    and the read runs again in a thread, where it waits for the server (let go after a
    while); the reads after it run in threads too."""
    monkeypatch.setattr(small_reads, "NEAR_S", 0.05)  # the forwarder's own hop, loaded
    monkeypatch.setattr(small_reads, "DEADLINE_S", 0.2)
    where: list[bool] = []
    async with _reads_through_forwarder(services, tmp_path, 0) as (reads, database, forwarder):
        assert await reads(_one(where)) == 42 and where == [True]
        # The threads' pool holds a connection: the read in a thread waits for the server,
        # not for a connection to open (which has a timeout of its own).
        with read_connection(database) as connection:
            connection.exec_driver_sql("SELECT 1")
        forwarder.send_signal(signal.SIGSTOP)
        resume = threading.Timer(patience(2), forwarder.send_signal, [signal.SIGCONT])
        resume.start()
        try:
            assert await reads(_one(where)) == 42
        finally:
            resume.join()
        assert await reads(_one(where)) == 42
    assert where == [True, True, False, False]
    assert reads.near is not None and reads.near.watchdog.cut_off == 1
