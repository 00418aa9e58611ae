"""Several replicas on one database, and a database that goes away and comes back."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url, text

from specdec_collector.service.keys import create_key
from specdec_collector.store.db import CHECK_AFTER_IDLE_S, open_database
from tests.support import clients
from tests.support.collector import CollectorProcess, run_collector, serve_collector
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import drafts_payload
from tests.support.tcp_proxy import TcpProxy, tcp_proxy
from tests.support.waiting import wait_for

MIGRATE = "import sys; from specdec_collector.store.migrate import upgrade_database; upgrade_database(sys.argv[1])"


@pytest.mark.slow
def test_replicas_booting_together_migrate_once(database_url: str) -> None:
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", MIGRATE, database_url], stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    errors = [process.communicate(timeout=120)[1] for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0, 0], errors
    database = open_database(database_url)
    with database.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
    database.dispose()


@contextmanager
def _replicas_a_and_b(
    database_url: str, folder: Path
) -> Iterator[tuple[CollectorProcess, CollectorProcess]]:
    """Two replicas, `a` and `b`, on one database, each logging into a folder of its own."""
    (folder / "a").mkdir()
    (folder / "b").mkdir()
    with (
        run_collector(database_url, folder / "a", SPECDEC_REPLICA_ID="a") as a,
        run_collector(database_url, folder / "b", SPECDEC_REPLICA_ID="b") as b,
    ):
        yield a, b


@pytest.mark.slow
def test_any_replica_answers_any_call(database_url: str, tmp_path: Path) -> None:
    with (
        _replicas_a_and_b(database_url, tmp_path) as (a, b),
        serve_metrics(body=drafts_payload(100)) as server,
    ):
        body = {"targets": [server.target]}

        async def race() -> list[int]:
            async with clients.async_client(timeout=30) as client:
                answers = await asyncio.gather(
                    *(
                        client.post(f"{(a, b)[i % 2].base_url}/windows/race/start", json=body)
                        for i in range(20)
                    )
                )
            return sorted(answer.status_code for answer in answers)

        assert asyncio.run(race()) == [200] * 19 + [201]
        assert server.count() == 1
        server.replace(drafts_payload(400))
        stopped = clients.post(f"{b.base_url}/windows/race/stop", timeout=30).json()
        from_a = clients.get(
            f"{a.base_url}/windows/race/results/{server.target}", timeout=30
        ).json()
    assert stopped["targets"][0]["result"]["data"]["num_drafts"] == 300
    assert from_a == stopped["targets"][0]["result"]


def _sample_times(base_url: str, window_id: str) -> list[tuple[datetime, str]]:
    points = clients.get(f"{base_url}/windows/{window_id}/samples", timeout=30).json()["series"][0][
        "points"
    ]
    return [(datetime.fromisoformat(p["taken_at"]), p["phase"]) for p in points]


@pytest.mark.slow
def test_one_replica_samples_each_window_and_another_takes_over(
    postgres_url: str, tmp_path: Path
) -> None:
    """Two replicas as real processes on one PostgreSQL; the owner of the windows is killed."""
    interval = 0.5
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = CollectorProcess(
        postgres_url, env={"SPECDEC_REPLICA_ID": "a"}, log_path=tmp_path / "a" / "log"
    )
    b = CollectorProcess(
        postgres_url, env={"SPECDEC_REPLICA_ID": "b"}, log_path=tmp_path / "b" / "log"
    )
    a.start()
    b.start()
    try:
        with serve_metrics(body=drafts_payload(100)) as server:
            windows = [f"w{i}" for i in range(3)]
            for window_id in windows:
                started = clients.post(
                    f"{a.base_url}/windows/{window_id}/start",
                    json={"targets": [server.target], "sample_interval_s": interval},
                    timeout=30,
                )
                assert started.status_code == 201
            database = open_database(postgres_url)

            def owners() -> list[str]:
                with database.connect() as connection:
                    query = text('SELECT DISTINCT sampler_owner FROM "window"')
                    return list(connection.execute(query).scalars().all())

            def samples_since(moment: float, count: int) -> bool | None:
                """Whether every window has `count` samples taken after `moment`."""
                for window_id in windows:
                    times = [t.timestamp() for t, phase in _sample_times(b.base_url, window_id)
                             if phase == "sample" and t.timestamp() > moment]  # fmt: skip
                    if len(times) < count:
                        return None
                return True

            # Three samples of each window: time enough for b to take over if it wrongly would.
            wait_for(lambda: samples_since(0, 3), "three samples of each window")
            assert owners() == ["a"]  # the starting replica holds them; b only watches the leases
            assert "samples window" not in b.stderr_text  # nor did b ever sample them
            a.kill()
            killed_at = time.time()
            _paused(b, 1.5)  # a loaded machine: b gets no CPU for a while, then takes over
            wait_for(lambda: samples_since(killed_at, 2), "b's samples of each window")
            assert owners() == ["b"]
            database.dispose()
            results = [
                clients.post(f"{b.base_url}/windows/{w}/stop", timeout=30).json() for w in windows
            ]
            series = {w: _sample_times(b.base_url, w) for w in windows}
    finally:
        a.stop()
        b.stop()
    assert b.stderr_text.count("samples window") == len(windows)  # each taken over once
    for window_id, points in series.items():
        samples = [t.timestamp() for t, phase in points if phase == "sample"]
        assert len(samples) == len(set(samples)), window_id  # no instant stored twice
        assert [t for t in samples if t < killed_at] and [t for t in samples if t > killed_at]
    for result in results:
        assert result["targets"][0]["result"]["samples"]["failed"] == 0


@pytest.mark.slow
def test_a_scrape_longer_than_the_lease_keeps_it(postgres_url: str, tmp_path: Path) -> None:
    """A target that answers after two intervals: its owner renews the lease while the scrape
    runs, so the other replica, scanning, never takes the window over and every run stores."""
    interval = 0.5
    with (
        _replicas_a_and_b(postgres_url, tmp_path) as (a, b),
        serve_metrics(body=drafts_payload(100)) as server,
    ):
        started = clients.post(
            f"{a.base_url}/windows/slow/start",
            json={"targets": [server.target], "sample_interval_s": interval},
            timeout=30,
        )
        assert started.status_code == 201
        server.delay_s = 2 * interval  # past the lease's 1.5 intervals
        begun = server.count()
        wait_for(lambda: server.count() >= begun + 4 or None, "four slow scrapes", timeout_s=30)
        stopped = clients.post(f"{b.base_url}/windows/slow/stop", timeout=30).json()
        points = _sample_times(b.base_url, "slow")
    assert "samples window" not in b.stderr_text  # b never took it over
    assert "samples window" not in a.stderr_text  # nor did a have to take it back
    samples = [t for t, phase in points if phase == "sample"]
    assert len(samples) >= 3, points
    assert stopped["targets"][0]["result"]["samples"]["failed"] == 0


def _paused(collector: CollectorProcess, seconds: float) -> None:
    """Hold `collector` off the CPU for `seconds`, as a machine busy with others does."""
    for pid in collector.pids():
        os.kill(pid, signal.SIGSTOP)
    time.sleep(seconds)
    for pid in collector.pids():
        os.kill(pid, signal.SIGCONT)


@contextmanager
def _database_behind_a_proxy(postgres_url: str) -> Iterator[tuple[TcpProxy, str]]:
    """A TCP proxy to the database (a test cuts it), and the database's URL through it."""
    url = make_url(postgres_url)
    socket_folder = url.query.get("host")
    # A server on a Unix socket (the throwaway one) is reached through the socket's file.
    upstream: tuple[str, int] | str = (
        f"{socket_folder}/.s.PGSQL.{url.port or 5432}"
        if isinstance(socket_folder, str) and socket_folder.startswith("/")
        else (url.host or "127.0.0.1", url.port or 5432)
    )
    with tcp_proxy(upstream) as proxy:
        via_proxy = (
            url.difference_update_query(["host"])
            .set(host="127.0.0.1", port=proxy.port)
            .render_as_string(hide_password=False)
        )
        yield proxy, via_proxy


@pytest.mark.slow
def test_database_going_away_answers_503_and_recovers(postgres_url: str, tmp_path: Path) -> None:
    with (
        _database_behind_a_proxy(postgres_url) as (proxy, via_proxy),
        serve_metrics(body=drafts_payload(100)) as server,
    ):
        settings = {"db_connect_timeout_s": 1, "db_statement_timeout_s": 2}
        with serve_collector(via_proxy, **settings) as collector:
            api = clients.client(base_url=collector, timeout=30)
            assert (
                api.post("/windows/db/start", json={"targets": [server.target]}).status_code == 201
            )
            proxy.cut()
            health = api.get("/healthz")
            assert health.status_code == 503
            assert health.json()["detail"].startswith("database unavailable: ")
            down: dict[str, Any] = api.post(
                "/windows/other/start", json={"targets": [server.target]}
            ).json()
            assert api.get("/windows/db").status_code == 503
            assert down["detail"].startswith("database unavailable: ") and down["detail"].endswith(
                "retry later"
            )
            proxy.restore()
            deadline = time.monotonic() + 30
            while api.get("/healthz").status_code != 200:
                assert time.monotonic() < deadline, "the service did not recover"
                time.sleep(0.2)
            server.replace(drafts_payload(250))
            stopped = api.post("/windows/db/stop")
            assert stopped.status_code == 200
            assert stopped.json()["targets"][0]["result"]["data"]["num_drafts"] == 150
            assert api.get("/windows/other").status_code == 404  # the refused start stored nothing


def test_a_database_restart_while_the_service_is_idle_fails_no_call(postgres_url: str) -> None:
    """Every connection the service holds is lost while it is idle (the database restarted):
    its next calls pass, each pooled connection idle that long checked before use and
    replaced with every one opened before it. The calls carry a stored key, so that the
    first thing each does is read the database."""
    with (
        _database_behind_a_proxy(postgres_url) as (proxy, via_proxy),
        serve_metrics(body=drafts_payload(100)) as server,
        # No lease scan meanwhile: it would use a lost connection first, and fail itself.
        serve_collector(via_proxy, sampler_scan_s=60) as collector,
    ):
        database = open_database(postgres_url)
        _, key = create_key(database, "ops", "write", "test")
        database.dispose()
        api = clients.client(
            base_url=collector, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        assert api.post("/windows/idle/start", json={"targets": [server.target]}).status_code == 201
        proxy.cut()
        proxy.restore()
        time.sleep(CHECK_AFTER_IDLE_S + 0.3)
        assert api.get("/windows/idle").status_code == 200
        server.replace(drafts_payload(250))
        stopped = api.post("/windows/idle/stop")
        assert stopped.status_code == 200
        assert stopped.json()["targets"][0]["result"]["data"]["num_drafts"] == 150


@pytest.mark.slow
def test_serve_with_two_workers_runs_two_replicas_on_one_port(
    database_url: str, tmp_path: Path
) -> None:
    """`specdec serve --workers 2`: two processes accept on one port, each a replica with its
    own heartbeat; calls spread over both lose nothing, and one of them samples each window."""
    interval = 0.5
    with (
        run_collector(database_url, tmp_path, SPECDEC_WORKERS="2") as collector,
        serve_metrics(body=drafts_payload(100)) as server,
    ):
        database = open_database(database_url)

        def replicas() -> set[str] | None:
            # Each /healthz, on a new connection, lands the heartbeat of the worker it reached.
            clients.get(f"{collector.base_url}/healthz", timeout=30).raise_for_status()
            with database.connect() as connection:
                found = set(connection.execute(text("SELECT replica_id FROM heartbeat")).scalars())
            return found if len(found) == 2 else None

        found = wait_for(replicas, "a heartbeat of each worker")
        worker_pids = {int(replica.rsplit(":", 1)[1]) for replica in found}
        assert worker_pids <= set(collector.pids()) and collector.process is not None
        assert collector.process.pid not in worker_pids  # the supervisor serves nothing itself
        windows = [f"w{i}" for i in range(40)]

        async def call_all(verb: str, body: dict[str, Any] | None) -> list[int]:
            # A new connection per call, so the kernel spreads them over both workers.
            async def one(window_id: str) -> int:
                async with clients.async_client(base_url=collector.base_url, timeout=60) as client:
                    answer = await client.post(f"/windows/{window_id}/{verb}", json=body)
                    return answer.status_code

            return list(await asyncio.gather(*(one(window_id) for window_id in windows)))

        started = asyncio.run(call_all("start", {"targets": [server.target]}))
        sampled = clients.post(
            f"{collector.base_url}/windows/sampled/start",
            json={"targets": [server.target], "sample_interval_s": interval},
            timeout=30,
        )
        server.replace(drafts_payload(400))
        stopped = asyncio.run(call_all("stop", None))
        time.sleep(4 * interval)
        with database.connect() as connection:
            owner = connection.execute(
                text("SELECT sampler_owner FROM \"window\" WHERE window_id = 'sampled'")
            ).scalar_one()
        sampled_stop = clients.post(f"{collector.base_url}/windows/sampled/stop", timeout=30).json()
        results = [
            clients.get(
                f"{collector.base_url}/windows/{w}/results/{server.target}", timeout=30
            ).json()["data"]["num_drafts"]
            for w in windows
        ]

        # Whichever worker answers /metrics (a new connection each time), it counts the
        # scrapes of both: one count, at least the 82 the windows made. A sample the owner had
        # in flight when the sampled window stopped may still land: the count is read until
        # eight reads in a row agree.
        def scrapes_counted() -> float:
            answer = clients.get(f"{collector.base_url}/metrics", timeout=30)
            return next(
                float(line.rsplit(" ", 1)[1])
                for line in answer.text.split("\n")
                if line.startswith("specdec_scrape_duration_seconds_count")
            )

        def one_count() -> set[float] | None:
            seen = {scrapes_counted() for _ in range(8)}
            return seen if len(seen) == 1 else None

        counts = wait_for(one_count, "one count of scrapes from either worker")
        database.dispose()
    assert (started, stopped, sampled.status_code) == ([201] * 40, [200] * 40, 201)
    assert results == [300] * 40
    assert len(counts) == 1 and counts.pop() >= 2 * 40 + 2
    assert owner in found
    samples = sampled_stop["targets"][0]["result"]["samples"]
    assert samples["failed"] == 0 and samples["taken"] >= 2
