"""Long windows read from Prometheus: a bounded span, read in chunks, thinned to the scrapes
the result needs, and an open window's timeline read once and then only what is new.

The Prometheus is a stand-in (`tests.support.prometheus_standin`): days of samples cannot
be waited for. The expected counts are computed here from the stand-in's own rule."""

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from specdec_collector.core.counters import Role, ServingEngine
from specdec_collector.core.exposition import Series, SeriesKey, SeriesValue
from specdec_collector.core.promql import thin
from tests.support import clients
from tests.support.collector import CollectorProcess, serve_collector
from tests.support.prometheus_standin import serve_standin_prometheus

INSTANCE = "10.1.2.3:8000"
INTERVAL_S = 15.0


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).isoformat()


def _expected_drafts(first_k: int, last_k: int, resets: tuple[int, ...]) -> int:
    """Drafts counted from scrape `first_k` to `last_k`: 2 a scrape, a restart's own count
    from 0 (its value at the reset scrape, 0, is all that step adds)."""
    total = 0
    for k in range(first_k + 1, last_k + 1):
        total += 0 if k in resets else 2
    return total


def test_a_start_or_stop_further_back_than_the_span_bound_is_a_422_naming_at(
    tmp_path: Path,
) -> None:
    now = time.time()
    with (
        serve_standin_prometheus(INSTANCE, now - 3 * 86400, INTERVAL_S) as prometheus,
        serve_collector(
            f"sqlite:///{tmp_path}/s.db",
            prometheus_url=prometheus.url,
            prometheus_max_span_s=86400,
        ) as collector,
    ):
        api = clients.client(base_url=collector, timeout=60)
        body = {"targets": [INSTANCE], "source": "prometheus"}
        ancient = api.post("/windows/a/start", json={**body, "at": "1970-01-02T00:00:00Z"})
        old = api.post("/windows/b/start", json={**body, "at": _iso(now - 2 * 86400)})
        assert api.post("/windows/c/start", json={**body, "at": _iso(now - 3600)}).is_success
        stop_past = api.post("/windows/c/stop", json={"at": _iso(now - 7200)})
    for refused in (ancient, old):
        assert refused.status_code == 422, refused.text
        (detail,) = refused.json()["detail"]
        assert detail["loc"] == ["body", "at"]
        assert "SPECDEC_PROMETHEUS_MAX_SPAN_S" in detail["msg"]
    assert stop_past.status_code == 422 and "before the window's start" in stop_past.text
    # No range query ever asked for more than the span bound.
    assert all(span <= 86400 for span in prometheus.ranges_s)


def test_a_long_window_is_read_in_chunks_and_keeps_only_the_scrapes_it_needs(
    tmp_path: Path,
) -> None:
    """Two days of scrapes every 15 s (11,520), three engine restarts: the stop asks for at
    most 15 minutes at a time, keeps at most 200 scrapes as samples, and counts exactly what
    all of them would."""
    now = time.time()
    first = now - 2 * 86400 - 600
    resets = (3000, 3010, 9000)
    with (
        serve_standin_prometheus(INSTANCE, first, INTERVAL_S, resets) as prometheus,
        serve_collector(
            f"sqlite:///{tmp_path}/l.db",
            prometheus_url=prometheus.url,
            prometheus_max_span_s=3 * 86400,
            prometheus_max_points=200,
        ) as collector,
    ):
        api = clients.client(base_url=collector, timeout=120)
        start, stop = first + 300 + 1, now - 127  # neither on a scrape
        body = {"targets": [INSTANCE], "source": "prometheus", "at": _iso(start)}
        assert api.post("/windows/long/start", json=body).status_code == 201
        stopped = api.post("/windows/long/stop", json={"at": _iso(stop)})
        assert stopped.status_code == 200, stopped.text
        result = stopped.json()["targets"][0]["result"]
        samples = api.get("/windows/long/samples").json()["series"][0]["points"]
    k_start = prometheus.scrape_index(start)
    k_stop = prometheus.scrape_index(stop)
    assert k_start is not None and k_stop is not None
    k_end = k_stop + 1  # the first scrape at or after the stop ends the window
    assert result["status"] == "ok", result
    assert result["data"]["num_drafts"] == _expected_drafts(k_start, k_end, resets)
    assert result["data"]["draft_tokens"] == 3 * result["data"]["num_drafts"]
    assert result["restarts"] == len(resets)
    assert len(samples) <= 200 and samples[-1]["num_drafts"] == result["data"]["num_drafts"]
    assert max(prometheus.ranges_s) <= 901
    assert sum(prometheus.ranges_s) >= stop - start  # every second of the window was read


def test_a_window_of_a_fleet_reads_every_target_with_one_query_a_step(tmp_path: Path) -> None:
    """A window of 256 servers (the most a window may name) behind a proxy that takes URLs
    of 8 KB at most: its selector names them all, far longer, and is sent in the body; the one
    the stand-in serves counts exactly, the others say Prometheus has none of theirs, and the
    stop asked the same few queries as for one target."""
    now = time.time()
    fleet = [f"10.9.{i // 250}.{i % 250}:8000" for i in range(255)] + [INSTANCE]
    with (
        serve_standin_prometheus(INSTANCE, now - 7200, INTERVAL_S) as prometheus,
        serve_collector(f"sqlite:///{tmp_path}/f.db", prometheus_url=prometheus.url) as collector,
    ):
        api = clients.client(base_url=collector, timeout=60)
        start, stop = now - 3600 + 1, now - 127  # neither on a scrape
        body = {"targets": fleet, "source": "prometheus", "at": _iso(start)}
        assert api.post("/windows/fleet/start", json=body).status_code == 201
        one = {"targets": [INSTANCE], "source": "prometheus", "at": _iso(start)}
        assert api.post("/windows/one/start", json=one).status_code == 201
        before = prometheus.queries
        stopped = api.post("/windows/fleet/stop", json={"at": _iso(stop)})
        fleet_queries = prometheus.queries - before
        before = prometheus.queries
        assert api.post("/windows/one/stop", json={"at": _iso(stop)}).status_code == 200
        one_queries = prometheus.queries - before
    assert stopped.status_code == 200, stopped.text
    results = {t["target"]: t["result"] for t in stopped.json()["targets"]}
    assert len(results) == len(fleet)
    ours = results.pop(INSTANCE)
    k_start, k_stop = prometheus.scrape_index(start), prometheus.scrape_index(stop)
    assert k_start is not None and k_stop is not None
    assert ours["status"] == "ok", ours
    # The first scrape at or after the stop ends the window.
    assert ours["data"]["num_drafts"] == _expected_drafts(k_start, k_stop + 1, ())
    assert {r["status"] for r in results.values()} == {"na"}
    assert all("holds no spec-decode series" in r["error"] for r in results.values())
    assert fleet_queries == one_queries


def test_an_open_windows_timeline_is_read_once_then_only_what_is_new(tmp_path: Path) -> None:
    """The dashboard reads an open window's samples every 2 s: after the first read, each one
    asks Prometheus only for the seconds since; reads within a second share one."""
    now = time.time()
    with (
        serve_standin_prometheus(INSTANCE, now - 7200, 1.0) as prometheus,
        serve_collector(
            f"sqlite:///{tmp_path}/o.db", prometheus_url=prometheus.url, prometheus_max_points=100
        ) as collector,
    ):
        api = clients.client(base_url=collector, timeout=60)
        body = {"targets": [INSTANCE], "source": "prometheus", "at": _iso(now - 3600)}
        assert api.post("/windows/open/start", json=body).status_code == 201
        first = api.get("/windows/open/samples").json()["series"][0]["points"]
        first_read = sum(prometheus.ranges_s)
        queries = prometheus.queries
        again = api.get("/windows/open/samples").json()["series"][0]["points"]
        shared = prometheus.queries - queries
        time.sleep(1.2)
        prometheus.ranges_s.clear()
        later = api.get("/windows/open/samples").json()["series"][0]["points"]
    assert first_read >= 3600 and len(first) <= 100
    assert again == first and shared == 0
    assert 0 < sum(prometheus.ranges_s) < 30, prometheus.ranges_s
    assert later[-1]["num_drafts"] >= first[-1]["num_drafts"] and len(later) <= 100


def test_a_window_open_longer_than_the_bound_stops_as_na_saying_why(tmp_path: Path) -> None:
    """Nothing is read of a window longer than the bound: every target is `na`, the window
    closes (it cannot be left open)."""
    now = time.time()
    with (
        serve_standin_prometheus(INSTANCE, now - 7200, INTERVAL_S) as prometheus,
        serve_collector(
            f"sqlite:///{tmp_path}/n.db", prometheus_url=prometheus.url, prometheus_max_span_s=5
        ) as collector,
    ):
        api = clients.client(base_url=collector, timeout=60)
        body = {"targets": [INSTANCE], "source": "prometheus", "at": _iso(time.time() - 4)}
        assert api.post("/windows/w/start", json=body).status_code == 201
        time.sleep(1.5)
        stopped = api.post("/windows/w/stop")
    assert stopped.status_code == 200 and stopped.json()["state"] == "closed"
    result = stopped.json()["targets"][0]["result"]
    assert prometheus.ranges_s == []
    assert result["status"] == "na" and "SPECDEC_PROMETHEUS_MAX_SPAN_S" in result["error"]


def _drafts(value: float, created: float | None = None) -> Series:
    key = SeriesKey(Role.DRAFTS, (("engine", "0"),), ServingEngine.VLLM)
    return {key: SeriesValue(value, created)}


def test_thinning_keeps_both_ends_of_every_reset_and_bounds_the_rest() -> None:
    at = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i) for i in range(1000)]
    values = [float(i if i < 500 else i - 500) for i in range(1000)]  # a restart at 500
    points = [(when, _drafts(v)) for when, v in zip(at, values, strict=True)]
    kept = thin(points, 50)
    assert len(kept) == 50 and kept[0] == points[0] and kept[-1] == points[-1]
    assert points[499] in kept and points[500] in kept
    assert thin(points[:40], 50) == points[:40]


@pytest.mark.slow
def test_a_stop_killed_at_any_moment_and_retried_stores_each_snapshot_once(
    tmp_path: Path,
) -> None:
    """SIGKILL lands at a different moment of each stop (its reading, its one transaction,
    after it); the retried stop stores each snapshot once and the same result."""
    now = time.time()
    database = tmp_path / "k.db"
    env = {"SPECDEC_PROMETHEUS_MAX_POINTS": "2000", "SPECDEC_PROMETHEUS_MAX_SPAN_S": "86400"}
    with serve_standin_prometheus(INSTANCE, now - 7 * 3600, 1.0) as prometheus:
        env["SPECDEC_PROMETHEUS_URL"] = prometheus.url
        collector = CollectorProcess(f"sqlite:///{database}", env=env)
        results = []
        for turn, fraction in enumerate((0.2, 0.5, 0.8, 1.5)):
            collector.start()
            api = clients.client(base_url=collector.base_url, timeout=120)
            body = {"targets": [INSTANCE], "source": "prometheus", "at": _iso(now - 6 * 3600)}
            assert api.post(f"/windows/k{turn}/start", json=body).status_code == 201
            stop = {"at": _iso(now - 60)}
            began = time.monotonic()
            if turn == 0:  # measured once: how long a stop takes here
                assert api.post("/windows/k0/stop", json=stop).status_code == 200
                took = time.monotonic() - began
                results.append(api.get("/windows/k0").json()["targets"][0]["result"])
                collector.stop()
                continue
            stopping = threading.Thread(
                target=_quietly, args=(api.post, f"/windows/k{turn}/stop"), kwargs={"json": stop}
            )
            stopping.start()
            time.sleep(took * fraction)
            collector.kill()
            stopping.join()
            collector.start()
            retried = clients.post(
                f"{collector.base_url}/windows/k{turn}/stop", json=stop, timeout=120
            )
            assert retried.status_code == 200, retried.text
            results.append(retried.json()["targets"][0]["result"])
            collector.stop()
    # The same figures each time (the windows overlap one another: that part differs).
    figures = [
        {
            **{k: v for k, v in result.items() if k not in ("overlaps", "flags")},
            "flags": [f for f in result.get("flags", []) if f["kind"] != "overlaps"],
        }
        for result in results
    ]
    assert all(each == figures[0] for each in figures), figures
    engine = create_engine(f"sqlite:///{database}")
    with engine.connect() as connection:
        duplicates = connection.execute(
            text(
                "SELECT count(*) FROM (SELECT target_id, phase, taken_at, count(*) AS n "
                "FROM snapshot GROUP BY target_id, phase, taken_at) WHERE n > 1"
            )
        ).scalar_one()
        per_window = (
            connection.execute(text("SELECT count(*) FROM snapshot GROUP BY target_id"))
            .scalars()
            .all()
        )
    engine.dispose()
    assert duplicates == 0
    assert len(set(per_window)) == 1 and per_window[0] <= 2000


def _quietly(call: Callable[..., object], *args: object, **kwargs: object) -> None:
    with contextlib.suppress(httpx.HTTPError):  # the service was killed under it
        call(*args, **kwargs)


def test_a_server_two_scrape_configurations_scrape_is_na_not_counted_twice(
    tmp_path: Path,
) -> None:
    """Two jobs that differ in one label scrape one server: each series is there twice, under
    labels that differ; the window says so rather than count 1050 drafts for 504."""
    now = time.time()
    with (
        serve_standin_prometheus(INSTANCE, now - 3600, INTERVAL_S) as prometheus,
        serve_collector(f"sqlite:///{tmp_path}/j.db", prometheus_url=prometheus.url) as collector,
    ):
        prometheus.configs = 2
        api = clients.client(base_url=collector, timeout=60)
        body = {"targets": [INSTANCE], "source": "prometheus", "at": _iso(now - 600)}
        assert api.post("/windows/twice/start", json=body).status_code == 201
        result = api.post("/windows/twice/stop", json={"at": _iso(now - 60)}).json()
    (target,) = result["targets"]
    assert target["result"]["status"] == "na"
    assert "2 scrape configurations" in target["result"]["error"]
