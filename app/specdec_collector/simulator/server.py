"""The simulated server: OpenAI-compatible endpoints and a vLLM-shaped `/metrics`.

`specdec simulate` serves it so that a newcomer sees real numbers without a GPU. The payload
has the layout of a vLLM V1 server: process and Python collectors, per-instance gauges and
histograms, and the four spec-decode counters, each with its `_created` sibling family.

Its witnesses (prompt and generated tokens, finished requests, time to first token,
inter-token latency and tokens per step) count the requests served, with `step_seconds` a
step; without `spec_decoding` it is a vLLM without spec decoding: one token a step.

The spec-decode counters move two ways:
- with time: instance `e` drafts `drafts_per_s * (1 + e / 10)` drafts a second (0 turns it off),
  position `i` accepted in the share `acceptance[i]` of them;
- with requests to `/v1/completions` and `/v1/chat/completions`: each request goes to the next
  instance, which generates `max_tokens` tokens in speculative steps. A step drafts `k` tokens;
  one uniform draw `u` accepts the positions `i` with `u < acceptance[i]` (so position `i` is
  accepted with probability `acceptance[i]`, and only after every earlier one), and the step
  emits the accepted tokens plus one, as vLLM does. `reset_after` requests restart instance 0
  (its counters fall to zero and its `_created` moves on), to imitate an instance restart.
"""

import itertools
import json
import math
import random
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel

from specdec_collector.simulator.families import METRICS_PATHS
from specdec_collector.simulator.payload import render_metrics

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def default_acceptance(k: int) -> list[float]:
    """Per-position acceptance falling with the position, as drafters behave."""
    return [round(0.85 * 0.8**position, 4) for position in range(k)]


def check_acceptance(rates: Sequence[float]) -> list[float]:
    """Rates in [0, 1] that do not rise with the position (each needs the one before)."""
    values = [float(rate) for rate in rates]
    if any(not 0 <= rate <= 1 for rate in values):
        raise ValueError("acceptance rates are between 0 and 1")
    if any(later > earlier for earlier, later in itertools.pairwise(values)):
        raise ValueError("acceptance rates cannot rise with the position")
    return values


@dataclass
class InstanceCounters:
    """What one instance counted from requests since it (re)started."""

    created: float
    drafts: int = 0
    accepted_at: list[int] = field(default_factory=list)
    requests: int = 0
    tokens: int = 0  # emitted by its steps
    steps: int = 0  # forward passes: one a step of a request
    prompt_tokens: int = 0
    # Each request's own acceptance length and per-position rates (percent), summed: Modular
    # MAX's histograms observe one per batch, and the simulator's batch is one request.
    length_sum: float = 0.0
    rate_sum: list[float] = field(default_factory=list)


@dataclass
class SimulatedServer:
    """The counters of one simulated vLLM server with `instances` data-parallel instances."""

    instances: int = 1
    k: int = 5
    drafts_per_s: float = 50.0
    acceptance: Sequence[float] = ()
    model_name: str = MODEL
    reset_after: int | None = None
    started: float = field(default_factory=time.time)
    seed: int | None = None
    # Whose families `/metrics` serves (see `simulator.families`).
    engine: str = "vllm"
    # As vLLM's `--per-request-spec-decode-metrics summary`: each answer tells its request's
    # drafts under `metrics.speculative_decoding`.
    per_request_metrics: bool = False
    # Seconds each step of a request takes (slept before the answer): what its inter-token
    # latencies record. False `spec_decoding`: a vLLM without it, one token a step and no
    # spec-decode families (the other side of a speedup).
    step_seconds: float = 0.0
    spec_decoding: bool = True

    def __post_init__(self) -> None:
        if self.engine not in METRICS_PATHS:
            raise ValueError(f"engine is one of {', '.join(METRICS_PATHS)}")
        if self.engine != "vllm":
            self.drafts_per_s = 0.0  # the other engines count requests only
        self.acceptance = check_acceptance(self.acceptance or default_acceptance(self.k))
        if len(self.acceptance) != self.k:
            raise ValueError("acceptance needs one rate per position")
        if not 0 <= self.step_seconds <= 10:
            raise ValueError("a step takes between 0 and 10 000 ms")
        self._lock = threading.Lock()
        self._random = random.Random(self.seed)
        self._next_instance = 0
        self._requests = 0
        self.counters = [
            InstanceCounters(created=self.started, accepted_at=[0] * self.k)
            for _ in range(self.instances)
        ]

    def drafts(self, instance: int, now: float) -> int:
        """Drafts instance `instance` has made with time by `now`, since it (re)started."""
        since = max(self.started, self.counters[instance].created)
        return math.floor(max(0.0, now - since) * self.drafts_per_s * (1 + instance / 10))

    def generate(self, max_tokens: int, prompt_tokens: int = 0) -> list[int]:
        """Serve one request: the tokens emitted per speculative step, counted on an instance;
        each step takes `step_seconds`."""
        steps = self._generate(max_tokens, prompt_tokens)
        if self.step_seconds > 0:
            time.sleep(self.step_seconds * len(steps))
        return steps

    def _generate(self, max_tokens: int, prompt_tokens: int) -> list[int]:
        with self._lock:
            instance = self._next_instance
            self._next_instance = (instance + 1) % self.instances
            counters = self.counters[instance]
            steps: list[int] = []
            produced = 0
            at = [0] * self.k
            while produced < max(1, max_tokens):
                draw = self._random.random()
                if not self.spec_decoding:
                    steps.append(1)
                    produced += 1
                    continue
                accepted = sum(draw < rate for rate in self.acceptance)
                counters.drafts += 1
                for position in range(accepted):
                    counters.accepted_at[position] += 1
                    at[position] += 1
                steps.append(accepted + 1)
                produced += accepted + 1
            counters.requests += 1
            counters.tokens += produced
            counters.steps += len(steps)
            counters.prompt_tokens += prompt_tokens
            counters.length_sum += produced / len(steps)
            if not counters.rate_sum:
                counters.rate_sum = [0.0] * self.k
            for position, count in enumerate(at):
                counters.rate_sum[position] += count / len(steps) * 100
            self._requests += 1
            if self.reset_after and self._requests % self.reset_after == 0:
                # Engine 0 restarts: counters from zero, a new `_created`.
                self.counters[0] = InstanceCounters(created=time.time(), accepted_at=[0] * self.k)
            return steps

    def render(self, now: float | None = None) -> str:
        """The exposition text at `now` (default: the current time)."""
        now = time.time() if now is None else now
        with self._lock:
            return render_metrics(self, now)


class CompletionRequest(BaseModel):
    """The fields of an OpenAI completion request the simulator uses (others are ignored)."""

    model: str | None = None
    prompt: str | list[str] | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool = False
    # OpenAI's `{"include_usage": true}`: a last chunk with the usage and no choices.
    stream_options: dict[str, Any] | None = None

    def tokens(self) -> int:
        return max(1, min(self.max_completion_tokens or self.max_tokens or 16, 32768))

    def prompt_tokens(self) -> int:
        text = json.dumps(self.messages) if self.messages is not None else json.dumps(self.prompt)
        return max(1, len(text) // 4)


def _completion(server: SimulatedServer, body: CompletionRequest, chat: bool) -> Any:
    steps = server.generate(body.tokens(), body.prompt_tokens())
    created, model = int(time.time()), body.model or server.model_name
    kind = "chat.completion" if chat else "text_completion"
    ident = f"{'chatcmpl' if chat else 'cmpl'}-{int(time.time() * 1e6)}"
    usage = {
        "prompt_tokens": body.prompt_tokens(),
        "completion_tokens": sum(steps),
        "total_tokens": body.prompt_tokens() + sum(steps),
    }
    extra = {"metrics": _spec_decode_metrics(steps, server.k)} if server.per_request_metrics else {}

    def choice(text: str, last: bool, streamed: bool) -> dict[str, Any]:
        finish = "length" if last else None
        if chat:
            key = "delta" if streamed else "message"
            return {
                "index": 0,
                key: {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

    if not body.stream:
        text = "".join("tok " * step for step in steps)
        return JSONResponse(
            {
                "id": ident,
                "object": kind,
                "created": created,
                "model": model,
                "choices": [choice(text, True, False)],
                "usage": usage,
                **extra,
            }
        )

    def events() -> Iterator[str]:
        chunk_kind = "chat.completion.chunk" if chat else "text_completion"
        for index, step in enumerate(steps):
            chunk = {
                "id": ident,
                "object": chunk_kind,
                "created": created,
                "model": model,
                "choices": [choice("tok " * step, index == len(steps) - 1, True)],
            }
            yield f"data: {json.dumps(chunk)}\n\n"
        if (body.stream_options or {}).get("include_usage"):
            last = {
                "id": ident,
                "object": chunk_kind,
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage,
                **extra,
            }
            yield f"data: {json.dumps(last)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def _spec_decode_metrics(steps: Sequence[int], k: int) -> dict[str, Any]:
    """vLLM's per-request `metrics` of a request's steps (`RequestSpecDecodeMetrics.to_dict`
    of vllm/v1/metrics/stats.py): a histogram of accepted draft tokens per step, and sums."""
    histogram = [0] * (k + 1)
    for step in steps:
        histogram[step - 1] += 1
    accepted = sum(step - 1 for step in steps)
    return {
        "speculative_decoding": {
            "mean_acceptance_length": 1 + accepted / len(steps),
            "draft_acceptance_rate": accepted / (len(steps) * k),
            "acceptance_histogram": histogram,
            "num_spec_steps": len(steps),
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": len(steps) * k,
            "num_spec_tokens": k,
        }
    }


def create_simulator_app(server: SimulatedServer) -> FastAPI:
    """An app that serves the OpenAI endpoints and `server`'s payload at `/metrics`."""
    app = FastAPI(title="specdec simulator", openapi_url=None, docs_url=None, redoc_url=None)

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        """The one model served."""
        model = {
            "id": server.model_name,
            "object": "model",
            "created": int(server.started),
            "owned_by": "specdec-simulator",
        }
        return {"object": "list", "data": [model]}

    @app.post("/v1/completions")
    def completions(body: CompletionRequest) -> Any:
        """A text completion of `max_tokens` tokens, streamed or not."""
        return _completion(server, body, chat=False)

    @app.post("/v1/chat/completions")
    def chat_completions(body: CompletionRequest) -> Any:
        """A chat completion of `max_tokens` tokens, streamed or not."""
        return _completion(server, body, chat=True)

    @app.get(METRICS_PATHS[server.engine], response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        """The instance's exposition text, counters as of now."""
        return PlainTextResponse(server.render(), media_type=CONTENT_TYPE)

    if server.engine == "trtllm":

        @app.get("/metrics")
        def trtllm_json_stream() -> JSONResponse:
            """TensorRT-LLM's own /metrics: iteration stats as JSON, emptied by every read."""
            return JSONResponse([])

    return app
