"""The simulator: a vLLM-shaped payload whose counters grow, and `specdec simulate` for real."""

import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.promtext import extract_spec_decode
from app.simulator import SimulatedServer, default_acceptance
from tests.collector import Collector, specdec_command
from tests.metrics_server import free_port
from tests.test_promtext import oracle


def test_payload_is_valid_exposition_with_created_and_histograms() -> None:
    server = SimulatedServer(engines=3, k=4, started=1_000.0)
    text = server.render(now=1_010.0)
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"
    assert families["vllm:spec_decode_num_drafts"].type == "counter"
    assert families["vllm:spec_decode_num_drafts_created"].type == "gauge"
    assert extract_spec_decode(text) == oracle(text)
    engines = {s.labels["engine"] for s in families["vllm:spec_decode_num_drafts"].samples}
    assert engines == {"0", "1", "2"}


def test_counters_grow_with_time_as_configured() -> None:
    server = SimulatedServer(
        engines=2, k=3, drafts_per_s=100, acceptance=[0.9, 0.5, 0.2], started=0.0
    )
    series = extract_spec_decode(server.render(now=10.0))
    by = {
        (key.family, dict(key.labels).get("engine"), dict(key.labels).get("position")): v.value
        for key, v in series.items()
    }
    assert by[("num_drafts", "0", None)] == 1000
    assert by[("num_drafts", "1", None)] == 1100  # engine 1 drafts 10 % more
    assert by[("num_draft_tokens", "1", None)] == 3300
    assert by[("accepted_per_pos", "0", "1")] == 500
    assert by[("num_accepted_tokens", "0", None)] == 900 + 500 + 200


def test_default_acceptance_falls_with_position() -> None:
    rates = default_acceptance(5)
    assert rates == sorted(rates, reverse=True)
    assert rates[0] == 0.85


@pytest.fixture
def simulator() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [*specdec_command(), "simulate", "--port", str(port), "--engines", "2", "--k", "4",
         "--drafts-per-s", "400"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _drafts(target: str) -> float:
    series = extract_spec_decode(httpx.get(f"http://{target}/metrics").text)
    return sum(v.value or 0 for k, v in series.items() if k.family == "num_drafts")


def test_simulate_and_serve_together(
    simulator: str, api: httpx.Client, collector: Collector
) -> None:
    """What a newcomer does with two terminals and the README's curl example."""
    assert api.post("/windows/demo/start", json={"targets": [simulator]}).status_code == 201
    first = _drafts(simulator)
    while _drafts(simulator) < first + 400:  # wait for the counters, not for a fixed time
        time.sleep(0.1)
    result = api.post("/windows/demo/stop").json()["targets"][0]["result"]
    assert result["status"] == "ok", result
    data, raw = result["data"], result["raw"]
    drafts = raw["after"]["num_drafts"] - raw["before"]["num_drafts"]
    assert data["num_drafts"] == drafts >= 400
    assert data["draft_tokens"] == 4 * drafts
    expected = default_acceptance(4)
    for position, rate in data["per_position_acceptance_rates"].items():
        # Each engine floors its own count: at most one token off per engine.
        assert abs(rate - expected[int(position)]) <= 2 / drafts + 1e-4
