"""Windows over payloads that real engines wrote (`tests/fixtures/engines/`, see its README).

Each figure is checked against the same payloads read with prometheus_client's parser
(`tests.real_engines.accounting`), not with the collector's extraction.
"""

import csv
import io

import httpx
import pytest

from specdec_collector.core.arithmetic import NO_ACTIVITY, NO_METRICS
from specdec_collector.core.exposition import extract_spec_decode
from specdec_collector.core.figures import build_result
from specdec_collector.core.notes import RESTARTED, UNSEEN_RESTART, VARIABLE_DRAFT_LENGTH
from tests.real_engines.accounting import (
    counters,
    expected_data,
    expected_distribution,
    generated_tokens,
    increase,
)
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import FIXTURES

CAPTURES = FIXTURES / "engines"
ENGINES = {
    # stem, prefix of its families, its generated-tokens counter
    "vllm": ("vllm_0.32.0_cpu_ngram_k4", "vllm:", "vllm:generation_tokens_total"),
    "llamacpp": ("llamacpp_ngram", "llamacpp:", "llamacpp:tokens_predicted_total"),
}
URL = "http://127.0.0.1:8000/metrics"


def capture(engine: str, phase: str) -> str:
    return (CAPTURES / f"{ENGINES[engine][0]}_{phase}.txt").read_text()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_window_over_a_real_engines_payloads(engine: str) -> None:
    prefix = ENGINES[engine][1]
    before, after = capture(engine, "before"), capture(engine, "after")
    truth = increase(counters(before, prefix), counters(after, prefix))
    result = build_result(URL, extract_spec_decode(before), extract_spec_decode(after))
    assert (result.status, result.engine, result.restarts) == ("ok", engine, 0)
    assert result.data is not None and result.data.model_dump() == expected_data(truth)
    assert result.accepted_distribution == expected_distribution(truth)
    assert truth.drafts > 0
    # n-gram drafts may be shorter than the positions (llama.cpp's here are)
    positions = len(truth.per_position)
    mean = f"{truth.draft_tokens / truth.drafts:.2f}"
    variable = VARIABLE_DRAFT_LENGTH.format(mean=mean, positions=positions)
    assert result.notes is not None
    assert (variable in result.notes) is (truth.draft_tokens != positions * truth.drafts)
    if engine == "llamacpp":
        assert variable in result.notes
    if engine == "llamacpp":
        assert UNSEEN_RESTART.format(engine="llamacpp") in result.notes
    else:
        assert result.exact is True  # vLLM single-process: `_created` marks restarts


@pytest.mark.parametrize("engine", ENGINES)
def test_a_real_engines_restart_is_found(engine: str) -> None:
    """`restart`: the engine killed after `after`, started again, one completion served."""
    prefix = ENGINES[engine][1]
    after, restart = capture(engine, "after"), capture(engine, "restart")
    result = build_result(URL, extract_spec_decode(after), extract_spec_decode(restart))
    assert (result.restarts, result.exact) == (1, False)
    assert result.notes is not None and RESTARTED.format(n=1) in result.notes
    assert result.data is not None
    assert result.data.model_dump() == expected_data(counters(restart, prefix))


def test_a_real_llamacpp_without_drafting() -> None:
    _, prefix, generated = ENGINES["llamacpp"]
    before, nospec = capture("llamacpp", "before"), capture("llamacpp", "nospec")
    tokens = generated_tokens(nospec, generated) - generated_tokens(before, generated)
    result = build_result(URL, extract_spec_decode(before), extract_spec_decode(nospec))
    assert counters(nospec, prefix).drafts == 0 and tokens > 0
    assert (result.status, result.engine) == ("na", "llamacpp")
    assert result.error is not None and result.error.startswith(
        f"{NO_ACTIVITY}: the server generated {tokens} tokens in the window and drafted none"
    )


def test_a_real_vllm_without_drafting_has_no_spec_decode_families() -> None:
    nospec = capture("vllm", "nospec")
    assert "vllm:spec_decode" not in nospec
    result = build_result(URL, extract_spec_decode(nospec), extract_spec_decode(nospec))
    assert (result.status, result.error) == ("na", f"[before] {NO_METRICS}; [after] {NO_METRICS}")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_window_of_a_real_specdec_serve_over_captured_payloads(
    engine: str, api: httpx.Client
) -> None:
    prefix = ENGINES[engine][1]
    before, after = capture(engine, "before"), capture(engine, "after")
    with serve_metrics(body=before.encode()) as server:
        assert api.post(
            f"/windows/cap-{engine}/start", json={"targets": [server.target]}
        ).is_success
        server.replace(after.encode())
        stopped = api.post(f"/windows/cap-{engine}/stop").json()
    result = stopped["targets"][0]["result"]
    assert result["data"] == expected_data(
        increase(counters(before, prefix), counters(after, prefix))
    )


# --- vLLM's Rust frontend, written from its source (no real one here: the 0.33 wheel) ------


def test_vllm_rust_frontend_payloads() -> None:
    from tests.support.payloads import InstanceCounters, vllm_rust_payload

    start = extract_spec_decode(  # served, nothing speculated yet: no per-position family
        vllm_rust_payload([InstanceCounters(0, 0, [0, 0, 0], engine=e) for e in "01"], False)
    )
    later = vllm_rust_payload(
        [InstanceCounters(40, 120, [36, 30, 20], engine="0"), InstanceCounters(10, 30, [9, 5, 1], engine="1")],
        generated=400,
    )  # fmt: skip
    assert later.endswith("# EOF\n")
    result = build_result(URL, start, extract_spec_decode(later))
    assert (result.status, result.engine, result.restarts) == ("ok", "vllm", 0)
    assert result.data is not None
    assert (result.data.num_drafts, result.data.draft_tokens, result.data.accepted_tokens) == (
        50, 150, 36 + 30 + 20 + 9 + 5 + 1
    )  # fmt: skip
    assert result.data.per_position_acceptance_rates == {"0": 45 / 50, "1": 35 / 50, "2": 21 / 50}
    assert result.notes is not None and UNSEEN_RESTART.format(engine="vllm") in result.notes
    off = [InstanceCounters(0, 0, [], engine="0")]  # spec decode off: the counters, at 0
    idle = build_result(
        URL, extract_spec_decode(vllm_rust_payload(off, False)),
        extract_spec_decode(vllm_rust_payload(off, False, generated=64)),
    )  # fmt: skip
    assert (idle.status, idle.exact) == ("na", False)
    assert idle.error is not None and idle.error.startswith(
        f"{NO_ACTIVITY}: the server generated 64 tokens in the window and drafted none"
    )


def test_a_restart_shows_in_the_block_the_list_csv_and_compare(api: httpx.Client) -> None:
    """llama.cpp's real `after` then `restart` through a real `specdec serve`."""
    with serve_metrics(body=capture("llamacpp", "before").encode()) as server:
        assert api.post("/windows/cap-0/start", json={"targets": [server.target]}).is_success
        server.replace(capture("llamacpp", "after").encode())
        assert api.post("/windows/cap-0/stop").is_success
        assert api.post("/windows/cap-r/start", json={"targets": [server.target]}).is_success
        server.replace(capture("llamacpp", "restart").encode())
        result = api.post("/windows/cap-r/stop").json()["targets"][0]["result"]
    assert (result["restarts"], result["exact"]) == (1, False)
    report = api.get("/windows/cap-r/report").text
    assert f"{'Restarts':<45} 1 (see notes)" in report.splitlines()
    rows = list(csv.DictReader(io.StringIO(api.get("/windows", params={"format": "csv"}).text)))
    (row,) = [r for r in rows if r["id"] == "cap-r"]
    assert (row["restarts"], row["exact"]) == ("1", "False")
    compared = api.get("/compare", params={"windows": "cap-0,cap-r"}).json()
    first, restarted = compared["targets"][0]["results"]
    assert (first["restarts"], restarted["restarts"]) == (0, 1)
    assert RESTARTED.format(n=1) in restarted["notes"]
