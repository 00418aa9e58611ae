"""Windows end to end: `specdec serve` over real sockets against real `/metrics` servers."""

import asyncio
import csv
import io
import re
import threading
import time
from contextlib import ExitStack, suppress
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import clients
from tests.support.collector import Team, run_collector
from tests.support.metrics_server import MetricsServer, free_port, serve_metrics
from tests.support.payloads import InstanceCounters, fixture, vllm_payload

SEED_BEFORE = [
    InstanceCounters(drafts=100, draft_tokens=500, accepted_per_pos=[80, 60, 50, 40, 30])
]
SEED_AFTER = [
    InstanceCounters(drafts=263, draft_tokens=1315, accepted_per_pos=[242, 222, 212, 202, 191])
]


def expected_data(before: list[InstanceCounters], after: list[InstanceCounters]) -> dict[str, Any]:
    """The `data` block computed with exact fractions from the counters the test served."""
    drafts = sum(e.drafts for e in after) - sum(e.drafts for e in before)
    tokens = sum(e.draft_tokens for e in after) - sum(e.draft_tokens for e in before)
    positions = len(after[0].accepted_per_pos)
    per_pos = [
        sum(e.accepted_per_pos[p] for e in after) - sum(e.accepted_per_pos[p] for e in before)
        for p in range(positions)
    ]
    accepted = sum(per_pos)
    return {
        "num_drafts": drafts,
        "draft_tokens": tokens,
        "accepted_tokens": accepted,
        # Full floats, as AISBench writes them (to the last bit of a float's precision).
        "acceptance_rate": pytest.approx(float(Fraction(accepted * 100, tokens)), rel=1e-15),
        "acceptance_length": pytest.approx(float(1 + Fraction(accepted, drafts)), rel=1e-15),
        "per_position_acceptance_rates": {
            str(p): float(Fraction(per_pos[p], drafts)) for p in range(positions)
        },
    }


def raw_of(counters: list[InstanceCounters]) -> dict[str, Any]:
    positions = len(counters[0].accepted_per_pos)
    return {
        "num_drafts": sum(e.drafts for e in counters),
        "num_draft_tokens": sum(e.draft_tokens for e in counters),
        "num_accepted_tokens": sum(sum(e.accepted_per_pos) for e in counters),
        "accepted_per_pos": {
            str(p): sum(e.accepted_per_pos[p] for e in counters) for p in range(positions)
        },
    }


def run_window(
    api: httpx.Client, server: MetricsServer, window_id: str = "run-1"
) -> dict[str, Any]:
    server.set_text(vllm_payload(SEED_BEFORE))
    started = api.post(f"/windows/{window_id}/start", json={"targets": [server.target]})
    assert started.status_code == 201, started.text
    server.set_text(vllm_payload(SEED_AFTER))
    stopped = api.post(f"/windows/{window_id}/stop")
    assert stopped.status_code == 200, stopped.text
    body: dict[str, Any] = stopped.json()
    return body


def test_complete_window_gives_the_seed_numbers(api: httpx.Client) -> None:
    with serve_metrics() as server:
        server.set_text(vllm_payload(SEED_BEFORE))
        started = api.post(
            "/windows/run-1/start", json={"targets": [server.target], "labels": {"team": "infra"}}
        )
        assert started.status_code == 201
        window = started.json()
        assert window["state"] == "open"
        assert window["labels"] == {"team": "infra"}
        assert window["targets"][0]["before"] == raw_of(SEED_BEFORE)
        assert api.get(f"/windows/run-1/results/{server.target}").status_code == 409

        server.set_text(vllm_payload(SEED_AFTER))
        stopped = api.post("/windows/run-1/stop")
    assert stopped.status_code == 200
    assert stopped.json()["state"] == "closed"
    assert stopped.json()["targets"][0]["before"] == raw_of(SEED_BEFORE)

    result = api.get(f"/windows/run-1/results/{server.target}").json()
    assert result == {
        "status": "ok",
        "url": server.url,
        "error": None,
        "data": expected_data(SEED_BEFORE, SEED_AFTER),
        "raw": {"before": raw_of(SEED_BEFORE), "after": raw_of(SEED_AFTER)},
        "engine": "vllm",
        "exact": True,
        "notes": [],
        "samples": {"taken": 0, "failed": 0},
        "restarts": 0,
        "series_resets": 0,
        "overlaps": {
            "windows": [],
            "more_windows": {"windows": 0, "seconds": 0.0},
            "other_teams": {"windows": 0, "seconds": 0.0},
        },
        # Beside AISBench's keys: the series' model, and drafts by tokens accepted (every
        # draft 5 long: 163 - 162 accepted none, 162 - 161 four, 161 all five).
        "models": ["meta-llama/Llama-3.1-8B-Instruct"],
        "accepted_distribution": {"0": 1, "1": 0, "2": 0, "3": 0, "4": 1, "5": 161},
    }
    # The design's worked example, as AISBench's own file has it.
    assert result["data"]["acceptance_rate"] == 99.2638036809816
    assert result["data"]["acceptance_length"] == 5.96319018404908
    assert result["data"]["per_position_acceptance_rates"]["4"] == 0.9877300613496932  # 161/163

    # The same figures as CSV, one row per target.
    (row,) = csv.DictReader(io.StringIO(api.get("/windows/run-1/report?format=csv").text))
    assert (row["target"], row["status"], row["num_drafts"]) == (server.target, "ok", "163")
    assert float(row["acceptance_length"]) == result["data"]["acceptance_length"]
    # The example's server generated nothing (its witnesses did not move): no throughput.
    assert row["seconds"] == row["generated_tokens"] == ""

    report = api.get("/windows/run-1/report")
    assert report.headers["content-type"].startswith("text/plain")
    title = f"========== Speculative Decoding Metrics  [{server.target}] =========="
    assert report.text == "\n".join(
        [
            "",
            "=" * len(title),
            title,
            "=" * len(title),
            "Acceptance rate (%)                           99.26",
            "Acceptance length                             5.96",
            "Drafts                                        163",
            "Draft tokens                                  815",
            "Accepted tokens                               809",
            "Per-position acceptance rates                 "
            "{0: 0.9939, 1: 0.9939, 2: 0.9939, 3: 0.9939, 4: 0.9877}",
            "",
        ]
    )
    got = api.get("/windows/run-1").json()
    assert got["targets"][0]["result"] == result
    assert got["stopped_at"] is not None


def test_repeated_stop_returns_the_stored_result_and_scrapes_nothing(api: httpx.Client) -> None:
    with serve_metrics() as server:
        first = run_window(api, server)
        scrapes = server.count()
        server.status = 500  # a new scrape would now fail
        again = api.post("/windows/run-1/stop")
        assert again.status_code == 200
        assert again.json() == first
        assert server.count() == scrapes == 2


def test_start_retry_returns_200_without_scraping(api: httpx.Client) -> None:
    with serve_metrics(body=vllm_payload(SEED_BEFORE).encode()) as server:
        body = {"targets": [server.target]}
        assert api.post("/windows/w/start", json=body).status_code == 201
        retry = api.post("/windows/w/start", json={"targets": [f"http://{server.target}/metrics"]})
        assert retry.status_code == 200
        assert retry.json()["targets"][0]["before"] == raw_of(SEED_BEFORE)
        assert server.count() == 1


def test_a_start_opens_one_connection_to_each_server_new_to_the_collector(
    api: httpx.Client,
) -> None:
    """Opened as the targets are checked; the start's scrapes, then its stop's, take them."""
    payload = vllm_payload(SEED_BEFORE).encode()
    with serve_metrics(body=payload) as a, serve_metrics(body=payload) as b:
        started = api.post("/windows/fresh/start", json={"targets": [a.target, b.target]})
        assert started.status_code == 201
        assert api.post("/windows/fresh/stop").status_code == 200
    assert (a.connections, a.count(), b.connections, b.count()) == (1, 2, 1, 2)


def test_twenty_concurrent_starts_create_one_window(team: Team) -> None:
    with serve_metrics(body=vllm_payload(SEED_BEFORE).encode(), delay_s=0.3) as server:

        async def race() -> list[int]:
            async with clients.async_client(
                base_url=team.base_url, headers=team.headers, timeout=30
            ) as client:
                answers = await asyncio.gather(
                    *(
                        client.post("/windows/race/start", json={"targets": [server.target]})
                        for _ in range(20)
                    )
                )
            return sorted(answer.status_code for answer in answers)

        assert asyncio.run(race()) == [200] * 19 + [201]
        assert server.count() == 1


def test_conflicts_and_unknown_windows(api: httpx.Client) -> None:
    with serve_metrics() as server, serve_metrics() as other:
        run_window(api, server, "done")
        server.set_text(vllm_payload(SEED_BEFORE))
        again = api.post("/windows/done/start", json={"targets": [server.target]})
        assert again.status_code == 409
        assert again.json()["detail"] == "window done is already stopped"

        assert api.post("/windows/open/start", json={"targets": [server.target]}).status_code == 201
        clash = api.post("/windows/open/start", json={"targets": [other.target]})
        assert clash.status_code == 409
        assert (
            clash.json()["detail"]
            == f"window open already exists with other targets: {server.target}"
        )
    missing = api.post("/windows/nope/stop")
    assert missing.status_code == 404
    assert missing.json()["detail"] == "window nope not found"
    assert api.get("/windows/nope").status_code == 404
    assert api.get("/windows/nope/report").status_code == 404
    assert api.get("/windows/done/results/10.0.0.9:1").status_code == 404


@pytest.mark.parametrize(
    ("path", "body", "field", "text"),
    [
        ("/windows/bad-1/start", {"targets": []}, ["body", "targets"], "at least one target"),
        ("/windows/bad-2/start", {"targets": ["ftp://h:21/m"]}, ["body", "targets"], "scheme 'ftp'"),
        ("/windows/bad-3/start", {"targets": ["h:70000"]}, ["body", "targets"], "outside 1-65535"),
        ("/windows/bad-4/start", {"targets": ["h:1"], "labels": {"a": 1}}, ["body", "labels", "a"], "string"),
        ("/windows/bad-5/start", {"targets": ["h:1"], "sample_interval_s": 0.1}, ["body", "sample_interval_s"], "0.25"),
        ("/windows/bad-6/start", {"targets": [{"host_ip": "h"}]}, ["body", "targets"], "host_port"),
        ("/windows/bad-7/start", {}, ["body", "targets"], "at least one target"),
        ("/windows/" + "a" * 300 + "/start", {"targets": ["h:1"]}, ["path", "window_id"], "128"),
        ("/windows/-lead/start", {"targets": ["h:1"]}, ["path", "window_id"], "pattern"),
    ],
)  # fmt: skip
def test_bad_input_is_a_422_naming_the_field_and_stores_nothing(
    api: httpx.Client, path: str, body: dict[str, Any], field: list[str], text: str
) -> None:
    answer = api.post(path, json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()["detail"][0]
    assert error["loc"][: len(field)] == field
    assert text in error["msg"]
    window_id = path.split("/")[2]
    if len(window_id) <= 128 and not window_id.startswith("-"):
        assert api.get(f"/windows/{window_id}").status_code == 404
    assert api.get("/healthz").status_code == 200


def test_malformed_json_is_a_422_naming_the_body(api: httpx.Client) -> None:
    answer = api.post(
        "/windows/x/start", content=b'{"targets": [', headers={"content-type": "application/json"}
    )
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"][0] == "body"
    assert answer.json()["detail"][0]["type"] == "json_invalid"
    assert api.get("/windows/x").status_code == 404
    assert api.get("/healthz").status_code == 200


def test_aisbench_models_list_and_duplicate_targets(api: httpx.Client) -> None:
    with serve_metrics(body=vllm_payload(SEED_BEFORE).encode()) as server:
        models = [
            {
                "abbr": "vllm-api",
                "host_ip": "127.0.0.1",
                "host_port": server.port,
                "max_out_len": 512,
            },
            f"127.0.0.1:{server.port}",
        ]
        window = api.post("/windows/ais/start", json={"models": models}).json()
    assert [t["target"] for t in window["targets"]] == [server.target]
    assert server.count() == 1


def test_failing_targets_give_na_results_with_reasons(api: httpx.Client) -> None:
    dead_port = free_port()
    with serve_metrics(status=500) as broken, serve_metrics() as nospec, serve_metrics() as idle:
        nospec.set_text(fixture("vllm_v1_dp1_nospec.txt"))
        idle.set_text(vllm_payload(SEED_BEFORE))
        targets = [broken.target, nospec.target, idle.target, f"127.0.0.1:{dead_port}"]
        assert api.post("/windows/na/start", json={"targets": targets}).status_code == 201
        stopped = api.post("/windows/na/stop").json()
    results = {t["target"]: t["result"] for t in stopped["targets"]}
    assert results[broken.target]["error"] == (
        "[before] Metrics endpoint returned HTTP 500; [after] Metrics endpoint returned HTTP 500"
    )
    assert results[nospec.target]["error"] == (
        "[before] No spec decode metrics found on server; [after] No spec decode metrics found on server"
    )
    assert (
        results[idle.target]["error"] == "No spec decode activity detected during benchmark window"
    )
    assert results[idle.target]["raw"]["before"] == raw_of(SEED_BEFORE)
    refused = results[f"127.0.0.1:{dead_port}"]["error"]
    assert refused.startswith(
        f"[before] Failed to fetch metrics from http://127.0.0.1:{dead_port}/metrics: "
    )
    for result in results.values():
        assert (result["status"], result["data"]) == ("na", None)
    report = api.get("/windows/na/report").text
    assert report.count("Status                                        N/A") == 4


@pytest.mark.slow
def test_window_survives_sigkill_between_start_and_stop(database_url: str, tmp_path: Path) -> None:
    with run_collector(database_url, tmp_path) as collector, serve_metrics() as server:
        server.set_text(vllm_payload(SEED_BEFORE))
        started = clients.post(
            f"{collector.base_url}/windows/crash/start",
            json={"targets": [server.target]},
            timeout=30,
        )
        assert started.status_code == 201
        collector.kill()
        server.set_text(vllm_payload(SEED_AFTER))
        collector.start()
        stopped = clients.post(f"{collector.base_url}/windows/crash/stop", timeout=30)
        assert stopped.status_code == 200
        result = stopped.json()["targets"][0]["result"]
        assert result["status"] == "ok"
        assert result["data"] == expected_data(SEED_BEFORE, SEED_AFTER)


@pytest.mark.slow
def test_thirty_two_slow_targets_are_scraped_at_once(api: httpx.Client) -> None:
    """All 32 baseline scrapes are in flight together: the start does not scrape in turn.

    Each server holds its answer until all 32 have been asked (a barrier), so the check does
    not hang on how fast a busy machine sends them. A start that scraped in turn would leave the
    first request waiting alone until the barrier gives up, which breaks it for all.
    """
    everyone_asked = threading.Barrier(32, timeout=20)

    def wait_for_the_others() -> None:
        with suppress(threading.BrokenBarrierError):
            everyone_asked.wait()

    with ExitStack() as stack:
        servers = [
            stack.enter_context(
                serve_metrics(
                    body=vllm_payload(SEED_BEFORE).encode(), before_answer=wait_for_the_others
                )
            )
            for _ in range(32)
        ]
        answer = api.post("/windows/wide/start", json={"targets": [s.target for s in servers]})
        assert answer.status_code == 201
        assert all(t["before"] == raw_of(SEED_BEFORE) for t in answer.json()["targets"])
        assert sum(s.count() for s in servers) == 32
    assert not everyone_asked.broken  # all 32 were asked before any was answered


@pytest.mark.slow
def test_crash_before_the_baseline_was_stored_gives_an_honest_na(
    database_url: str, tmp_path: Path
) -> None:
    with run_collector(database_url, tmp_path) as collector, serve_metrics(delay_s=3.0) as server:
        server.set_text(vllm_payload(SEED_BEFORE))
        body = {"targets": [server.target]}
        outcome: dict[str, Any] = {}

        def start() -> None:
            try:
                clients.post(f"{collector.base_url}/windows/half/start", json=body, timeout=30)
            except httpx.TransportError as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=start)
        thread.start()
        while server.count() == 0:  # the window row is stored before the baseline scrape
            time.sleep(0.01)
        collector.kill()
        thread.join()
        assert "error" in outcome  # the client saw the collector die

        server.delay_s = 0
        collector.start()
        retry = clients.post(f"{collector.base_url}/windows/half/start", json=body, timeout=30)
        assert retry.status_code == 200
        assert retry.json()["targets"][0]["before"] is None
        server.set_text(vllm_payload(SEED_AFTER))
        result = clients.post(f"{collector.base_url}/windows/half/stop", timeout=30).json()
    after = result["targets"][0]["result"]
    assert after["status"] == "na"
    assert after["error"] == (
        "[before] baseline was never stored (the collector stopped before the start scrape finished)"
    )
    assert after["raw"] == {"before": None, "after": raw_of(SEED_AFTER)}


def test_a_llamacpp_server_is_measured_and_stored_as_llamacpp(api: httpx.Client) -> None:
    """Its series are stored under their engine (a vLLM series of the same labels is another)."""
    name = "llamacpp:spec_decode_num"

    def payload(drafts: int) -> bytes:
        return (
            f"{name}_drafts_total {drafts}\n{name}_draft_tokens_total {4 * drafts}\n"
            f"{name}_accepted_tokens_total {3 * drafts}\n"
            f"vllm:spec_decode_num_drafts_total 7\n"  # a vLLM series beside it, unchanged
        ).encode()

    with serve_metrics(body=payload(40)) as server:
        assert api.post("/windows/llama/start", json={"targets": [server.target]}).is_success
        server.replace(payload(140))
        result = api.post("/windows/llama/stop").json()["targets"][0]["result"]
    llama = next(e for e in result["engines"] if e["engine"] == "llamacpp")
    assert llama["data"]["num_drafts"] == 100 and llama["data"]["acceptance_rate"] == 75.0
    assert result["engine"] == "vllm+llamacpp"
    vllm = next(e for e in result["engines"] if e["engine"] == "vllm")
    assert vllm["error"] == "No spec decode activity detected during benchmark window"


def _zeroed(text: str) -> str:
    """The same payload with every spec-decode counter at 0: the baseline of a fresh server."""
    return re.sub(
        r"^(vllm:spec_decode_\w+_total(?:\{[^}]*\})?) \S+$", r"\1 0.0", text, flags=re.MULTILINE
    )


@pytest.mark.parametrize(
    ("fixture_name", "expected"),
    [
        # Read off the file by hand: 105 drafts, 630 draft tokens, 149 accepted; positions
        # 0-5 hold 84, 63, 1, 1, 0, 0 (4 and 5 stay, at 0).
        ("real/vllm_dspark_k6_capture.txt",
         {"num_drafts": 105, "draft_tokens": 630, "accepted_tokens": 149,
          "acceptance_rate": 149 / 630 * 100, "acceptance_length": 1 + 149 / 105,
          "per_position_acceptance_rates": {"0": 84 / 105, "1": 63 / 105, "2": 1 / 105,
                                            "3": 1 / 105, "4": 0.0, "5": 0.0}}),
        # Exponent forms: 2.04363e+06 drafts, 1.0218118e+07 draft tokens (not 5 x drafts),
        # 7.268642e+06 accepted; position 4 was cut by its author: never invented.
        ("real/vllm_0.21_k5_trimmed.txt",
         {"num_drafts": 2_043_630, "draft_tokens": 10_218_118, "accepted_tokens": 7_268_642,
          "acceptance_rate": 7_268_642 / 10_218_118 * 100,
          "acceptance_length": 1 + 7_268_642 / 2_043_630,
          "per_position_acceptance_rates": {
              "0": 1_883_866 / 2_043_630, "1": 1_732_372 / 2_043_630,
              "2": 1_489_894 / 2_043_630, "3": 1_204_113 / 2_043_630}}),
    ],
)  # fmt: skip
def test_payloads_written_by_real_vllm_servers(
    api: httpx.Client, fixture_name: str, expected: dict[str, object]
) -> None:
    text = fixture(fixture_name)
    with serve_metrics(body=_zeroed(text).encode()) as server:
        assert api.post("/windows/real/start", json={"targets": [server.target]}).is_success
        server.replace(text.encode())
        result = api.post("/windows/real/stop").json()["targets"][0]["result"]
    assert (result["status"], result["engine"], result["exact"]) == ("ok", "vllm", True)
    assert result["data"] == expected


def test_a_real_vllm_server_without_spec_decoding(api: httpx.Client) -> None:
    with serve_metrics(body=fixture("real/vllm_v1_nospec_qwen0.5b.txt").encode()) as server:
        assert api.post("/windows/nospec/start", json={"targets": [server.target]}).is_success
        result = api.post("/windows/nospec/stop").json()["targets"][0]["result"]
    assert result["status"] == "na"
    assert result["error"] == (
        "[before] No spec decode metrics found on server; "
        "[after] No spec decode metrics found on server"
    )


def test_a_start_body_tells_an_sglang_targets_draft_tokens_per_step(api: httpx.Client) -> None:
    def payload(calls: int, generated: int, requests: int) -> bytes:
        return (
            f"sglang:spec_verify_calls_total {calls}.0\n"
            f"sglang:generation_tokens_total {generated}.0\nsglang:num_requests_total {requests}.0\n"
        ).encode()

    with serve_metrics(body=payload(0, 0, 0)) as server:
        bad = {"url": server.url, "engine": "tgi-2"}
        refused = api.post("/windows/sg/start", json={"targets": [bad]})
        assert refused.status_code == 422 and "engine must be one of" in refused.text
        target = {"url": server.url, "engine": "sglang", "draft_tokens_per_step": 3}
        assert api.post("/windows/sg/start", json={"targets": [target]}).is_success
        server.replace(payload(50, 200, 10))  # accepted = 200 - 10 - 50 = 140
        result = api.post("/windows/sg/stop").json()["targets"][0]["result"]
    assert (result["engine"], result["exact"]) == ("sglang", False)
    assert result["data"]["num_drafts"] == 50 and result["data"]["draft_tokens"] == 150
    assert result["data"]["accepted_tokens"] == 140
    assert result["data"]["acceptance_rate"] == 140 / 150 * 100
    assert result["data"]["acceptance_length"] == (200 - 10) / 50


def test_a_start_body_tells_how_a_target_verifies_drafts(api: httpx.Client) -> None:
    """vLLM's counters cannot tell a lossy verification (`fly`) from a lossless one: the start
    body can, and the result keeps it (stored with the target, read back at the stop)."""
    with serve_metrics(body=vllm_payload([InstanceCounters(0, 0, [0, 0])]).encode()) as server:
        bad = {"url": server.url, "verification": "lossy"}
        refused = api.post("/windows/vf/start", json={"targets": [bad]})
        assert refused.status_code == 422 and "verification must be one of" in refused.text
        target = {"url": server.url, "verification": "fly"}
        assert api.post("/windows/vf/start", json={"targets": [target]}).is_success
        server.replace(vllm_payload([InstanceCounters(10, 20, [8, 5])]).encode())
        result = api.post("/windows/vf/stop").json()["targets"][0]["result"]
        again = api.get("/windows/vf").json()["targets"][0]["result"]
    assert result["verification"] == again["verification"] == "fly"
    assert result["exact"] is True  # the arithmetic is; the comparison is what is not
    assert any("lossy" in note and "not comparable" in note for note in result["notes"])


def test_sources_are_never_mixed_and_need_a_prometheus(api: httpx.Client) -> None:
    """A selector names a target of a window read from Prometheus only; this collector has
    none configured; a scraped window never starts or stops in the past."""
    mixed = api.post(
        "/windows/m/start", json={"targets": ["127.0.0.1:9", {"selector": '{job="v"}'}]}
    )
    assert mixed.status_code == 422 and mixed.json()["detail"][0]["loc"] == ["body", "targets", 1]
    none = api.post("/windows/m/start", json={"targets": ["127.0.0.1:9"], "source": "prometheus"})
    assert none.status_code == 422 and none.json()["detail"][0]["loc"] == ["body", "source"]
    assert "SPECDEC_PROMETHEUS_URL" in none.json()["detail"][0]["msg"]
    bad = api.post(
        "/windows/m/start", json={"targets": [{"selector": "job=v"}], "source": "prometheus"}
    )
    assert bad.status_code == 422 and "a selector is" in bad.text


def test_the_results_a_stop_stored_are_served_from_memory_afterwards(
    team: Team, api: httpx.Client
) -> None:
    """A stop keeps what it stored: the report and results read next are not read back (and
    validated again) from the database. Shown by changing the stored row behind its back."""
    import sqlalchemy

    with serve_metrics(body=vllm_payload([InstanceCounters(5, 15, [3, 2, 1])]).encode()) as server:
        api.post("/windows/kept/start", json={"targets": [server.target]})
        server.replace(vllm_payload([InstanceCounters(9, 27, [6, 4, 2])]).encode())
        stopped = api.post("/windows/kept/stop").json()["targets"][0]["result"]
    engine = sqlalchemy.create_engine(team.collector.database_url)
    with engine.begin() as connection:
        connection.execute(
            sqlalchemy.text(
                "UPDATE window_target SET result = :result WHERE window_pk = (SELECT id FROM "
                "\"window\" WHERE team = :team AND window_id = 'kept')"
            ),
            {"result": '{"status": "na", "error": "changed"}', "team": team.name},
        )
    engine.dispose()
    served = api.get(f"/windows/kept/results/{server.target}").json()
    assert served == stopped and served["data"]["num_drafts"] == 4
