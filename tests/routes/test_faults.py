"""The fault matrix: bad targets, crashes, SIGTERM and load, against the real service."""

import asyncio
import contextlib
import gzip
import itertools
import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import clients
from tests.support.collector import run_collector, serve_collector, watching_health
from tests.support.metrics_server import serve_metrics, serve_reset_mid_body
from tests.support.payloads import drafts_payload, fixture

SPEC = "vllm:spec_decode_num_drafts_total"


@pytest.mark.slow
def test_bad_targets_give_na_reasons_while_the_service_answers(
    database_url: str, tmp_path: Path
) -> None:
    nospec = fixture("vllm_v1_dp1_nospec.txt").encode()
    bodies: dict[str, dict[str, Any]] = {
        "html": {"body": b"<html>Sign in</html>", "content_type": "text/html; charset=utf-8"},
        "huge": {"body": b"# padding of a huge answer\n" * 100_000},  # 2.7 MB over a 1 MiB cap
        "bomb": {
            "body": gzip.compress(b"\n" * (256 * 1024 * 1024)),
            "extra_headers": {"Content-Encoding": "gzip"},
        },
        "latin1": {"body": nospec + f'{SPEC}{{model_name="caf\xe9"}} 1\n'.encode("latin-1")},
        "cut": {"body": nospec + f'{SPEC}{{engine="0"}} 4862'.encode()},
        "nan": {"body": nospec + f"{SPEC} NaN\n".encode()},
        "inf": {"body": nospec + f"{SPEC} +Inf\n".encode()},
        "negative": {"body": nospec + f"{SPEC} -5\n".encode()},
        "twice": {"body": nospec + f'{SPEC}{{engine="0"}} 5\n{SPEC}{{engine="0"}} 6\n'.encode()},
        "redirect": {
            "status": 302,
            "extra_headers": {"Location": "http://169.254.169.254/latest/meta-data/"},
        },
        "slow": {"body": nospec, "delay_s": 3.0},
    }
    settings = {"scrape_timeout_s": 1, "max_metrics_bytes": 1 << 20}
    with ExitStack() as stack:
        collector = stack.enter_context(serve_collector(database_url, **settings))
        servers = {
            name: stack.enter_context(serve_metrics(**settings))
            for name, settings in bodies.items()
        }
        reset = stack.enter_context(serve_reset_mid_body())
        api = clients.client(base_url=collector, timeout=30)
        targets = [server.target for server in servers.values()] + [reset]
        with watching_health(collector) as health:
            started = api.post("/windows/faults/start", json={"targets": targets})
        assert started.status_code == 201
        errors = {t["target"]: t["before_error"] for t in started.json()["targets"]}
        stopped = api.post("/windows/faults/stop").json()
    fetch = {
        name: f"Failed to fetch metrics from {server.url}: " for name, server in servers.items()
    }
    expected = {
        "html": fetch["html"] + "not a Prometheus exposition: text/html",
        "huge": fetch["huge"] + "answer larger than 1048576 bytes",
        "bomb": fetch["bomb"] + "answer larger than 1048576 bytes",
        "cut": fetch["cut"] + "payload cut off mid-line (no final newline)",
        "nan": fetch["nan"] + f"counter value NaN is not a finite count: {SPEC}",
        "inf": fetch["inf"] + f"counter value +Inf is not a finite count: {SPEC}",
        "negative": fetch["negative"] + f"counter value -5 is not a finite count: {SPEC}",
        "twice": fetch["twice"] + f'series given twice: {SPEC}{{engine="0"}}',
        "redirect": "Metrics endpoint returned HTTP 302",
        "slow": fetch["slow"] + "timed out after 1 s",
    }
    for name, error in expected.items():
        assert errors[servers[name].target] == error, name
    assert errors[servers["latin1"].target].startswith(fetch["latin1"] + "answer is not UTF-8")
    assert errors[reset].startswith(f"Failed to fetch metrics from http://{reset}/metrics: ")
    assert "RemoteProtocolError" in errors[reset] or "ReadError" in errors[reset]
    for target in stopped["targets"]:
        assert target["result"]["status"] == "na"
        assert target["result"]["error"].startswith("[before] ")
    assert health and set(health) == {200}


@pytest.mark.slow
def test_a_stop_killed_midway_is_finished_by_its_retry(database_url: str, tmp_path: Path) -> None:
    with (
        run_collector(database_url, tmp_path) as collector,
        serve_metrics(body=drafts_payload(100)) as server,
    ):
        url = collector.base_url
        assert (
            clients.post(
                f"{url}/windows/half-stop/start", json={"targets": [server.target]}, timeout=30
            ).status_code
            == 201
        )
        server.replace(drafts_payload(400))
        server.delay_s = 3.0
        seen = server.count()
        thread = threading.Thread(
            target=lambda: _quietly(
                lambda: clients.post(f"{url}/windows/half-stop/stop", timeout=30)
            )
        )
        thread.start()
        while server.count() == seen:  # the stop is scraping
            time.sleep(0.01)
        collector.kill()
        thread.join()
        server.delay_s = 0
        collector.start()
        assert (
            clients.get(f"{collector.base_url}/windows/half-stop", timeout=30).json()["state"]
            == "open"
        )
        retried = clients.post(f"{collector.base_url}/windows/half-stop/stop", timeout=30)
    assert retried.status_code == 200
    result = retried.json()["targets"][0]["result"]
    assert result["status"] == "ok"
    assert result["data"]["num_drafts"] == 300


def _quietly(call: Any) -> None:
    with contextlib.suppress(httpx.TransportError):  # the collector died under the call
        call()


@pytest.mark.slow
def test_sigterm_lets_the_call_in_flight_finish(database_url: str, tmp_path: Path) -> None:
    with (
        run_collector(database_url, tmp_path) as collector,
        serve_metrics(body=drafts_payload(100)) as server,
    ):
        url = collector.base_url
        assert (
            clients.post(
                f"{url}/windows/term/start",
                json={"targets": [server.target], "sample_interval_s": 0.5},
                timeout=30,
            ).status_code
            == 201
        )
        server.replace(drafts_payload(700))
        server.delay_s = 2.0
        seen = server.count()
        answer: list[httpx.Response] = []
        thread = threading.Thread(
            target=lambda: answer.append(clients.post(f"{url}/windows/term/stop", timeout=30))
        )
        thread.start()
        while server.count() == seen:
            time.sleep(0.01)
        assert collector.process is not None
        collector.process.send_signal(signal.SIGTERM)
        thread.join()
        exit_code = collector.process.wait(timeout=30)
        server.delay_s = 0
        collector.start()
        after_restart = clients.get(f"{collector.base_url}/windows/term", timeout=30).json()
    # uvicorn shuts down gracefully, then lets the signal end the process as usual.
    assert exit_code in (0, -signal.SIGTERM)
    assert "Application shutdown complete." in collector.stderr_text
    assert answer[0].status_code == 200
    assert answer[0].json()["targets"][0]["result"]["data"]["num_drafts"] == 600
    assert after_restart["state"] == "closed"
    assert after_restart["targets"][0]["result"] == answer[0].json()["targets"][0]["result"]


@pytest.mark.slow
def test_concurrent_clients_get_no_5xx_and_every_window_is_accounted_for(
    database_url: str, tmp_path: Path
) -> None:
    """The bounded version of `make bench`'s load run: 50 clients at once, a window each, on 1
    to 20 targets (a fixed amount of work, not a fixed time, so a slow machine checks as much)."""
    with ExitStack() as stack:
        collector = stack.enter_context(run_collector(database_url, tmp_path))
        servers = [stack.enter_context(serve_metrics(body=drafts_payload(100))) for _ in range(20)]
        targets = [server.target for server in servers]
        statuses: list[int] = []
        finished: list[str] = []
        counter = itertools.count()

        async def client() -> None:
            number = next(counter)
            window_id = f"load-{number}"
            async with clients.async_client(base_url=collector.base_url, timeout=60) as http:
                for call in (
                    http.post(
                        f"/windows/{window_id}/start", json={"targets": targets[: 1 + number % 20]}
                    ),
                    http.get(f"/windows/{window_id}"),
                    http.post(f"/windows/{window_id}/stop"),
                    http.get(f"/windows/{window_id}/report"),
                ):
                    statuses.append((await call).status_code)
            finished.append(window_id)

        async def run() -> None:
            await asyncio.gather(*(client() for _ in range(50)))

        asyncio.run(run())
        api = clients.client(base_url=collector.base_url, timeout=60)
        closed = [api.get(f"/windows/{window_id}").json() for window_id in finished]
    assert statuses and not [s for s in statuses if s >= 500]
    assert set(statuses) == {200, 201}
    assert len(finished) == 50
    for window in closed:
        assert window["state"] == "closed"
        assert all(
            t["result"]["status"] == "na" for t in window["targets"]
        )  # same counters: no activity
