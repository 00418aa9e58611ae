"""Health and the collector's own metrics."""

import asyncio
import json
import re
import sqlite3
import time
from fractions import Fraction
from pathlib import Path

import fastapi.dependencies.utils
import fastapi.routing
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import Engine

from specdec_collector.config import Settings
from specdec_collector.service.auth import EnvKey, OpenMode
from specdec_collector.service.main import create_app
from specdec_collector.service.routes.health import ANSWER_KEPT_S
from tests.support import clients
from tests.support.collector import (
    CollectorProcess,
    run_collector,
    serve_collector,
    serve_in_thread,
)
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import InstanceCounters, drafts_payload, vllm_payload
from tests.support.waiting import wait_for


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_own_metrics_count_scrapes_errors_and_open_windows(collector: CollectorProcess) -> None:
    """On a collector of its own: its counters count every team's scrapes."""
    api = clients.client(base_url=collector.base_url, timeout=30)
    with serve_metrics(body=drafts_payload(10)) as good, serve_metrics(status=500) as bad:
        api.post("/windows/m/start", json={"targets": [good.target, bad.target]})
        during = _samples(api.get("/metrics").text)
        api.post("/windows/m/stop")
        after = _samples(api.get("/metrics").text)
    assert during[("specdec_open_windows", ())] == 1
    assert after[("specdec_open_windows", ())] == 0
    assert (
        after[("specdec_scrape_errors_total", (("reason", "http_status"),))] == 2
    )  # before and after
    assert after[("specdec_scrape_duration_seconds_count", ())] == 4  # two targets, twice
    assert after[("specdec_scrape_requests_total", ())] == good.count() + bad.count() == 4
    assert after[("specdec_sampler_lag_seconds", ())] == 0
    assert api.get("/healthz").json() == {"status": "ok"}


def test_own_metrics_count_the_requests_that_scrapes_shared(collector: CollectorProcess) -> None:
    """Windows started at once on one slow server share its scrapes: the collector counts the
    requests it sent, as many as the server received, fewer than the scrapes."""
    starts = 20
    with serve_metrics(body=drafts_payload(10), delay_s=0.3) as server:

        async def start_all() -> list[int]:
            async with clients.async_client(base_url=collector.base_url, timeout=30) as api:
                body = {"targets": [server.target]}
                answers = await asyncio.gather(
                    *(api.post(f"/windows/herd-{i}/start", json=body) for i in range(starts))
                )
            return [answer.status_code for answer in answers]

        assert asyncio.run(start_all()) == [201] * starts
        metrics = _samples(clients.get(f"{collector.base_url}/metrics").text)
        received = server.count()
    assert metrics[("specdec_scrape_duration_seconds_count", ())] == starts
    assert metrics[("specdec_scrape_requests_total", ())] == received < starts


def test_latest_closed_windows_are_exported_within_the_cap(database_url: str) -> None:
    with (
        serve_collector(database_url, metrics_latest_windows=2) as collector,
        serve_metrics() as server,
    ):
        api = clients.client(base_url=collector, timeout=30)
        for index, accepted in enumerate(([5, 3, 1], [8, 6, 4], [9, 9, 9])):
            server.replace(drafts_payload(0))
            api.post(f"/windows/w{index}/start", json={"targets": [server.target]})
            server.replace(
                vllm_payload(
                    [InstanceCounters(drafts=10, draft_tokens=30, accepted_per_pos=accepted)]
                ).encode()
            )
            api.post(f"/windows/w{index}/stop")
        samples = _samples(api.get("/metrics").text)
    rates = {
        labels: value
        for (name, labels), value in samples.items()
        if name == "specdec_window_acceptance_rate"
    }
    assert rates == {
        (("target", server.target), ("team", "default"), ("window", "w1")): pytest.approx(
            float(Fraction(18 * 100, 30)), rel=1e-15
        ),
        (("target", server.target), ("team", "default"), ("window", "w2")): pytest.approx(
            float(Fraction(27 * 100, 30)), rel=1e-15
        ),
    }
    lengths = {
        labels: value
        for (name, labels), value in samples.items()
        if name == "specdec_window_acceptance_length"
    }
    assert lengths[(("target", server.target), ("team", "default"), ("window", "w2"))] == (
        pytest.approx(float(1 + Fraction(27, 10)), rel=1e-15)
    )


def test_grafana_dashboard_reads_only_metrics_the_service_exports(api: httpx.Client) -> None:
    dashboard = json.loads(
        (Path(__file__).parents[2] / "docker/grafana/dashboards/specdec.json").read_text()
    )
    used = {
        re.sub(r"_(bucket|count|sum)$", "", name)
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])  # a row holds none
        for name in re.findall(r"specdec_[a-z_]+", target["expr"])
    }
    exported = {family.name for family in text_string_to_metric_families(api.get("/metrics").text)}
    exported |= {name + "_total" for name in exported}  # counters lose _total in the parser
    assert used and used <= exported, used - exported


def test_healthz_answers_while_another_writer_holds_the_database(tmp_path: Path) -> None:
    """SQLite has one writer: a long write (here another process's open transaction) made
    `/healthz` wait out the 30 s busy timeout and fail; it now answers busy but healthy."""
    database = tmp_path / "busy.db"
    with run_collector(f"sqlite:///{database}", tmp_path) as collector:
        health = clients.client(base_url=collector.base_url, timeout=10)
        assert health.get("/healthz").json() == {"status": "ok"}
        other = sqlite3.connect(database, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # holds the write lock until the rollback
        try:
            # The next check's heartbeat waits for the lock, and its answer is the one after.
            busy = wait_for(
                lambda: a if (a := health.get("/healthz")).json().get("database") else None,
                "a check that found the database busy",
            )
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert (busy.status_code, busy.json()) == (200, {"status": "ok", "database": "busy"})
        # Once the lock is free, a later check's heartbeat goes through (the busy answer is
        # kept ANSWER_KEPT_S, and a heartbeat that waited for the lock may still be ending).
        time.sleep(ANSWER_KEPT_S)
        wait_for(
            lambda: True if health.get("/healthz").json() == {"status": "ok"} else None,
            "a healthy answer once the lock was released",
        )


def test_routes_are_built_before_the_first_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FastAPI builds a router's routes (every route's parameter validators) on the first
    request that reaches it: ~30 ms of CPU that the first window's start of a fresh collector
    paid. The lifespan builds them before the first request is accepted."""
    built: list[str] = []
    original = fastapi.dependencies.utils.get_dependant

    def counted(*args: object, **kwargs: object) -> object:
        built.append(str(kwargs.get("path", args[:1])))
        return original(*args, **kwargs)  # type: ignore[arg-type]

    # Routes are built with this function: counted, before and after start-up.
    monkeypatch.setattr(fastapi.routing, "get_dependant", counted)
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'db'}"))
    with serve_in_thread(app) as url:
        assert built, "the lifespan built no route"
        built.clear()
        assert clients.get(f"{url}/windows").status_code == 200
        assert clients.get(f"{url}/healthz").status_code == 200
    assert built == []


def test_open_mode_is_asked_once_before_the_first_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its connection opened and its query compiled at start-up, not in the first call."""
    asked: list[Engine] = []
    original = OpenMode.is_open

    def counted(mode: OpenMode, env_keys: list[EnvKey], database: Engine) -> bool:
        asked.append(database)
        return original(mode, env_keys, database)

    monkeypatch.setattr(OpenMode, "is_open", counted)
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'db'}"))
    with serve_in_thread(app) as url:
        assert len(asked) == 1
        assert clients.get(f"{url}/windows").status_code == 200  # open: no key exists
    assert len(asked) == 2


def test_keyless_health_checks_in_quick_succession_write_the_database_once(
    tmp_path: Path,
) -> None:
    """57 anonymous checks a second used to write 57 heartbeats a second, which other teams'
    starts waited for; checks within ANSWER_KEPT_S of one another share its answer."""
    database = tmp_path / "beats.db"
    with run_collector(f"sqlite:///{database}", tmp_path) as collector:
        logged = sqlite3.connect(database, isolation_level=None)
        logged.executescript(
            "CREATE TABLE beats (at TEXT);"
            "CREATE TRIGGER beat_in AFTER INSERT ON heartbeat BEGIN INSERT INTO beats VALUES (1); END;"
            "CREATE TRIGGER beat_up AFTER UPDATE ON heartbeat BEGIN INSERT INTO beats VALUES (1); END;"
        )
        health = clients.client(base_url=collector.base_url, timeout=10)
        time.sleep(ANSWER_KEPT_S + 0.1)  # the start-up's own check expired
        began = time.monotonic()
        statuses = [health.get("/healthz").status_code for _ in range(100)]
        elapsed = time.monotonic() - began
        beats = logged.execute("SELECT count(*) FROM beats").fetchone()[0]
        logged.close()
    assert statuses == [200] * 100
    assert 1 <= beats <= elapsed / ANSWER_KEPT_S + 1


def test_a_metrics_key_reads_every_teams_results_on_metrics_and_nothing_else(
    database_url: str,
) -> None:
    """For Prometheus: a metrics key sees every team's latest results on /metrics, as an admin
    key does, but can neither read a window nor start, stop or force-close one."""
    write_a, write_b = "team-a-write-key-0001", "team-b-write-key-0002"
    scraper = "prometheus-metrics-key-0003"
    keys = f"a:write:{write_a},b:write:{write_b},ops:metrics:{scraper}"
    with (
        serve_collector(database_url, api_keys=keys) as collector,
        serve_metrics(body=drafts_payload(0)) as server,
        clients.client(base_url=collector, timeout=30) as api,
    ):
        for team_key, window in ((write_a, "wa"), (write_b, "wb")):
            as_team = {"Authorization": f"Bearer {team_key}"}
            server.replace(drafts_payload(0))
            assert api.post(f"/windows/{window}/start", json={"targets": [server.target]},
                            headers=as_team).status_code == 201  # fmt: skip
            server.replace(drafts_payload(10))
            assert api.post(f"/windows/{window}/stop", headers=as_team).status_code == 200
        metrics_key = {"Authorization": f"Bearer {scraper}"}
        samples = _samples(api.get("/metrics", headers=metrics_key).text)
        teams = {
            dict(labels)["team"]
            for (name, labels), _ in samples.items()
            if name == "specdec_window_acceptance_rate"
        }
        refused = [
            api.get("/windows", headers=metrics_key),
            api.get("/windows/wa", params={"team": "a"}, headers=metrics_key),
            api.post("/windows/wc/start", json={"targets": [server.target]}, headers=metrics_key),
            api.post("/windows/wa/force-close", params={"team": "a"}, headers=metrics_key),
        ]
        own_team = _samples(
            api.get("/metrics", headers={"Authorization": f"Bearer {write_a}"}).text
        )
    assert teams == {"a", "b"}
    assert [answer.status_code for answer in refused] == [403, 403, 403, 403]
    assert refused[0].json()["detail"] == "a metrics key reads /metrics only"
    assert {
        dict(labels)["team"]
        for (name, labels), _ in own_team.items()
        if name == "specdec_window_acceptance_rate"
    } == {"a"}
