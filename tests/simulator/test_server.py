"""The simulator: a vLLM-shaped payload whose counters grow, and `specdec simulate` for real."""

import asyncio
import json
import math
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime

import httpx
import pytest
import respx
from prometheus_client.parser import text_string_to_metric_families

from specdec_collector.cli.runner import generate_load
from specdec_collector.core.counters import Role
from specdec_collector.core.exposition import extract_spec_decode
from specdec_collector.simulator.server import SimulatedServer, default_acceptance
from tests.core.test_exposition import oracle
from tests.support import clients
from tests.support.collector import run_simulator, specdec_command


def test_payload_is_valid_exposition_with_created_and_histograms() -> None:
    server = SimulatedServer(instances=3, k=4, started=1_000.0)
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
        instances=2, k=3, drafts_per_s=100, acceptance=[0.9, 0.5, 0.2], started=0.0
    )
    series = extract_spec_decode(server.render(now=10.0))
    by = {
        (key.role, dict(key.labels).get("engine"), dict(key.labels).get("position")): v.value
        for key, v in series.items()
    }
    assert by[(Role.DRAFTS, "0", None)] == 1000
    assert by[(Role.DRAFTS, "1", None)] == 1100  # engine 1 drafts 10 % more
    assert by[(Role.DRAFT_TOKENS, "1", None)] == 3300
    assert by[(Role.ACCEPTED_PER_POSITION, "0", "1")] == 500
    assert by[(Role.ACCEPTED, "0", None)] == 900 + 500 + 200


def test_default_acceptance_falls_with_position() -> None:
    rates = default_acceptance(5)
    assert rates == sorted(rates, reverse=True)
    assert rates[0] == 0.85


@pytest.fixture
def simulator() -> Iterator[str]:
    with run_simulator("--instances", "2", "--k", "4", "--drafts-per-s", "400") as url:
        yield url.removeprefix("http://")


def _drafts(http: httpx.Client, target: str) -> float:
    series = extract_spec_decode(http.get(f"http://{target}/metrics").text)
    return sum(v.value or 0 for k, v in series.items() if k.role is Role.DRAFTS)


def test_simulate_and_serve_together(simulator: str, api: httpx.Client) -> None:
    """What a newcomer does with two terminals and the README's curl example."""
    assert api.post("/windows/demo/start", json={"targets": [simulator]}).status_code == 201
    with clients.client() as http:
        first = _drafts(http, simulator)
        while _drafts(http, simulator) < first + 400:  # wait for the counters, not a fixed time
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


# --- the OpenAI-compatible simulator, driven by real HTTP load -------------------------------

PROFILE = [0.9, 0.7, 0.5, 0.3]


def test_openai_endpoints_answer_like_a_server() -> None:
    with run_simulator(
        "--model-name", "sim-model", "--acceptance", "0.8,0.5", "--drafts-per-s", "0"
    ) as url:
        models = clients.get(f"{url}/v1/models").json()
        completion = clients.post(
            f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 20}
        ).json()
        chat = clients.post(
            f"{url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
        ).json()
        with clients.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json={"messages": [], "max_tokens": 9, "stream": True},
        ) as stream:
            lines = [line for line in stream.iter_lines() if line.startswith("data: ")]
    assert models["data"][0]["id"] == "sim-model"
    assert completion["object"] == "text_completion" and completion["model"] == "sim-model"
    assert completion["usage"]["completion_tokens"] >= 20
    assert (
        completion["choices"][0]["text"].count("tok ") == completion["usage"]["completion_tokens"]
    )
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert sum(c["choices"][0]["delta"]["content"].count("tok ") for c in chunks) >= 9


async def _stream_load(url: str, requests: int, max_tokens: int) -> tuple[int, int]:
    """Streamed completions; every chunk is one speculative step. (steps, tokens) seen."""
    steps = tokens = 0
    async with clients.async_client(base_url=url, timeout=60) as http:

        async def one(index: int) -> None:
            nonlocal steps, tokens
            body = {"prompt": f"q{index}", "max_tokens": max_tokens, "stream": True}
            async with http.stream("POST", "/v1/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        steps += 1
                        tokens += json.loads(line[6:])["choices"][0]["text"].count("tok ")

        for batch in range(0, requests, 16):
            await asyncio.gather(*(one(i) for i in range(batch, min(requests, batch + 16))))
    return steps, tokens


def test_collector_sees_the_configured_acceptance_profile(api: httpx.Client) -> None:
    """Real HTTP load on the simulator: the collector's numbers equal what the client saw,
    and its rates match the profile within sampling error."""
    with run_simulator(
        "--instances",
        "2",
        "--acceptance",
        ",".join(map(str, PROFILE)),
        "--drafts-per-s",
        "0",
        "--seed",
        "1",
    ) as url:
        target = url.removeprefix("http://")
        assert api.post("/windows/profile/start", json={"targets": [target]}).status_code == 201
        steps, tokens = asyncio.run(_stream_load(url, 300, 48))
        result = api.post("/windows/profile/stop").json()["targets"][0]["result"]
    data = result["data"]
    assert data["num_drafts"] == steps  # one draft per step, counted exactly
    assert data["draft_tokens"] == len(PROFILE) * steps
    assert data["accepted_tokens"] == tokens - steps  # each step emits accepted + 1
    for position, expected in enumerate(PROFILE):
        error = 4 * math.sqrt(expected * (1 - expected) / steps)  # four standard errors
        assert abs(data["per_position_acceptance_rates"][str(position)] - expected) <= error + 1e-4
    mean_accepted = sum(PROFILE)  # E[accepted per draft] = sum of the per-position rates
    assert abs(data["acceptance_rate"] - mean_accepted / len(PROFILE) * 100) <= 2.0


def test_engine_restart_is_counted_in_full_with_samples(api: httpx.Client) -> None:
    """`--reset-after 50` restarts engine 0 after the 50th request; samples catch it."""
    with run_simulator(
        "--instances",
        "2",
        "--acceptance",
        "0.8,0.4",
        "--drafts-per-s",
        "0",
        "--reset-after",
        "50",
        "--seed",
        "3",
    ) as url:
        target = url.removeprefix("http://")
        body = {"targets": [target], "sample_interval_s": 0.5}
        assert api.post("/windows/restart/start", json=body).status_code == 201

        def sampled_after(moment: float) -> None:
            while True:
                points = api.get("/windows/restart/samples").json()["series"][0]["points"]
                if any(
                    datetime.fromisoformat(p["taken_at"]).timestamp() > moment + 0.05
                    for p in points
                ):
                    return
                time.sleep(0.1)

        total_steps = 0
        for requests in (49, 1, 40):  # up to the restart, the request that triggers it, after it
            steps, _ = asyncio.run(_stream_load(url, requests, 24))
            total_steps += steps
            sampled_after(time.time())
        result = api.post("/windows/restart/stop").json()["targets"][0]["result"]
    # Engine 0's counts before its restart were sampled before it; the one request that
    # triggered the restart ran on engine 1. Nothing is lost, nothing counted twice.
    assert result["data"]["num_drafts"] == total_steps
    assert result["restarts"] >= 1 and result["series_resets"] >= result["restarts"]


def test_specdec_load_counts_the_servers_own_tokens_streamed_or_not() -> None:
    """The load command counts `usage.completion_tokens` (streamed: the last chunk, asked for
    with `stream_options.include_usage`), never the text; the simulator's text is `tok ` words
    of several tokens each, so counting words would differ."""
    with run_simulator("--drafts-per-s", "0") as url:
        for extra in ([], ["--stream"], ["--chat", "--stream"]):
            before = _generated(url)
            run = subprocess.run(
                [*specdec_command(), "load", "--url", url, "--requests", "6", "--concurrency", "2",
                 "--max-tokens", "40", *extra],
                capture_output=True, text=True, timeout=60, check=True,
            )  # fmt: skip
            served = _generated(url) - before  # the simulator's own count, from its /metrics
            assert served >= 6 * 40
            assert run.stdout.startswith(f"6 requests (0 failed), {served} tokens in "), extra


def _generated(url: str) -> int:
    text = clients.get(f"{url}/metrics").text
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "vllm:generation_tokens_total"
        )
    )


def test_specdec_load_says_when_a_stream_gave_no_usage() -> None:
    """A server that ignores `stream_options` (no usage chunk): its answers are not guessed."""

    def no_usage(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["temperature"] == 0.0 and body["stream_options"] == {"include_usage": True}
        chunk = {"choices": [{"index": 0, "text": "tok tok ", "finish_reason": "length"}]}
        return httpx.Response(200, text=f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n")

    with respx.mock(assert_all_called=True) as mock:
        mock.post("http://server.test/v1/completions").mock(side_effect=no_usage)
        summary = asyncio.run(generate_load("http://server.test", 3, 1, 8, stream=True))
    assert (summary.completion_tokens, summary.uncounted, summary.failed) == (0, 3, 0)


def test_specdec_load_sends_again_once_on_a_connection_closed_before_any_answer() -> None:
    """llama-server now and then closes a kept-alive connection as a request leaves on it."""
    answer = {"usage": {"completion_tokens": 8}}
    stale = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    with respx.mock() as mock:
        mock.post("http://server.test/v1/completions").mock(
            side_effect=[stale, httpx.Response(200, json=answer), stale, stale]
        )
        summary = asyncio.run(generate_load("http://server.test", 2, 1, 8))
    assert (summary.completion_tokens, summary.failed) == (8, 1)
    assert summary.first_failure == f"RemoteProtocolError: {stale}"


def test_specdec_load_sends_the_prompt_it_is_given_numbered() -> None:
    prompts: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        prompts.append(json.loads(request.content)["prompt"])
        return httpx.Response(200, json={"usage": {"completion_tokens": 4}})

    with respx.mock(assert_all_called=True) as mock:
        mock.post("http://server.test/v1/completions").mock(side_effect=answer)
        asyncio.run(generate_load("http://server.test", 3, 1, 8, prompt="Text {index}: go on"))
    assert sorted(prompts) == ["Text 0: go on", "Text 1: go on", "Text 2: go on"]
