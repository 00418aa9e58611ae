"""Windows of a real `specdec serve` around real load on a real vLLM and a real llama.cpp.

Each window's figures must equal, exactly, what the test computes from the engine's own
`/metrics` read just before the start and just after the stop (the engine idle at both, read
with prometheus_client's parser), and agree with the engine's own per-request accounts.
Temperature 0 throughout; prompts hold a passage twice, so n-gram drafts are accepted.
"""

import json
import subprocess
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from specdec_collector.core.arithmetic import NO_ACTIVITY, NO_METRICS
from specdec_collector.core.notes import RESTARTED, RESTARTED_SAMPLED, UNSEEN_RESTART
from tests.real_engines import servers
from tests.real_engines.accounting import (
    LLAMACPP_WITNESSES,
    VLLM_WITNESSES,
    Counters,
    counters,
    expected_data,
    expected_distribution,
    generated_tokens,
    increase,
    witnesses,
)
from tests.support import clients
from tests.support.collector import CollectorProcess, run_collector, specdec_command
from tests.support.metrics_server import free_port
from tests.support.prometheus_server import run_prometheus
from tests.support.waiting import wait_for

PASSAGE = (
    "Speculative decoding drafts several tokens cheaply and lets the large model verify them "
    "in one step. When the draft is right, many tokens come out of one forward pass. "
)


def prompt(i: int) -> str:
    return f"Text {i}. {PASSAGE}{PASSAGE}Speculative decoding drafts"


def start(collector: CollectorProcess, window: str, targets: list[str], **body: Any) -> None:
    answer = clients.post(
        f"{collector.base_url}/windows/{window}/start",
        json={"targets": targets, **body}, timeout=60,
    )  # fmt: skip
    assert answer.status_code == 201, answer.text


def stop(collector: CollectorProcess, window: str) -> dict[str, dict[str, Any]]:
    answer = clients.post(f"{collector.base_url}/windows/{window}/stop", timeout=60)
    assert answer.status_code == 200, answer.text
    return {t["target"]: t["result"] for t in answer.json()["targets"]}


def window_id() -> str:
    return "real-" + uuid.uuid4().hex[:8]


def llama_load(
    engine: servers.Engine,
    requests: int,
    stream: bool,
    chat: bool = False,
    predicted: list[tuple[int, float]] | None = None,
) -> tuple[int, int]:
    """Completions on llama-server (its own `/completion`, or OpenAI's chat completions: the
    model has no template, llama-server falls back to its default); its own accounts summed:
    (draft tokens, accepted). Each answer's (tokens predicted, their milliseconds) is appended
    to `predicted` where given."""
    drafted = accepted = 0
    for i in range(requests):
        body: dict[str, Any] = {"temperature": 0, "stream": stream}
        if chat:
            body |= {"messages": [{"role": "user", "content": prompt(i)}], "max_tokens": 48}
            answer = clients.post(f"{engine.base}/v1/chat/completions", json=body, timeout=300)
            timings = answer.json()["timings"]
        elif stream:
            body |= {"prompt": prompt(i), "n_predict": 48}
            last: dict[str, Any] = {}
            with clients.stream("POST", f"{engine.base}/completion", json=body, timeout=300) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        last = json.loads(line[6:])
            timings = last["timings"]
        else:
            body |= {"prompt": prompt(i), "n_predict": 48}
            answer = clients.post(f"{engine.base}/completion", json=body, timeout=300)
            timings = answer.json()["timings"]
        drafted += timings.get("draft_n", 0)
        accepted += timings.get("draft_n_accepted", 0)
        if predicted is not None:
            predicted.append((timings["predicted_n"], timings["predicted_ms"]))
    return drafted, accepted


def vllm_load(
    engine: servers.Engine,
    requests: int,
    stream: bool,
    accounts: bool = True,
    usage: list[int] | None = None,
) -> tuple[int, int, int]:
    """Completions on vLLM; its per-request accounts summed (`--per-request-spec-decode-metrics`)
    for answers that carry them: (verify steps, draft tokens, accepted). Each answer's
    `usage.completion_tokens` is appended to `usage` where given (answers not streamed)."""
    steps = drafted = accepted = 0
    for i in range(requests):
        body = {"model": servers.MODEL, "prompt": prompt(i), "max_tokens": 48,
                "temperature": 0, "stream": stream}  # fmt: skip
        if stream:
            with clients.stream(
                "POST", f"{engine.base}/v1/completions", json=body, timeout=300
            ) as r:
                assert r.status_code == 200
                for _ in r.iter_lines():
                    pass
            continue
        answer = clients.post(f"{engine.base}/v1/completions", json=body, timeout=300).json()
        if usage is not None:
            usage.append(answer["usage"]["completion_tokens"])
        if not accounts:
            continue
        spec = answer["metrics"]["speculative_decoding"]
        steps += spec["num_spec_steps"]
        drafted += spec["num_draft_tokens"]
        accepted += spec["num_accepted_draft_tokens"]
    return steps, drafted, accepted


def test_a_llamacpp_window_equals_its_metrics_and_its_timings(
    llama_engine: servers.Engine, collector: CollectorProcess
) -> None:
    window = window_id()
    text = llama_engine.metrics()
    before, before_witnesses = counters(text, "llamacpp:"), witnesses(text, LLAMACPP_WITNESSES)
    start(collector, window, [llama_engine.target])
    predicted: list[tuple[int, float]] = []
    drafted, accepted = llama_load(llama_engine, 3, stream=False, predicted=predicted)
    more = llama_load(llama_engine, 2, stream=True, predicted=predicted)
    chatted = llama_load(llama_engine, 2, stream=False, chat=True, predicted=predicted)
    drafted, accepted = drafted + more[0] + chatted[0], accepted + more[1] + chatted[1]
    result = stop(collector, window)[llama_engine.target]
    text = llama_engine.metrics()
    truth = increase(before, counters(text, "llamacpp:"))
    assert truth.drafts > 0 and truth.accepted > 0
    assert (result["status"], result["engine"]) == ("ok", "llamacpp")
    assert result["data"] == expected_data(truth)
    assert (truth.draft_tokens, truth.accepted) == (drafted, accepted)  # llama.cpp's timings
    assert UNSEEN_RESTART.format(engine="llamacpp") in result["notes"]
    # Its throughput: llama.cpp's counters' increase, and its timings of every answer.
    grew = {k: v - before_witnesses[k] for k, v in witnesses(text, LLAMACPP_WITNESSES).items()}
    tokens = sum(n for n, _ in predicted)
    throughput = result["throughput"]
    assert throughput["generated_tokens"] == grew["generated"] == tokens
    assert throughput["generated_tokens_per_step"] == grew["generated"] / grew["steps"]
    assert throughput["inter_token_latency_ms"] == pytest.approx(
        grew["decode_seconds"] / grew["generated"] * 1000, rel=1e-9
    )
    # Its timings in milliseconds, its counter in seconds printed to six figures.
    assert throughput["inter_token_latency_ms"] == pytest.approx(
        sum(ms for _, ms in predicted) / tokens, rel=1e-4
    )
    assert throughput["accepted_token_share"] == accepted / tokens * 100


def test_a_vllm_window_equals_its_metrics_and_its_per_request_accounts(
    vllm_engine: servers.Engine, collector: CollectorProcess
) -> None:
    window = window_id()
    text = vllm_engine.metrics()
    before, before_witnesses = counters(text, "vllm:"), witnesses(text, VLLM_WITNESSES)
    start(collector, window, [vllm_engine.target])
    usage: list[int] = []
    steps, drafted, accepted = vllm_load(vllm_engine, 3, stream=False, usage=usage)
    result = stop(collector, window)[vllm_engine.target]
    text = vllm_engine.metrics()
    truth = increase(before, counters(text, "vllm:"))
    assert truth.drafts > 0
    assert (result["status"], result["engine"], result["exact"]) == ("ok", "vllm", True)
    assert result["data"] == expected_data(truth)
    assert result.get("accepted_distribution") == expected_distribution(truth)
    assert (truth.drafts, truth.draft_tokens, truth.accepted) == (steps, drafted, accepted)
    # Its throughput: the answers' own token counts, and vLLM's witnesses' increase.
    grew = {k: v - before_witnesses[k] for k, v in witnesses(text, VLLM_WITNESSES).items()}
    throughput = result["throughput"]
    assert throughput["generated_tokens"] == grew["generated"] == sum(usage)
    assert throughput["finished_requests"] == grew["finished"] == 3
    assert throughput["accepted_token_share"] == truth.accepted / sum(usage) * 100
    assert throughput["generated_tokens_per_step"] == pytest.approx(
        grew["generated"] / grew["steps"], rel=1e-12
    )
    assert throughput["inter_token_latency_ms"] == pytest.approx(
        grew["decode_seconds"] / (grew["generated"] - grew["first_tokens"]) * 1000, rel=1e-9
    )
    assert throughput["generated_tokens_per_second"] == pytest.approx(
        sum(usage) / throughput["seconds"], rel=1e-12
    )
    assert 0 < throughput["seconds"] < 600


def test_a_streamed_vllm_window_equals_its_metrics(
    vllm_engine: servers.Engine, collector: CollectorProcess
) -> None:
    window = window_id()
    before = counters(vllm_engine.metrics(), "vllm:")
    start(collector, window, [vllm_engine.target])
    vllm_load(vllm_engine, 2, stream=True)
    result = stop(collector, window)[vllm_engine.target]
    truth = increase(before, counters(vllm_engine.metrics(), "vllm:"))
    assert result["status"] == "ok" and truth.drafts > 0
    assert result["data"] == expected_data(truth)


def test_one_window_over_both_engines(
    vllm_engine: servers.Engine, llama_engine: servers.Engine, collector: CollectorProcess
) -> None:
    window = window_id()
    before = {
        vllm_engine.target: counters(vllm_engine.metrics(), "vllm:"),
        llama_engine.target: counters(llama_engine.metrics(), "llamacpp:"),
    }
    start(collector, window, [vllm_engine.target, llama_engine.target])
    vllm_load(vllm_engine, 1, stream=False)
    llama_load(llama_engine, 2, stream=False)
    results = stop(collector, window)
    after = {
        vllm_engine.target: counters(vllm_engine.metrics(), "vllm:"),
        llama_engine.target: counters(llama_engine.metrics(), "llamacpp:"),
    }
    for target, result in results.items():
        assert result["data"] == expected_data(increase(before[target], after[target])), target


def test_llamacpp_without_metrics_and_without_drafting(
    collector: CollectorProcess, logs: Path
) -> None:
    with servers.llama(free_port(), logs / "llama-nometrics.log", metrics=False) as bare:
        window = window_id()
        start(collector, window, [bare.target])
        result = stop(collector, window)[bare.target]
    assert result["status"] == "na"
    assert "HTTP 501" in result["error"] and "Start it with `--metrics`" in result["error"]
    with servers.llama(free_port(), logs / "llama-nospec.log", spec=False) as plain:
        window = window_id()
        generated = generated_tokens(plain.metrics(), "llamacpp:tokens_predicted_total")
        start(collector, window, [plain.target])
        llama_load(plain, 1, stream=False)
        result = stop(collector, window)[plain.target]
        generated = generated_tokens(plain.metrics(), "llamacpp:tokens_predicted_total") - generated
    assert (result["status"], result["engine"], result["exact"]) == ("na", "llamacpp", False)
    assert generated > 0
    assert result["error"].startswith(
        f"{NO_ACTIVITY}: the server generated {generated} tokens in the window and drafted none"
    )


def test_a_llamacpp_restart_inside_an_unsampled_window(
    collector: CollectorProcess, logs: Path
) -> None:
    """The server is killed and started again on the same port inside the window. llama.cpp
    has no `_created`: the restart shows because its counters (prompt tokens among them) are
    lower at the end than at the start. The result counts from the restart on, says so, and
    is not exact."""
    port = free_port()
    engine = servers.start_llama(port, logs / "llama-restart.log")
    try:
        llama_load(engine, 3, stream=False)  # before the window: its counters fall at the crash
        window = window_id()
        start(collector, window, [engine.target])
        llama_load(engine, 1, stream=False)
        engine.kill()
        engine = servers.start_llama(port, logs / "llama-restart.log")
        llama_load(engine, 1, stream=False)
        result = stop(collector, window)[engine.target]
        truth = counters(engine.metrics(), "llamacpp:")  # the new server's whole count
    finally:
        engine.stop()
    assert result["restarts"] == 1 and result["exact"] is False
    assert RESTARTED.format(n=1) in result["notes"]
    assert result["data"] == expected_data(truth)


def _generated(engine: servers.Engine) -> int:
    name = (
        "vllm:generation_tokens_total"
        if engine.name == "vllm"
        else "llamacpp:tokens_predicted_total"
    )
    return generated_tokens(engine.metrics(), name)


@pytest.mark.parametrize("which", ["vllm", "llamacpp"])
def test_specdec_load_stream_counts_the_engines_tokens(
    which: str, request: pytest.FixtureRequest
) -> None:
    engine: servers.Engine = request.getfixturevalue(
        {"vllm": "vllm", "llamacpp": "llama"}[which] + "_engine"
    )
    before = _generated(engine)
    run = subprocess.run(
        [*specdec_command(), "load", "--url", engine.base, "--requests", "3", "--concurrency",
         "1", "--max-tokens", "24", "--stream", "--model", servers.MODEL],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    generated = _generated(engine) - before
    assert generated > 0
    assert run.stdout.startswith(f"3 requests (0 failed), {generated} tokens in "), run.stdout


@pytest.mark.parametrize("which", ["vllm", "llamacpp"])
def test_specdec_loads_per_request_accounts_sum_to_the_engines_counters(
    which: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """`specdec load --per-request`: vLLM's `metrics.speculative_decoding` (it runs with
    `--per-request-spec-decode-metrics summary`) and llama.cpp's `timings`, read from every
    answer, sum to the increase of the engine's own counters over the load."""
    engine: servers.Engine = request.getfixturevalue(
        {"vllm": "vllm", "llamacpp": "llama"}[which] + "_engine"
    )
    prefix = {"vllm": "vllm:", "llamacpp": "llamacpp:"}[which]
    before = counters(engine.metrics(), prefix)
    out = tmp_path / "requests.json"
    run = subprocess.run(
        [*specdec_command(), "load", "--url", engine.base, "--requests", "3", "--concurrency",
         "1", "--max-tokens", "32", "--model", servers.MODEL, "--per-request", str(out),
         "--prompt", prompt(0).replace("Text 0.", "Text {index}.")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    truth = increase(before, counters(engine.metrics(), prefix))
    accounts = json.loads(out.read_text())["requests"]
    assert len(accounts) == 3 and {a["source"] for a in accounts} == {which}
    assert sum(a["drafted"] for a in accounts) == truth.draft_tokens > 0
    assert sum(a["accepted"] for a in accounts) == truth.accepted
    steps = [a["steps"] for a in accounts]
    # vLLM tells its verify steps; llama.cpp's timings do not.
    assert (sum(steps) == truth.drafts) if which == "vllm" else steps == [None, None, None]
    assert f"{int(truth.draft_tokens)} draft tokens, {int(truth.accepted)} accepted" in run.stdout


def test_specdec_run_around_a_load_on_vllm(
    vllm_engine: servers.Engine, collector: CollectorProcess, tmp_path: Path
) -> None:
    """`specdec run -- <load>` as a user runs it: the window's result file equals the engine's
    own /metrics increase over the whole command."""
    before = counters(vllm_engine.metrics(), "vllm:")
    run = subprocess.run(
        [*specdec_command(), "run", "--server", collector.base_url, "--target",
         vllm_engine.target, "--output-dir", str(tmp_path), "--",
         *specdec_command(), "load", "--url", vllm_engine.base, "--requests", "2",
         "--concurrency", "1", "--max-tokens", "32", "--model", servers.MODEL],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    truth = increase(before, counters(vllm_engine.metrics(), "vllm:"))
    (written,) = tmp_path.glob("spec_decode_*.json")
    result = json.loads(written.read_text())
    assert result["status"] == "ok" and truth.drafts > 0
    assert result["data"] == expected_data(truth)
    assert "Speculative Decoding Metrics" in run.stdout


def test_a_llamacpp_restart_inside_a_sampled_window(
    collector: CollectorProcess, logs: Path
) -> None:
    """Sampled every 0.5 s: what finished before the crash is in the samples, and the restart
    counts once though llama.cpp prints its per-position family only after the first
    speculative request of the new server. The figures equal the old server's increase up to
    its last sample before the crash plus the new server's count."""
    port = free_port()
    engine = servers.start_llama(port, logs / "llama-sampled.log")
    try:
        llama_load(engine, 2, stream=False)
        window = window_id()
        before = counters(engine.metrics(), "llamacpp:")
        start(collector, window, [engine.target], sample_interval_s=0.5)
        llama_load(engine, 2, stream=False)
        time.sleep(1.5)  # idle: samples of the old server's last count
        old = increase(before, counters(engine.metrics(), "llamacpp:"))
        engine.kill()
        engine = servers.start_llama(port, logs / "llama-sampled.log")
        time.sleep(1.5)  # samples of the new server before its first request
        llama_load(engine, 1, stream=False)
        new = counters(engine.metrics(), "llamacpp:")
        result = stop(collector, window)[engine.target]
    finally:
        engine.stop()
    assert result["restarts"] == 1 and result["exact"] is False
    assert RESTARTED_SAMPLED.format(n=1) in result["notes"]
    both = Counters(
        drafts=old.drafts + new.drafts, draft_tokens=old.draft_tokens + new.draft_tokens,
        accepted=old.accepted + new.accepted,
        per_position={p: old.per_position.get(p, 0) + new.per_position.get(p, 0)
                      for p in {*old.per_position, *new.per_position}},
    )  # fmt: skip
    assert result["data"] == expected_data(both)


def _scraped(prometheus: str, instance: str) -> bool | None:
    """True once Prometheus holds a successful scrape of `instance` (None until then)."""
    answer = clients.get(
        f"{prometheus}/api/v1/query", params={"query": f'up{{instance="{instance}"}} == 1'},
        timeout=10,
    ).json()  # fmt: skip
    return True if answer["data"]["result"] else None


@pytest.mark.prometheus
def test_a_window_read_from_a_real_prometheus_scraping_the_real_engines(
    vllm_engine: servers.Engine, llama_engine: servers.Engine, logs: Path
) -> None:
    """Prometheus scrapes both engines every second; a Prometheus-source window equals the
    engines' own /metrics increases over it (quiet seconds at both ends)."""
    engines = {
        vllm_engine.target: (vllm_engine, "vllm:"),
        llama_engine.target: (llama_engine, "llamacpp:"),
    }
    with (
        run_prometheus(list(engines)) as prometheus,
        run_collector(
            f"sqlite:///{logs}/prometheus-source.db", logs, SPECDEC_PROMETHEUS_URL=prometheus
        ) as collector,
    ):
        for target in engines:  # Prometheus' first successful scrape of each
            wait_for(partial(_scraped, prometheus, target), f"Prometheus scraping {target}")
        time.sleep(1)
        before = {t: counters(e.metrics(), prefix) for t, (e, prefix) in engines.items()}
        window = window_id()
        start(collector, window, list(engines), source="prometheus")
        time.sleep(1.5)
        vllm_load(vllm_engine, 1, stream=False)
        llama_load(llama_engine, 2, stream=False)
        time.sleep(1.5)
        after = {t: counters(e.metrics(), prefix) for t, (e, prefix) in engines.items()}
        results = stop(collector, window)
    for target, result in results.items():
        assert result["status"] == "ok", result
        assert result["data"] == expected_data(increase(before[target], after[target])), target


def test_a_vllm_restart_inside_an_unsampled_window_and_vllm_without_drafting(
    collector: CollectorProcess, logs: Path
) -> None:
    """vLLM's `_created` marks the restart; the figures are the new server's whole count.
    Without `--speculative-config` vLLM has no spec-decode families at all."""
    port = free_port()
    engine = servers.start_vllm(port, logs / "vllm-restart.log")
    try:
        window = window_id()
        start(collector, window, [engine.target])
        vllm_load(engine, 1, stream=False)
        engine.kill()
        engine = servers.start_vllm(port, logs / "vllm-restart.log")
        vllm_load(engine, 1, stream=False)
        result = stop(collector, window)[engine.target]
        truth = counters(engine.metrics(), "vllm:")
    finally:
        engine.stop()
    assert result["restarts"] == 1 and result["exact"] is False
    assert RESTARTED.format(n=1) in result["notes"]
    assert result["data"] == expected_data(truth)
    with servers.vllm(free_port(), logs / "vllm-nospec.log", spec=False) as plain:
        window = window_id()
        start(collector, window, [plain.target])
        usage: list[int] = []
        vllm_load(plain, 2, stream=False, accounts=False, usage=usage)
        result = stop(collector, window)[plain.target]
    assert (result["status"], result["error"]) == (
        "na", f"[before] {NO_METRICS}; [after] {NO_METRICS}"
    )  # fmt: skip
    # Without drafting, still its throughput: one token a step, the answers' own count.
    throughput = result["throughput"]
    assert throughput["generated_tokens"] == sum(usage) and throughput["finished_requests"] == 2
    assert throughput["accepted_token_share"] is None
    assert throughput["inter_token_latency_ms"] > 0
