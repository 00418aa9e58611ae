"""`specdec simulate --engine E`: each engine's families as that engine serves them, measured
by a real window; every expected figure comes from the steps the client saw streamed."""

from collections.abc import Iterator
from typing import Any, Protocol

import httpx
import pytest

from specdec_collector.core.figures import SGLANG_NOTES, TRTLLM_NOTE, UNSEEN_RESTART, V0_REASON
from specdec_collector.simulator.server import SimulatedServer
from tests.support.collector import run_simulator
from tests.support.streaming import streamed_steps

K = 3


class Measure(Protocol):
    def __call__(
        self, engine: str, path: str = "/metrics", requests: int = 12
    ) -> tuple[dict[str, Any], list[int]]: ...


@pytest.fixture
def measure(api: httpx.Client) -> Iterator[Measure]:
    """A window over `specdec simulate --engine E` while the client streams requests."""

    def run(
        engine: str, path: str = "/metrics", requests: int = 12
    ) -> tuple[dict[str, Any], list[int]]:
        args = ("--engine", engine, "--acceptance", "0.8,0.5,0.3", "--seed", "5")
        with run_simulator(*args) as url:
            window = f"sim-{engine}"
            assert api.post(f"/windows/{window}/start", json={"targets": [url + path]}).is_success
            steps = streamed_steps(url, requests)
            result = api.post(f"/windows/{window}/stop").json()["targets"][0]["result"]
        return result, steps

    yield run


def _by_hand(steps: list[int]) -> tuple[int, int, list[int]]:
    """Drafts, accepted tokens, and accepted at each position, from the client's steps."""
    accepted_at = [sum(step - 1 > position for step in steps) for position in range(K)]
    return len(steps), sum(step - 1 for step in steps), accepted_at


def test_llamacpp(measure: Measure) -> None:
    result, steps = measure("llamacpp")
    drafts, accepted, at = _by_hand(steps)
    assert (result["engine"], result["exact"]) == ("llamacpp", True)  # all below 10^6
    assert result["data"]["num_drafts"] == drafts
    assert result["data"]["draft_tokens"] == K * drafts
    assert result["data"]["accepted_tokens"] == accepted
    assert result["data"]["per_position_acceptance_rates"] == {
        str(i): n / drafts for i, n in enumerate(at)
    }


def test_lmdeploy(measure: Measure) -> None:
    result, steps = measure("lmdeploy")
    drafts, accepted, at = _by_hand(steps)
    assert (result["engine"], result["exact"]) == ("lmdeploy", True)
    assert result["data"]["num_drafts"] == drafts
    assert result["data"]["draft_tokens"] == K * drafts
    assert result["data"]["accepted_tokens"] == accepted
    assert result["data"]["per_position_acceptance_rates"] == {
        str(i): n / drafts for i, n in enumerate(at)
    }
    assert result["lifetime"] and "acceptance_length" in result["lifetime"][0]


def test_trtllm_at_its_own_endpoint(measure: Measure) -> None:
    result, steps = measure("trtllm", "/prometheus/metrics")
    drafts, accepted, at = _by_hand(steps)
    assert (result["engine"], result["exact"], result["notes"]) == (
        "trtllm",
        False,
        [TRTLLM_NOTE, UNSEEN_RESTART.format(engine="trtllm")],
    )
    assert result["data"]["acceptance_rate"] == accepted / (K * drafts) * 100
    assert result["data"]["num_drafts"] == drafts
    assert result["data"]["acceptance_length"] == 1 + accepted / drafts
    assert result["data"]["per_position_acceptance_rates"]["2"] == at[2] / drafts


def test_trtllm_json_metrics_say_which_endpoint(measure: Measure) -> None:
    result, _ = measure("trtllm", "/metrics", requests=1)
    assert "use http://host:port/prometheus/metrics" in result["error"]


def test_sglang(measure: Measure) -> None:
    result, steps = measure("sglang")
    drafts, accepted, _ = _by_hand(steps)
    assert (result["engine"], result["exact"], result["notes"]) == (
        "sglang",
        False,
        [*SGLANG_NOTES, UNSEEN_RESTART.format(engine="sglang")],
    )
    assert result["data"]["num_drafts"] == drafts
    assert result["data"]["accepted_tokens"] == accepted
    assert result["data"]["acceptance_length"] == sum(steps) / drafts
    assert result["data"]["draft_tokens"] is None and result["data"]["acceptance_rate"] is None


def test_vllm_v0(measure: Measure) -> None:
    result, steps = measure("vllm-v0", requests=3)
    drafts, accepted, _ = _by_hand(steps)
    assert (result["status"], result["engine"], result["error"]) == ("na", "vllm-v0", V0_REASON)
    (lifetime,) = result["lifetime"]
    assert lifetime["draft_acceptance_rate"] == accepted / (K * drafts)


def test_llamacpp_prints_six_significant_digits_as_llamacpp_does() -> None:
    server = SimulatedServer(engine="llamacpp", k=K, seed=1)
    server.counters[0].drafts = 3_054_061
    lines = server.render().splitlines()
    assert "llamacpp:spec_decode_num_drafts_total 3.05406e+06" in lines
    assert f"llamacpp:spec_decode_num_draft_tokens_total {3_054_061 * K:g}" in lines
