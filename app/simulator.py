"""A vLLM-shaped `/metrics` server whose spec-decode counters grow while it runs.

`specdec simulate` serves it so that a newcomer sees real numbers without a GPU. The payload
has the layout of a vLLM V1 server: process and Python collectors, per-engine gauges and
histograms, and the four spec-decode counters, each with its `_created` sibling family.
Counts grow with time, not with scrapes: engine `e` drafts `drafts_per_s * (1 + e / 10)`
drafts a second, every draft proposes `k` tokens and position `i` is accepted at
`acceptance[i]`, the way vLLM counts them (accepted = sum over positions).
"""

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def default_acceptance(k: int) -> list[float]:
    """Per-position acceptance falling with the position, as drafters behave."""
    return [round(0.85 * 0.8**position, 4) for position in range(k)]


@dataclass
class SimulatedServer:
    """The counters of one simulated vLLM server with `engines` data-parallel engines."""

    engines: int = 1
    k: int = 5
    drafts_per_s: float = 50.0
    acceptance: Sequence[float] = ()
    model_name: str = MODEL
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if not self.acceptance:
            self.acceptance = default_acceptance(self.k)
        if len(self.acceptance) != self.k:
            raise ValueError("acceptance needs one rate per position")

    def drafts(self, engine: int, now: float) -> int:
        """Drafts engine `engine` has made by `now`."""
        return math.floor(max(0.0, now - self.started) * self.drafts_per_s * (1 + engine / 10))

    def render(self, now: float | None = None) -> str:
        """The exposition text at `now` (default: the current time)."""
        now = time.time() if now is None else now
        out: list[str] = []
        _process_block(out, self.started, now)
        for engine in range(self.engines):
            _engine_gauges(out, engine, self.model_name)
        _histograms(out, self.engines, self.model_name, now - self.started)
        _spec_decode(out, self, now)
        return "\n".join(out) + "\n"


def _family(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def _labels(engine: int, model: str, **extra: str) -> str:
    pairs = {"engine": str(engine), "model_name": model, **extra}
    return ",".join(f'{name}="{value}"' for name, value in pairs.items())


def _process_block(out: list[str], started: float, now: float) -> None:
    for generation in range(3):
        if generation == 0:
            _family(
                out, "python_gc_objects_collected_total", "counter", "Objects collected during gc"
            )
        collected = 192.0 * (generation + 1)
        out.append(f'python_gc_objects_collected_total{{generation="{generation}"}} {collected}')
    _family(
        out,
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
    )
    out.append(f"process_start_time_seconds {started:.2f}")
    _family(
        out,
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
    )
    out.append(f"process_cpu_seconds_total {max(0.0, now - started) * 0.3:.2f}")


def _engine_gauges(out: list[str], engine: int, model: str) -> None:
    for name, help_text, value in (
        ("vllm:num_requests_running", "Number of requests in model execution batches.", 4.0),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 0.0),
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 0.0123),
    ):
        _family(out, name, "gauge", help_text)
        out.append(f"{name}{{{_labels(engine, model)}}} {value}")


def _histograms(out: list[str], engines: int, model: str, elapsed: float) -> None:
    count = max(0, int(elapsed * 2))
    for name, buckets in (
        ("vllm:time_to_first_token_seconds", _LATENCY_BUCKETS),
        ("vllm:inter_token_latency_seconds", _LATENCY_BUCKETS),
        ("vllm:e2e_request_latency_seconds", _LATENCY_BUCKETS),
        ("vllm:request_generation_tokens", _TOKEN_BUCKETS),
        ("vllm:request_prompt_tokens", _TOKEN_BUCKETS),
    ):
        _family(out, name, "histogram", f"Histogram of {name.split(':')[1].replace('_', ' ')}.")
        for engine in range(engines):
            labels = _labels(engine, model)
            for bound in buckets:
                share = min(1.0, float(bound) / float(buckets[len(buckets) // 2]))
                out.append(
                    f'{name}_bucket{{{labels},le="{float(bound)}"}} {float(int(count * share))}'
                )
            out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(count)}')
            out.append(f"{name}_count{{{labels}}} {float(count)}")
            out.append(f"{name}_sum{{{labels}}} {count * 0.173:.6f}")


def _spec_decode(out: list[str], server: SimulatedServer, now: float) -> None:
    drafts = [server.drafts(engine, now) for engine in range(server.engines)]
    accepted_at = [[math.floor(d * rate) for rate in server.acceptance] for d in drafts]
    draft_tokens = [d * server.k for d in drafts]
    accepted = [sum(at) for at in accepted_at]
    families = (
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", drafts),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", draft_tokens),
        ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", accepted),
    )
    for name, help_text, per_engine in families:
        _family(out, f"{name}_total", "counter", help_text)
        for engine, value in enumerate(per_engine):
            out.append(f"{name}_total{{{_labels(engine, server.model_name)}}} {float(value)}")
        _family(out, f"{name}_created", "gauge", help_text)
        for engine in range(server.engines):
            out.append(f"{name}_created{{{_labels(engine, server.model_name)}}} {server.started}")
    name = "vllm:spec_decode_num_accepted_tokens_per_pos"
    help_text = "Accepted tokens per draft position."
    for suffix, kind in (("_total", "counter"), ("_created", "gauge")):
        _family(out, f"{name}{suffix}", kind, help_text)
        for engine in range(server.engines):
            for position in range(server.k):
                labels = _labels(engine, server.model_name, position=str(position))
                sample = accepted_at[engine][position] if suffix == "_total" else server.started
                out.append(f"{name}{suffix}{{{labels}}} {float(sample)}")


def create_simulator_app(server: SimulatedServer) -> FastAPI:
    """An app that serves `server`'s payload at `/metrics`."""
    app = FastAPI(title="specdec simulator", openapi_url=None, docs_url=None, redoc_url=None)

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        """The vLLM-shaped exposition text, counters as of now."""
        return PlainTextResponse(server.render(), media_type=CONTENT_TYPE)

    return app
