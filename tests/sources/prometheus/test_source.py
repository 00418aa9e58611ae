"""Windows read from Prometheus: the query, and its answer read into the chain of snapshots.

The answers are written here as Prometheus' HTTP API answers an instant query of a range
selector (`resultType: matrix`); a test against a real Prometheus server is below them."""

import asyncio
import json
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
import respx

from specdec_collector.config import Settings
from specdec_collector.core.exposition import extract_spec_decode
from specdec_collector.core.figures import build_result
from specdec_collector.core.promql import (
    NAME_PATTERN,
    Scrapes,
    SourceError,
    instance_selector,
    instances_selector,
    parse_selector,
    range_query,
    scrape_spacing_query,
    scrape_spacings,
    scrape_time_query,
    scrape_times,
    scrapes_by_instance,
    scrapes_of,
    series_query,
)
from specdec_collector.core.readings import Failure
from specdec_collector.core.targets import parse_target
from specdec_collector.sources.prometheus.api import PrometheusAPI, PrometheusRead
from tests.support import clients
from tests.support.collector import (
    serve_collector,
    serve_simulator,
    specdec_command,
)
from tests.support.metrics_server import free_port, serve_metrics
from tests.support.payloads import drafts_payload
from tests.support.prometheus_server import run_prometheus
from tests.support.streaming import streamed_steps
from tests.support.waiting import wait_for

T0 = 1_796_000_000.0
LABELS = {"engine": "0", "model_name": "m", "instance": "10.0.0.1:8000", "job": "vllm"}


def matrix(*series: tuple[str, dict[str, str], list[tuple[float, float]]]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": {"__name__": name, **labels},
                 "values": [[stamp, repr(value)] for stamp, value in values]}
                for name, labels, values in series
            ],
        },
    }  # fmt: skip


def test_the_query_reads_every_spec_decode_sample_raw_over_the_window() -> None:
    start = datetime.fromtimestamp(T0, UTC)
    query = range_query(instance_selector("10.0.0.1:8000"), start, start + timedelta(seconds=60))
    assert query == f'{{__name__=~"{NAME_PATTERN}", instance="10.0.0.1:8000"}}[60s]'
    assert (
        series_query(instance_selector("h:1")) == f'{{__name__=~"{NAME_PATTERN}", instance="h:1"}}'
    )
    assert "increase(" not in query and "rate(" not in query
    assert "vllm:spec_decode_num_drafts_total" in NAME_PATTERN.replace("\\", "")
    assert "sglang:spec_verify_calls_total" in NAME_PATTERN.replace("\\", "")
    custom = range_query('{job="vllm", pod=~"decode-3"}', start, start)
    assert custom.endswith(', job="vllm", pod=~"decode-3"}[1s]')


def test_the_baseline_is_each_instances_last_scrape_at_or_before_the_start() -> None:
    """One range answer holds the baselines and the samples after them: each instance's
    baseline is its scrape at the time `scrape_time_query` gives, and a scrape without
    spec-decode series (an engine that shows them at first use) is there, with none."""
    start = datetime.fromtimestamp(T0, UTC)
    times = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"instance": LABELS["instance"]}, "value": [T0, str(T0 - 0.7)]},
        {"metric": {"instance": "lazy:8000"}, "value": [T0, str(T0 - 0.4)]}]}}  # fmt: skip
    scraped = scrape_times(times)
    assert scraped == {LABELS["instance"]: T0 - 0.7, "lazy:8000": T0 - 0.4}
    answer = matrix(
        ("vllm:spec_decode_num_drafts_total", LABELS,
         [(T0 - 1.7, 30.0), (T0 - 0.7, 42.0), (T0 + 0.3, 50.0)]),
        ("vllm:spec_decode_num_drafts_total", {**LABELS, "instance": "lazy:8000"},
         [(T0 + 0.6, 5.0)]),
    )  # fmt: skip
    found = scrapes_by_instance(answer, scraped=scraped)
    before, middle, after, began, ended = found[LABELS["instance"]].window(start)
    assert began.timestamp() == T0 - 0.7 and ended.timestamp() == T0 + 0.3
    assert [v.value for v in before.values()] == [42.0] and middle == []
    assert [v.value for v in after.values()] == [50.0]
    lazy_before, _, lazy_after, lazy_began, _ = found["lazy:8000"].window(start)
    assert lazy_began.timestamp() == T0 - 0.4 and lazy_before == {}
    assert [v.value for v in lazy_after.values()] == [5.0]
    # The points before the baseline are dropped; without one, none is.
    trimmed = found[LABELS["instance"]].since_baseline(start)
    assert [at.timestamp() for at, _ in trimmed.points] == [T0 - 0.7, T0 + 0.3]
    late = Scrapes(found[LABELS["instance"]].points[2:])
    assert late.since_baseline(start) == late


@pytest.mark.parametrize(
    ("text", "message"),
    [("job=\"x\"", "a selector is"), ('{__name__="x"}', "names no metric"), ("{}", "at least one"),
     ('{job="x" pod="y"}', "separated by commas"), ("{job=x}", 'label="value"')],
)  # fmt: skip
def test_bad_selectors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_selector(text)


def test_the_scrape_interval_is_the_median_gap_of_each_instances_up_samples() -> None:
    """One `up` series per instance over the last 30 s: one late scrape does not move its
    interval; an instance scraped once has none; the query asks `up` alone, raw."""
    query = scrape_spacing_query(instance_selector("10.0.0.1:8000"), 30)
    assert query == 'up{instance="10.0.0.1:8000"}[30s]'
    other = {**LABELS, "instance": "10.0.0.2:8000"}
    steady = [T0, T0 + 10, T0 + 20, T0 + 45, T0 + 55]  # gaps 10, 10, 25, 10
    answer = matrix(
        ("up", LABELS, [(stamp, 1.0) for stamp in steady]),
        ("up", other, [(T0 + 3, 1.0)]),
    )
    assert scrape_spacings(answer) == {"10.0.0.1:8000": 10.0}


def test_the_answer_becomes_the_chain_with_every_reset_counted() -> None:
    """Scrapes every 10 s; the engine restarts between the 2nd and 3rd sample (its `_created`
    moves on): 250 - 100 before, then 40 + (90 - 40) after."""
    drafts = [(T0 - 5, 100.0), (T0 + 5, 250.0), (T0 + 15, 40.0), (T0 + 25, 90.0)]
    created = [(T0 - 5, 1.0), (T0 + 5, 1.0), (T0 + 15, 2.0), (T0 + 25, 2.0)]
    answer = matrix(
        ("vllm:spec_decode_num_drafts_total", LABELS, drafts),
        ("vllm:spec_decode_num_drafts_created", LABELS, created),
        ("vllm:spec_decode_num_draft_tokens_total", LABELS, [(t, 3 * v) for t, v in drafts]),
        ("vllm:spec_decode_num_accepted_tokens_total", LABELS, [(t, 2 * v) for t, v in drafts]),
        ("process_cpu_seconds_total", LABELS, [(T0, 1.0)]),  # not ours: never read
    )
    scrapes = scrapes_of(answer)
    before, middle, after, began, ended = scrapes.window(datetime.fromtimestamp(T0, UTC))
    assert began == datetime.fromtimestamp(T0 - 5, UTC)  # the last sample at or before start
    assert ended == datetime.fromtimestamp(T0 + 25, UTC)
    result = build_result("http://10.0.0.1:8000/metrics", before, after, middle)
    assert result.data is not None and result.data.num_drafts == (250 - 100) + 40 + (90 - 40)
    assert result.data.acceptance_rate == 2 / 3 * 100
    assert (result.restarts, result.series_resets) == (1, 3)


def test_names_a_prometheus_2_stored_with_underscores_are_asked_for_and_read() -> None:
    """A Prometheus 2 that scraped SGLang's prometheus_client in OpenMetrics stores
    `sglang_spec_verify_calls_total` (kubernetes-sigs/inference-perf#600)."""
    assert "sglang_spec_verify_calls_total" in NAME_PATTERN.replace("\\", "")
    names = ("spec_verify_calls", "generation_tokens", "num_requests")
    steps = {"spec_verify_calls": (10.0, 30.0), "generation_tokens": (70.0, 190.0),
             "num_requests": (2.0, 6.0)}  # fmt: skip
    answer = matrix(
        *(
            (f"sglang_{name}_total", LABELS, [(T0 - 5, steps[name][0]), (T0 + 5, steps[name][1])])
            for name in names
        )
    )
    before, middle, after, _, _ = scrapes_of(answer).window(datetime.fromtimestamp(T0, UTC))
    result = build_result("http://10.0.0.1:8000/metrics", before, after, middle)
    assert result.engine == "sglang"
    assert result.data is not None and result.data.num_drafts == 20
    assert result.data.accepted_tokens == (190 - 70) - (6 - 2) - 20


def test_a_selector_that_matches_two_servers_is_refused_never_summed() -> None:
    other = {**LABELS, "instance": "10.0.0.2:8000"}
    answer = matrix(
        ("vllm:spec_decode_num_drafts_total", LABELS, [(T0, 1.0)]),
        ("vllm:spec_decode_num_drafts_total", other, [(T0, 1.0)]),
    )
    with pytest.raises(SourceError, match=r"the selector matches 2 servers: narrow it") as raised:
        scrapes_of(answer)
    assert "10.0.0." not in str(raised.value)  # never names them: they may be other teams'


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ('{job=~".+"}', 'matches labels exactly: job="value", not job=~'),
        ('{job!="x"}', "not job!="),
        ('{job!~"x"}', "not job!~"),
        ('{job=""}', "gives every label a value: job has none"),
    ],
)
def test_a_targets_selector_matches_labels_exactly(selector: str, message: str) -> None:
    """A regular expression or a negation would be an oracle on other teams' labels."""
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_target({"selector": selector})
    parse_target({"selector": '{job="vllm", pod="p-0"}'})


def test_error_answers_and_windows_before_the_first_sample() -> None:
    with pytest.raises(SourceError, match="Prometheus answered an error: query timed out"):
        scrapes_of({"status": "error", "errorType": "timeout", "error": "query timed out"})
    with pytest.raises(SourceError, match="'vector', not a matrix"):
        scrapes_of({"status": "success", "data": {"resultType": "vector", "result": []}})
    late = scrapes_of(matrix(("vllm:spec_decode_num_drafts_total", LABELS, [(T0 + 5, 1.0)])))
    with pytest.raises(SourceError, match="no sample at or before the window's start"):
        late.window(datetime.fromtimestamp(T0, UTC))


# --- against a real Prometheus server --------------------------------------------------------


def _query(prometheus: str, promql: str, at: float) -> dict[str, Any]:
    answer = clients.get(
        f"{prometheus}/api/v1/query", params={"query": promql, "time": at}, timeout=30
    )
    body: dict[str, Any] = answer.json()
    return body


def _scraped_after(prometheus: str, instance: str, moment: float) -> float | None:
    """The time of Prometheus' latest successful scrape of `instance` if it is at or after
    `moment` (a failed one, `up` 0, stores no sample of the server's series)."""
    promql = f'up{{instance="{instance}"}}[30s]'  # raw: each scrape's time and outcome
    result = _query(prometheus, promql, time.time())["data"]["result"]
    scraped = max((float(t) for r in result for t, up in r["values"] if up == "1"), default=None)
    return scraped if scraped is not None and scraped >= moment else None


def _has_sample_after(prometheus: str, instance: str, moment: float) -> bool | None:
    return True if _scraped_after(prometheus, instance, moment) is not None else None


@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.parametrize("engine", ["vllm", "tgi", "max", "fastdeploy"])
def test_a_window_read_from_a_real_prometheus_equals_the_direct_scrape(engine: str) -> None:
    """The simulator counts only requests; quiet seconds before and after the load let both
    ways see the same counts: the range query's raw samples, and the server's own /metrics.
    Histograms (TGI's, MAX's) and unlabelled counters (FastDeploy's) as Prometheus stores them."""
    args = ("--drafts-per-s", "0", "--seed", "4", "--instances", "2", "--engine", engine)
    with serve_simulator(*args) as simulator:
        instance = simulator.removeprefix("http://")
        with run_prometheus([instance]) as prometheus:
            wait_for(lambda: _has_sample_after(prometheus, instance, 0), "Prometheus' first scrape")
            direct_before = extract_spec_decode(clients.get(f"{simulator}/metrics").text)
            start = time.time()
            time.sleep(1.5)  # a scrape after the start, before the load
            with clients.client(base_url=simulator, timeout=30) as http:
                for index in range(20):
                    http.post("/v1/completions", json={"prompt": f"q{index}", "max_tokens": 32})
            # Two successful scrapes after the load, so the window holds one in between
            # whatever a busy machine made of the scrapes (one that timed out stores nothing).
            loaded = time.time()
            seen = wait_for(lambda: _scraped_after(prometheus, instance, loaded), "a scrape")
            wait_for(lambda: _scraped_after(prometheus, instance, seen + 0.001), "another one")
            end = time.time()
            direct_after = extract_spec_decode(clients.get(f"{simulator}/metrics").text)
            selector = instance_selector(instance)
            scraped = scrape_times(_query(prometheus, scrape_time_query(selector), start))
            answer = _query(
                prometheus,
                range_query(selector, datetime.fromtimestamp(min(scraped.values()) - 0.001, UTC),
                            datetime.fromtimestamp(end, UTC)),
                end,
            )  # fmt: skip
    (scrapes,) = scrapes_by_instance(answer, scraped=scraped).values()
    before, middle, after, _, _ = scrapes.window(datetime.fromtimestamp(start, UTC))
    through_prometheus = build_result("u", before, after, middle)
    direct = build_result("u", direct_before, direct_after)
    assert through_prometheus.data is not None and direct.data is not None
    assert through_prometheus.engine == direct.engine == engine
    assert through_prometheus.data == direct.data
    assert (direct.data.acceptance_length or 0) > 1
    assert len(middle) >= 1  # the scrapes in between, each read raw
    # The witnesses too, where the engine has them: the same throughput both ways.
    assert through_prometheus.throughput == direct.throughput
    if engine == "vllm":
        assert direct.throughput is not None and direct.throughput.finished_requests == 20


@contextmanager
def collector_reading_prometheus(
    instance: str, tmp_path: Path
) -> Iterator[tuple[str, httpx.Client]]:
    """A real Prometheus scraping `instance` every second (once it has), and a collector that
    reads it (in this process); yields the collector's URL and a client of it."""
    with run_prometheus([instance]) as prometheus:
        wait_for(lambda: _has_sample_after(prometheus, instance, 0), "Prometheus' first scrape")
        with (
            serve_collector(f"sqlite:///{tmp_path}/p.db", prometheus_url=prometheus) as collector,
            clients.client(base_url=collector, timeout=120) as api,
        ):
            yield collector, api


@pytest.mark.slow
@pytest.mark.prometheus
def test_windows_read_from_prometheus_live_and_after_the_fact(tmp_path: Path) -> None:
    """A Prometheus-source window equals a scraped window over the same run; one created a
    while after the run, with the run's start and stop times, equals the live one."""
    with serve_simulator("--drafts-per-s", "0", "--seed", "9") as simulator:
        instance = simulator.removeprefix("http://")
        with run_prometheus([instance]) as prometheus:
            wait_for(lambda: _has_sample_after(prometheus, instance, 0), "Prometheus' first scrape")
            database = f"sqlite:///{tmp_path}/p.db"
            with serve_collector(database, prometheus_url=prometheus) as collector:
                api = clients.client(base_url=collector, timeout=120)
                assert api.post("/windows/direct/start", json={"targets": [instance]}).is_success
                live = {"targets": [instance], "source": "prometheus"}
                started = api.post("/windows/live/start", json=live)
                assert started.status_code == 201, started.text
                time.sleep(1.5)
                with clients.client(base_url=simulator, timeout=30) as http:
                    for index in range(16):
                        http.post("/v1/completions", json={"prompt": f"q{index}", "max_tokens": 24})
                time.sleep(1.5)
                while_open = api.get("/windows/live/samples").json()["series"][0]["points"]
                direct = api.post("/windows/direct/stop").json()["targets"][0]["result"]
                stopped = api.post("/windows/live/stop")  # waits for a sample after the stop
                assert stopped.status_code == 200, stopped.text
                window = stopped.json()
                through_prometheus = window["targets"][0]["result"]
                time.sleep(2)  # the run is over; now measure it after the fact
                past = {**live, "at": window["started_at"]}
                assert api.post("/windows/later/start", json=past).status_code == 201
                later = api.post("/windows/later/stop", json={"at": window["stopped_at"]})
                after_the_fact = later.json()["targets"][0]["result"]
                refused = api.post(
                    "/windows/x/start", json={"targets": [instance], "at": window["started_at"]}
                )
                samples = api.get("/windows/live/samples").json()
                one_call = subprocess.run(
                    [*specdec_command(), "run", "--server", collector, "--id", "cli",
                     "--source", "prometheus", "--target", instance,
                     "--from", window["started_at"], "--to", window["stopped_at"]],
                    capture_output=True, text=True, timeout=120, cwd=tmp_path,
                )  # fmt: skip
    assert direct["status"] == through_prometheus["status"] == "ok", through_prometheus
    assert through_prometheus["data"] == direct["data"]
    assert after_the_fact["data"] == direct["data"]
    # Over Prometheus' own sample times: the seconds between the window's first and last.
    plain = through_prometheus["throughput"]
    assert plain["generated_tokens"] == direct["throughput"]["generated_tokens"]
    assert plain["finished_requests"] == 16
    first, last = (datetime.fromisoformat(points_at) for points_at in (
        samples["series"][0]["points"][0]["taken_at"], samples["series"][0]["points"][-1]["taken_at"]
    ))  # fmt: skip
    assert plain["seconds"] == (last - first).total_seconds()
    assert plain["generated_tokens_per_second"] == plain["generated_tokens"] / plain["seconds"]
    assert one_call.returncode == 0, one_call.stderr
    drafts_row = f"{'Drafts':<45} {direct['data']['num_drafts']}"
    assert drafts_row in one_call.stdout.splitlines()
    # Its files too, in a folder of the window's own, saying which window they are of.
    (written,) = (tmp_path / "specdec-results" / "cli").glob("spec_decode_*.json")
    kept = json.loads(written.read_text())
    assert kept["data"] == direct["data"] and kept["window"]["id"] == "cli"
    assert f"specdec: wrote {written}" in one_call.stderr
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "at"]
    # While open, the timeline is Prometheus' samples so far; once closed, the ones stored.
    assert while_open[0]["phase"] == "before" and len(while_open) >= 3
    assert while_open[-1]["num_drafts"] == direct["data"]["num_drafts"]
    points = samples["series"][0]["points"]
    assert points[0]["phase"] == "before" and points[-1]["phase"] == "after"
    assert len(points) >= 4  # Prometheus' scrapes in between, each a sample of the window


@pytest.mark.slow
@pytest.mark.prometheus
def test_a_stop_looks_for_its_scrape_when_it_is_due() -> None:
    """Scraped every 3 s, a stop right after a scrape waits for the next one: it looks at
    once and again when that scrape is due, not every POLL_S (each look queries every
    instance); the scrape it waited for ends the window."""
    looks: list[str] = []

    async def seen(request: httpx.Request) -> None:
        if request.url.path.endswith("/api/v1/query"):
            looks.append(parse_qs(request.content.decode())["query"][0])

    async def stop(prometheus: str, start: datetime, end: datetime) -> Any:
        settings = Settings(prometheus_url=prometheus, prometheus_wait_max_s=30)
        async with clients.async_client(event_hooks={"request": [seen]}) as client:
            (read,) = await PrometheusAPI(settings, client).read_many(
                [instance_selector(instance)], start, end, wait=True
            )
        return read

    with serve_simulator("--drafts-per-s", "0") as simulator:
        instance = simulator.removeprefix("http://")
        with run_prometheus([instance], interval_s=3.0) as prometheus:
            first = wait_for(lambda: _scraped_after(prometheus, instance, 0), "a first scrape")
            scraped = wait_for(
                lambda: _scraped_after(prometheus, instance, first + 1), "a second scrape"
            )
            start = datetime.now(UTC)
            read = asyncio.run(stop(prometheus, start, start + timedelta(seconds=0.1)))
    assert isinstance(read, PrometheusRead) and read.note is None, read
    # The next scrape, not the one before the stop. Prometheus keeps to its ticker, so a scrape
    # that went out late (a loaded machine) is followed by one less than 3 s after it.
    assert read.scrapes.points[-1][0].timestamp() >= scraped + 3.0 / 2
    look = scrape_time_query(instances_selector([instance]))  # a window's instances together
    assert 1 <= looks.count(look) <= 3, looks  # one every POLL_S would be about 6


@pytest.mark.slow
@pytest.mark.prometheus
def test_prometheus_failures_are_na_with_their_reason(tmp_path: Path) -> None:
    """A target Prometheus does not scrape, and a Prometheus that does not answer."""
    with serve_simulator("--drafts-per-s", "0") as simulator:
        instance = simulator.removeprefix("http://")
        with run_prometheus([instance]) as prometheus:
            wait_for(lambda: _has_sample_after(prometheus, instance, 0), "Prometheus' first scrape")
            gone = f"http://127.0.0.1:{free_port()}"
            for url, target, reason in (
                (prometheus, "10.9.9.9:8000",
                 'Prometheus holds no spec-decode series for {instance="10.9.9.9:8000"}'),
                (gone, instance, f"Failed to query Prometheus at {gone}: ConnectError"),
            ):  # fmt: skip
                database = f"sqlite:///{tmp_path}/{free_port()}.db"
                settings = {"prometheus_url": url, "prometheus_wait_max_s": 1}
                with serve_collector(database, **settings) as collector:
                    api = clients.client(base_url=collector, timeout=60)
                    body = {"targets": [target], "source": "prometheus"}
                    assert api.post("/windows/f/start", json=body).status_code == 201
                    result = api.post("/windows/f/stop").json()["targets"][0]["result"]
                assert result["status"] == "na"
                assert result["error"].startswith(f"[before] {reason}"), result["error"]


@pytest.mark.slow
@pytest.mark.prometheus
def test_engine_restarts_inside_a_window_read_from_prometheus_are_counted_in_full(
    tmp_path: Path,
) -> None:
    """Engine 0 restarts after every 4th request (its counters fall to 0, its `_created`
    moves on). Requests 1.3 s apart are each scraped before the next restart: the window
    counts every draft the client saw streamed, through two restarts, up to the last one."""
    with serve_simulator(
        "--drafts-per-s", "0", "--instances", "2", "--reset-after", "4"
    ) as simulator:
        instance = simulator.removeprefix("http://")
        with collector_reading_prometheus(instance, tmp_path) as (_, api):
            body = {"targets": [instance], "source": "prometheus"}
            assert api.post("/windows/restarts/start", json=body).status_code == 201
            time.sleep(1.3)
            steps = streamed_steps(simulator, 8, pause_s=1.3)
            # Stopped at once: the last request is counted only if the stop waits for
            # Prometheus' next scrape, as it does (up to two scrape intervals).
            result = api.post("/windows/restarts/stop").json()["targets"][0]["result"]
    assert result["status"] == "ok", result
    assert result["data"]["num_drafts"] == len(steps)
    assert result["data"]["accepted_tokens"] == sum(step - 1 for step in steps)
    assert result["restarts"] == 2
    assert "notes" not in result or not any("none at or after" in n for n in result["notes"])


def test_prometheus_credentials_never_appear_in_an_error() -> None:
    settings = Settings(prometheus_url="http://prom:9090", prometheus_bearer_token="tok-zz-secret")
    source = PrometheusAPI(settings, clients.async_client())
    error = source._failed("a proxy echoed Authorization: Bearer tok-zz-secret")
    assert "tok-zz-secret" not in str(error) and "[redacted]" in str(error)
    basic = PrometheusAPI(
        Settings(
            prometheus_url="http://p", prometheus_username="u", prometheus_password="pw-secret1"
        ),
        clients.async_client(),
    )
    assert basic.headers["Authorization"] == "Basic dTpwdy1zZWNyZXQx"  # base64 of u:pw-secret1
    assert "pw-secret1" not in str(basic._failed("echo pw-secret1"))


@pytest.mark.slow
@pytest.mark.prometheus
def test_a_stop_that_gets_no_later_sample_computes_with_what_is_there_and_says_so(
    tmp_path: Path,
) -> None:
    """The server fails before the stop: no sample at or after it will come. The stop waits
    two scrape intervals, then computes with the samples Prometheus holds, and says so."""
    with serve_metrics(body=drafts_payload(10)) as server:
        instance = server.target
        with collector_reading_prometheus(instance, tmp_path) as (_, api):
            body = {"targets": [instance], "source": "prometheus"}
            assert api.post("/windows/gone/start", json=body).status_code == 201
            server.replace(drafts_payload(30))
            server.wait_served()  # by Prometheus' scrape
            server.status = 503  # every later scrape fails
            result = api.post("/windows/gone/stop").json()["targets"][0]["result"]
    assert result["status"] == "ok" and result["data"]["num_drafts"] == 20
    (note,) = [n for n in result["notes"] if "none at or after the stop came within" in n]
    assert note.startswith("computed with the samples Prometheus held: ")


def test_a_window_ends_at_its_first_scrape_at_or_after_the_stop() -> None:
    drafts = [(T0 - 1, 10.0), (T0 + 1, 20.0), (T0 + 2, 35.0), (T0 + 3, 50.0)]
    scrapes = scrapes_of(matrix(("vllm:spec_decode_num_drafts_total", LABELS, drafts)))
    ended = scrapes.until(datetime.fromtimestamp(T0 + 1.5, UTC))
    assert [at.timestamp() for at, _ in ended.points] == [T0 - 1, T0 + 1, T0 + 2]
    assert scrapes.until(datetime.fromtimestamp(T0 + 9, UTC)) == scrapes  # none after


@pytest.mark.parametrize(
    ("body", "reason"),
    [(b"<html>bad gateway</html>", "HTTP 200, not a JSON answer"),
     (b"[1, 2]", "HTTP 200, not a JSON object"),
     (b'{"status": "error", "error": "query timed out"}', "Prometheus answered: query timed out"),
     (b'{"status": "success", "data": {"resultType": "vector", "result": [{"value": 7}]}}',
      "not [time, value]")],
)  # fmt: skip
@pytest.mark.anyio
@respx.mock(using="httpx")
async def test_a_hostile_prometheus_answer_is_each_targets_failure(
    respx_mock: respx.MockRouter, body: bytes, reason: str
) -> None:
    """Whatever Prometheus answers, a stop reads a failure with its reason, never raises."""
    respx_mock.post("http://prom.test/api/v1/query").mock(
        return_value=httpx.Response(200, content=body)
    )
    start = datetime.now(UTC) - timedelta(seconds=60)
    async with clients.async_client() as client:
        api = PrometheusAPI(Settings(prometheus_url="http://prom.test"), client)
        reads = await api.read_many(
            [instance_selector("10.0.0.1:8000"), instance_selector("10.0.0.2:8000")],
            start, start + timedelta(seconds=30), wait=False,
        )  # fmt: skip
    assert [type(read) for read in reads] == [Failure, Failure]
    assert all(reason in read.text for read in reads if isinstance(read, Failure)), reads


@pytest.mark.parametrize(
    ("values", "reason"),
    [([[T0, "many"]], "Prometheus answered a value that is not a number: 'many'"),
     ([[T0, "-3"]], "not a count: counter value -3 is not a finite count"),
     ([5], "Prometheus answered a sample that is not [time, value]: 5"),
     ([[T0]], "Prometheus answered a sample that is not [time, value]: [")],
)  # fmt: skip
@pytest.mark.anyio
@respx.mock(using="httpx")
async def test_a_hostile_sample_in_a_range_answer_is_the_targets_failure(
    respx_mock: respx.MockRouter, values: list[Any], reason: str
) -> None:
    """The range query's samples are checked as a scrape's are: a bad one fails its target
    with the reason, never the stop."""

    def answer(request: httpx.Request) -> httpx.Response:
        query = parse_qs(request.content.decode())["query"][0]
        metric = {"__name__": "vllm:spec_decode_num_drafts_total", **LABELS}
        if query.startswith("{") and query.endswith("s]"):  # the range query
            data = {"resultType": "matrix", "result": [{"metric": metric, "values": values}]}
        else:
            data = {"resultType": "vector", "result": []}
        return httpx.Response(200, json={"status": "success", "data": data})

    respx_mock.post("http://prom.test/api/v1/query").mock(side_effect=answer)
    start = datetime.fromtimestamp(T0 - 30, UTC)
    async with clients.async_client() as client:
        api = PrometheusAPI(Settings(prometheus_url="http://prom.test"), client)
        (read,) = await api.read_many(
            [instance_selector(LABELS["instance"])], start, start + timedelta(seconds=60), False
        )
    assert isinstance(read, Failure) and reason in read.text, read


@pytest.mark.parametrize(
    "labels",
    [{**LABELS, "instance": "10.0.0.1:8000\x00"}, {**LABELS, "job": "vllm\n"},
     {**LABELS, "model_name": "m\x1b[2J"}, {**LABELS, "engine": 0}, {**LABELS, "instance": ["x"]}],
)  # fmt: skip
def test_a_series_whose_labels_are_not_printable_text_is_refused(labels: dict[str, Any]) -> None:
    """Its target labels too, though the series' key leaves them out."""
    answer = matrix(("vllm:spec_decode_num_drafts_total", labels, [(T0, 1.0)]))
    with pytest.raises(SourceError, match=r"labels are not (printable )?text"):
        scrapes_of(answer)
