"""`specdec simulate --engine E`: each engine's families as that engine serves them, measured
by a real window; every expected figure comes from the steps the client saw streamed."""

from collections.abc import Iterator
from typing import Any, Protocol

import httpx
import pytest

from specdec_collector.core.notes import (
    MAX_NOTES,
    SGLANG_ACTIVE,
    SGLANG_NOTES,
    TRTLLM_NOTE,
    UNSEEN_RESTART,
    V0_REASON,
)
from specdec_collector.simulator.server import SimulatedServer
from tests.support.collector import serve_simulator
from tests.support.streaming import streamed_requests

K = 3


class Measure(Protocol):
    def __call__(
        self, engine: str, path: str = "/metrics", requests: int = 12
    ) -> tuple[dict[str, Any], list[int]]: ...


class MeasureRequests(Protocol):
    def __call__(
        self, engine: str, requests: int = 12
    ) -> tuple[dict[str, Any], list[list[int]]]: ...


@pytest.fixture
def measure(api: httpx.Client) -> Iterator[Measure]:
    """A window over `specdec simulate --engine E` while the client streams requests."""

    def run(
        engine: str, path: str = "/metrics", requests: int = 12
    ) -> tuple[dict[str, Any], list[int]]:
        result, seen = _measured(api, engine, path, requests)
        return result, [step for steps in seen for step in steps]

    yield run


@pytest.fixture
def measure_requests(api: httpx.Client) -> Iterator[MeasureRequests]:
    """As `measure`, the steps the client saw of each request apart."""

    def run(engine: str, requests: int = 12) -> tuple[dict[str, Any], list[list[int]]]:
        return _measured(api, engine, "/metrics", requests)

    yield run


def _measured(
    api: httpx.Client, engine: str, path: str, requests: int
) -> tuple[dict[str, Any], list[list[int]]]:
    args = ("--engine", engine, "--acceptance", "0.8,0.5,0.3", "--seed", "5")
    with serve_simulator(*args) as url:
        window = f"sim-{engine}"
        assert api.post(f"/windows/{window}/start", json={"targets": [url + path]}).is_success
        seen = streamed_requests(url, requests)
        result = api.post(f"/windows/{window}/stop").json()["targets"][0]["result"]
    return result, seen


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
    # Every draft is k long: how many drafts had exactly n accepted, as the client saw them.
    seen = {str(n): sum(step - 1 == n for step in steps) for n in range(K + 1)}
    assert result["accepted_distribution"] == seen


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
        [*SGLANG_NOTES[:2], SGLANG_ACTIVE, UNSEEN_RESTART.format(engine="sglang")],
    )
    assert result["data"]["num_drafts"] == drafts
    assert result["data"]["accepted_tokens"] == accepted
    assert result["data"]["acceptance_length"] == sum(steps) / drafts
    # Its active draft size (k + 1, served as 0.5.23 does) gives the draft tokens.
    assert result["data"]["draft_tokens"] == K * drafts
    assert result["data"]["acceptance_rate"] == accepted / (K * drafts) * 100


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


def test_max(measure_requests: MeasureRequests) -> None:
    result, seen = measure_requests("max")
    # One observation per request (the simulator's batch): the mean of each one's figures.
    lengths = [sum(steps) / len(steps) for steps in seen]
    rates = [
        sum(sum(step - 1 > i for step in steps) / len(steps) * 100 for steps in seen) / len(seen)
        for i in range(K)
    ]
    assert (result["engine"], result["exact"]) == ("max", False)
    assert result["notes"][:2] == MAX_NOTES
    assert result["data"]["acceptance_length"] == pytest.approx(sum(lengths) / len(lengths))
    assert result["data"]["per_position_acceptance_rates"] == pytest.approx(
        {str(i): rate / 100 for i, rate in enumerate(rates)}
    )
    assert result["data"]["num_drafts"] is None and result["data"]["accepted_tokens"] is None


def test_fastdeploy(measure: Measure) -> None:
    result, steps = measure("fastdeploy")
    drafts, accepted, _ = _by_hand(steps)
    assert (result["engine"], result["exact"]) == ("fastdeploy", True)
    assert result["data"]["num_drafts"] == drafts
    assert result["data"]["draft_tokens"] == K * drafts
    assert result["data"]["accepted_tokens"] == accepted
    assert result["data"]["acceptance_length"] == 1 + accepted / drafts


def test_tgi(measure_requests: MeasureRequests) -> None:
    requests = 12
    result, seen = measure_requests("tgi", requests)
    steps = [step for request in seen for step in request]
    drafts, accepted, at = _by_hand(steps)
    counted = drafts + requests  # TGI records each request's first token as a step
    assert (result["engine"], result["exact"]) == ("tgi", False)
    assert result["data"]["num_drafts"] == counted
    assert result["data"]["accepted_tokens"] == accepted
    assert result["data"]["draft_tokens"] == K * counted
    assert result["data"]["per_position_acceptance_rates"] == {
        str(i): n / counted for i, n in enumerate(at)
    }
    exactly = [sum(step - 1 == n for step in steps) for n in range(K + 1)]
    exactly[0] += requests
    assert result["accepted_distribution"] == {str(n): c for n, c in enumerate(exactly)}


@pytest.mark.parametrize("engine", ["uniserve", "dspark"])
def test_vllms_names_elsewhere(measure: Measure, engine: str) -> None:
    result, steps = measure(engine)
    drafts, accepted, at = _by_hand(steps)
    assert (result["engine"], result["exact"]) == (
        "uniserve" if engine == "uniserve" else "vllm",
        True,
    )
    assert result["data"]["num_drafts"] == drafts
    assert result["data"]["accepted_tokens"] == accepted
    assert result["data"]["per_position_acceptance_rates"] == {
        str(i): n / drafts for i, n in enumerate(at)
    }
    if engine == "dspark":  # every draft is k long: a drafted position's rate is over all
        assert result["per_drafted_position_acceptance_rates"] == {
            str(i): n / drafts for i, n in enumerate(at)
        }


def test_vllm_diffusion(measure: Measure) -> None:
    result, steps = measure("vllm-diffusion")
    assert (result["engine"], result["status"]) == ("vllm-diffusion", "na")
    assert result["diffusion"]["denoising_steps"] == len(steps)
    assert result["diffusion"]["tokens_per_step"] == sum(steps) / len(steps)
    assert result["diffusion"]["committed_share"] == sum(steps) / (len(steps) * (K + 1)) * 100
