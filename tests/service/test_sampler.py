"""The background sampler, with the real scheduler at sub-second intervals over real sockets."""

import csv
import fcntl
import io
import threading
import time
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import Session, col

from specdec_collector.service.sampler import Sampler
from specdec_collector.sources.scrape import ScrapeConfig, new_client
from specdec_collector.sources.scrape.source import ScrapeSource
from specdec_collector.store.db import open_database, write_session
from specdec_collector.store.migrate import upgrade_database
from specdec_collector.store.store import Store
from specdec_collector.store.tables import Window
from specdec_collector.windows.leases import claim_windows, purge_samples
from tests.bench.bench_storage import bytes_per_sample
from tests.support import clients
from tests.support.collector import Team, run_collector
from tests.support.metrics_server import MetricsServer, serve_metrics
from tests.support.payloads import InstanceCounters, fixture, vllm_payload
from tests.support.waiting import wait_for

K = 3


def counters(drafts: int, created: float | None = None) -> InstanceCounters:
    """One engine whose counts all follow `drafts`: 3 tokens a draft, 0.6/0.3/0.1 accepted."""
    per_pos = [drafts * 6 // 10, drafts * 3 // 10, drafts // 10]
    return InstanceCounters(
        drafts=drafts, draft_tokens=K * drafts, accepted_per_pos=per_pos, created=created
    )


def serve_and_wait(server: MetricsServer, drafts: int, created: float | None = None) -> None:
    """Serve a new payload and wait until a sample has read it."""
    server.replace(vllm_payload([counters(drafts, created)]).encode())
    server.wait_served()


def samples_of(api: httpx.Client, window_id: str) -> list[dict[str, Any]]:
    answer = api.get(f"/windows/{window_id}/samples")
    assert answer.status_code == 200, answer.text
    points: list[dict[str, Any]] = answer.json()["series"][0]["points"]
    return points


def wait_stored(api: httpx.Client, window_id: str, samples: int) -> None:
    """Wait until the open window holds `samples` samples: a sample served is stored a moment
    later, and one still in flight when the window stops is not the window's."""

    def stored() -> bool | None:
        taken = sum(point["phase"] == "sample" for point in samples_of(api, window_id))
        return True if taken >= samples else None

    wait_for(stored, f"{samples} samples of window {window_id} stored")


@pytest.mark.parametrize("interval", [0.1, 0.24, 3600.5, -1])
def test_interval_outside_a_quarter_second_to_an_hour_is_a_422(
    api: httpx.Client, interval: float
) -> None:
    answer = api.post("/windows/w/start", json={"targets": ["h:1"], "sample_interval_s": interval})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "sample_interval_s"]


def test_reset_between_samples_is_counted_in_full(api: httpx.Client) -> None:
    """No `_created` here (several API servers): only the samples can see the reset."""
    with serve_metrics() as server:
        server.set_text(vllm_payload([counters(1000)]))
        body = {"targets": [server.target], "sample_interval_s": 0.5}
        assert api.post("/windows/sampled/start", json=body).status_code == 201
        assert (
            api.post("/windows/plain/start", json={"targets": [server.target]}).status_code == 201
        )
        serve_and_wait(server, 1200)
        wait_stored(api, "sampled", 1)
        serve_and_wait(server, 100)  # the engine restarted
        wait_stored(api, "sampled", 2)
        serve_and_wait(server, 1500)  # and climbed above its old count
        wait_stored(api, "sampled", 3)
        sampled = api.post("/windows/sampled/stop").json()["targets"][0]["result"]
        plain = api.post("/windows/plain/stop").json()["targets"][0]["result"]
    drafts = (1200 - 1000) + 100 + (1500 - 100)
    assert sampled["status"] == "ok"
    assert sampled["data"]["num_drafts"] == drafts
    assert sampled["data"]["draft_tokens"] == K * drafts
    accepted_at_0 = (720 - 600) + 60 + (900 - 60)
    assert sampled["data"]["per_position_acceptance_rates"]["0"] == accepted_at_0 / drafts
    assert sampled["series_resets"] == 3 + K  # every series of the engine, once
    assert sampled["restarts"] == 1  # one engine, once
    assert sampled["samples"]["taken"] >= 3
    assert sampled["samples"]["failed"] == 0
    # Without samples and without `_created`, the reset is invisible: only the net change shows.
    assert plain["data"]["num_drafts"] == 1500 - 1000
    assert plain["samples"] == {"taken": 0, "failed": 0}


def test_failed_samples_are_stored_and_skipped(api: httpx.Client) -> None:
    with serve_metrics() as server:
        server.set_text(vllm_payload([counters(1000)]))
        assert (
            api.post(
                "/windows/flaky/start", json={"targets": [server.target], "sample_interval_s": 0.5}
            ).status_code
            == 201
        )
        serve_and_wait(server, 1100)
        failures = len(server.spans)
        server.status = 503
        while len(server.spans) < failures + 2:
            time.sleep(0.05)
        server.status = 200
        serve_and_wait(server, 1300)
        result = api.post("/windows/flaky/stop").json()["targets"][0]["result"]
        points = samples_of(api, "flaky")
    assert result["status"] == "ok"
    assert result["data"]["num_drafts"] == 300
    assert result["samples"]["failed"] >= 2
    failed = [p for p in points if p["status"] == "error"]
    assert len(failed) == result["samples"]["failed"]
    assert all(p["error"] == "Metrics endpoint returned HTTP 503" for p in failed)
    assert all(p["num_drafts"] is None and p["acceptance_rate"] is None for p in failed)


def test_samples_endpoint_json_and_csv(api: httpx.Client) -> None:
    with serve_metrics() as server:
        server.set_text(vllm_payload([counters(1000)]))
        body = {"targets": [server.target], "sample_interval_s": 0.5}
        assert api.post("/windows/ts/start", json=body).status_code == 201
        serve_and_wait(server, 1400)

        def sampled() -> list[dict[str, Any]] | None:
            points = samples_of(api, "ts")
            return points if points[-1]["phase"] == "sample" else None

        live = wait_for(sampled, "a sample of the open window")  # served, then stored
        assert live[0]["phase"] == "before"
        serve_and_wait(server, 2000)
        api.post("/windows/ts/stop")
        points = samples_of(api, "ts")
        as_csv = api.get(f"/windows/ts/samples?target={server.target}&format=csv")
        by_accept = api.get("/windows/ts/samples", headers={"Accept": "text/csv"})
    assert points[0]["phase"] == "before"
    assert points[-1]["phase"] == "after"
    assert points[0]["num_drafts"] == 0
    assert points[-1]["num_drafts"] == 1000
    # Cumulative counts follow what the server showed; each interval's rate is its own.
    seen = [1000]
    for point in points[1:]:
        drafts = 1000 + point["num_drafts"]
        assert drafts in (1000, 1400, 2000)
        assert point["draft_tokens"] == K * point["num_drafts"]
        if drafts != seen[-1]:
            interval = drafts - seen[-1]
            accepted = sum(counters(drafts).accepted_per_pos) - sum(
                counters(seen[-1]).accepted_per_pos
            )
            assert point["acceptance_rate"] == pytest.approx(
                float(Fraction(accepted * 100, K * interval)), rel=1e-15
            )
            assert point["acceptance_length"] == pytest.approx(
                float(1 + Fraction(accepted, interval)), rel=1e-15
            )
            seen.append(drafts)
        else:
            assert point["acceptance_rate"] is None  # no drafts in that interval
    assert seen == [1000, 1400, 2000]

    assert as_csv.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert as_csv.text.splitlines()[0] == (
        "target,taken_at,phase,status,error,num_drafts,draft_tokens,accepted_tokens,"
        "acceptance_rate,acceptance_length,restarts,series_resets,position_0,position_1,position_2"
    )
    assert len(rows) == len(points)
    assert rows[-1]["num_drafts"] == "1000"
    assert rows[0]["target"] == server.target
    assert by_accept.text == as_csv.text


@pytest.mark.slow
def test_slow_scrapes_never_pile_up_and_stop_ends_sampling(api: httpx.Client) -> None:
    with serve_metrics(delay_s=1.2) as server:
        server.set_text(vllm_payload([counters(1000)]))
        body = {"targets": [server.target], "sample_interval_s": 0.5}
        assert api.post("/windows/slow/start", json=body).status_code == 201
        while server.count() < 4:
            time.sleep(0.05)
        assert server.max_in_flight == 1  # one run at a time, missed runs coalesced
        server.delay_s = 0
        api.post("/windows/slow/stop")
        after_stop = server.count()
        time.sleep(1.5)  # three intervals: a job left behind would have scraped by now
        assert server.count() == after_stop


@pytest.mark.slow
def test_sampling_resumes_after_sigkill(database_url: str, tmp_path: Path) -> None:
    with run_collector(database_url, tmp_path) as collector, serve_metrics() as server:
        server.set_text(vllm_payload([counters(1000)]))
        api = clients.client(base_url=collector.base_url, timeout=30)
        body = {"targets": [server.target], "sample_interval_s": 0.5}
        assert api.post("/windows/kill/start", json=body).status_code == 201
        serve_and_wait(server, 1100)
        collector.kill()
        killed_at = datetime.now(UTC)
        time.sleep(1.0)  # the gap
        restarted_at = datetime.now(UTC)
        collector.start()
        api = clients.client(base_url=collector.base_url, timeout=30)
        serve_and_wait(server, 1600)  # nobody calls the API: only a recreated job scrapes
        result = api.post("/windows/kill/stop").json()["targets"][0]["result"]
        points = samples_of(api, "kill")
    assert result["data"]["num_drafts"] == 600
    times = [datetime.fromisoformat(p["taken_at"]) for p in points]
    assert not [t for t in times if killed_at < t < restarted_at]  # nothing invented in the gap
    assert [t for t in times if t > restarted_at and t < times[-1]]  # sampled again after restart


def test_retention_deletes_old_samples_and_keeps_results(team: Team, api: httpx.Client) -> None:
    with serve_metrics() as server:
        for window_id in ("old", "recent"):
            server.set_text(vllm_payload([counters(1000)]))
            body = {"targets": [server.target], "sample_interval_s": 0.5}
            assert api.post(f"/windows/{window_id}/start", json=body).status_code == 201
            serve_and_wait(server, 1300)
            wait_stored(api, window_id, 1)
            serve_and_wait(server, 1700)
            wait_stored(api, window_id, 2)
            api.post(f"/windows/{window_id}/stop")
    results = {
        w: api.get(f"/windows/{w}/results/{server.target}").json() for w in ("old", "recent")
    }
    database = open_database(team.collector.database_url)
    with Session(database) as session:
        session.execute(
            update(Window)
            .where(col(Window.team) == team.name, col(Window.window_id) == "old")
            .values(stopped_at=datetime.now(UTC) - timedelta(days=31))
        )
        session.commit()
    deleted = purge_samples(database, datetime.now(UTC) - timedelta(days=30))
    assert deleted == results["old"]["samples"]["taken"] >= 2
    phases = {w: [p["phase"] for p in samples_of(api, w)] for w in ("old", "recent")}
    assert phases["old"] == ["before", "after"]
    assert "sample" in phases["recent"]
    for window_id, result in results.items():
        assert api.get(f"/windows/{window_id}/results/{server.target}").json() == result
    database.dispose()


@pytest.mark.anyio
async def test_sampler_schedules_the_daily_retention_job(database_url: str) -> None:
    store = await Store.open(database_url)
    async with new_client() as client:
        source = ScrapeSource(client, ScrapeConfig(1.0, 1 << 20))
        sampler = Sampler(store, source, retention_days=7)
        await sampler.start()
        job = sampler.scheduler.get_job("purge-samples")
        await sampler.stop()
    await store.aclose()
    assert job is not None
    assert job.trigger.interval == timedelta(days=1)


def test_a_one_engine_k5_sample_costs_under_1_kb(database_url: str) -> None:
    """Measured in the database: bytes its storage grows by per stored sample."""
    per_sample = bytes_per_sample(fixture("vllm_v1_dp1_k5.txt"), 1000, database_url)
    assert 0 < per_sample < 1024, per_sample


def test_an_idle_lease_scan_never_waits_for_the_writers_turn(tmp_path: Path) -> None:
    """The scan for windows to sample runs four times a second in every replica and almost
    always finds none: it must not queue for the writers' turn, which on SQLite every process
    of the collector shares (with two workers, each scan held up the other's writes)."""
    url = f"sqlite:///{tmp_path / 'scan.db'}"
    upgrade_database(url)
    database = open_database(url)
    scanned = threading.Event()

    def scan() -> None:
        assert claim_windows(database, "replica", set()) == []
        scanned.set()

    with write_session(database):  # a long write of another call holds the turn
        thread = threading.Thread(target=scan)
        thread.start()
        assert scanned.wait(timeout=10)
    thread.join()
    database.dispose()


@pytest.mark.slow
@pytest.mark.parametrize(("held_s", "ending"), [(0.5, "finished"), (3.0, "cancelled")])
def test_a_sampling_run_in_flight_at_shutdown_ends_without_a_traceback(
    tmp_path: Path, held_s: float, ending: str
) -> None:
    """At shutdown, asyncio cancels the jobs still running, and APScheduler logged the
    cancellation of each as an error with its traceback (a lease scan caught so in CI). A run
    has the scrape timeout and a second to finish (here 1.5 s after the shutdown began), then it is cancelled."""
    database_file = tmp_path / "shutdown.db"
    env = {"SPECDEC_SCRAPE_TIMEOUT_S": "0.5"}
    with (
        run_collector(f"sqlite:///{database_file}", tmp_path, **env) as collector,
        serve_metrics() as server,
    ):
        server.set_text(vllm_payload([counters(1000)]))
        api = clients.client(base_url=collector.base_url, timeout=30)
        body = {"targets": [server.target], "sample_interval_s": 0.5}
        assert api.post("/windows/down/start", json=body).status_code == 201
        serve_and_wait(server, 1100)
        assert collector.process is not None
        # Every process's turn to write: held here, the next run waits to store its sample.
        with Path(f"{database_file}.writer-lock").open("a") as turn:
            fcntl.flock(turn, fcntl.LOCK_EX)
            time.sleep(1.0)  # a sampling run is now waiting for the turn
            collector.process.terminate()
            time.sleep(held_s)  # the service shuts down around it
            fcntl.flock(turn, fcntl.LOCK_UN)
        collector.process.wait(timeout=15)
    lines = collector.stderr_text.splitlines()
    assert not [line for line in lines if "apscheduler" in line or "Traceback" in line]
    cancelled = [line for line in lines if "cancelled: the service stops" in line]
    assert bool(cancelled) == (ending == "cancelled"), cancelled
