"""Small reads on the event loop on SQLite, in a thread on PostgreSQL (`store.small_reads`)."""

import asyncio
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from specdec_collector.service.keys import create_key
from specdec_collector.store.db import open_database
from specdec_collector.store.migrate import upgrade_database
from specdec_collector.store.small_reads import SmallReads
from tests.support import clients
from tests.support.collector import serve_collector
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import drafts_payload


def _on_the_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_a_windows_lookups_and_a_stored_keys_run_on_the_event_loop_on_sqlite_only(
    database_url: str,
) -> None:
    """A stop's window lookup, a read's check that its window is still open and a stored
    key's lookup (on every call with a key) run on the event loop on SQLite, not in the
    request pool: under load each hop there waited 150-270 ms for the interpreter's lock. On
    PostgreSQL, whose reads are round trips, they run in threads."""
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
    on_sqlite = database_url.startswith("sqlite")
    assert ran == {"key": {on_sqlite}, "state": {on_sqlite}, "window": {on_sqlite}}


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
