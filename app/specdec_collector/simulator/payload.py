"""The simulated server's `/metrics` text: the layout of a vLLM V1 server's (or another
engine's, `families`), rendered from its counters at a moment."""

import math
from typing import TYPE_CHECKING

from specdec_collector.simulator import families

if TYPE_CHECKING:
    from specdec_collector.simulator.server import SimulatedServer

_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def render_metrics(server: "SimulatedServer", now: float) -> str:
    """The exposition text of `server` at `now` (its lock held by the caller)."""
    out: list[str] = []
    _process_block(out, server.started, now)
    if server.engine != "vllm":
        _other_engine(out, server)
        return "\n".join(out) + "\n"
    for instance in range(server.instances):
        _instance_gauges(out, instance, server.model_name)
    _histograms(out, server.instances, server.model_name, now - server.started)
    _witnesses(out, server, now)
    if server.spec_decoding:
        _spec_decode(out, server, now)
    return "\n".join(out) + "\n"


def _other_engine(out: list[str], server: "SimulatedServer") -> None:
    counted, k = server.counters, server.k
    if server.engine == "llamacpp":
        families.llamacpp(out, counted, k)
    elif server.engine == "trtllm":
        families.trtllm(out, counted, k)
    elif server.engine == "sglang":
        families.sglang(out, counted, k, server.model_name)
    elif server.engine == "lmdeploy":
        families.lmdeploy(out, counted, k, server.model_name)
    elif server.engine in families.MORE:
        families.MORE[server.engine](out, counted, k, server.model_name)
    else:
        families.vllm_v0(out, counted, k, server.model_name)


def _family(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def _labels(instance: int, model: str, **extra: str) -> str:
    pairs = {"engine": str(instance), "model_name": model, **extra}
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


def _instance_gauges(out: list[str], instance: int, model: str) -> None:
    for name, help_text, value in (
        ("vllm:num_requests_running", "Number of requests in model execution batches.", 4.0),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 0.0),
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 0.0123),
    ):
        _family(out, name, "gauge", help_text)
        out.append(f"{name}{{{_labels(instance, model)}}} {value}")


def _histograms(out: list[str], instances: int, model: str, elapsed: float) -> None:
    count = max(0, int(elapsed * 2))
    for name, buckets in (
        ("vllm:request_generation_tokens", _TOKEN_BUCKETS),
        ("vllm:request_prompt_tokens", _TOKEN_BUCKETS),
    ):
        _family(out, name, "histogram", f"Histogram of {name.split(':')[1].replace('_', ' ')}.")
        for instance in range(instances):
            labels = _labels(instance, model)
            for bound in buckets:
                share = min(1.0, float(bound) / float(buckets[len(buckets) // 2]))
                out.append(
                    f'{name}_bucket{{{labels},le="{float(bound)}"}} {float(int(count * share))}'
                )
            out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(count)}')
            out.append(f"{name}_count{{{labels}}} {float(count)}")
            out.append(f"{name}_sum{{{labels}}} {count * 0.173:.6f}")


def _timed_drafts(server: "SimulatedServer", now: float) -> list[int]:
    """Each instance's drafts with time (none without spec decoding)."""
    if not server.spec_decoding:
        return [0] * server.instances
    return [server.drafts(instance, now) for instance in range(server.instances)]


def _witnesses(out: list[str], server: "SimulatedServer", now: float) -> None:
    """vLLM's counters and histograms that exist with spec decoding or without, as the served
    requests and the timed drafts (one step each) made them: prompt tokens and finished
    requests (by reason, and as the count of their end-to-end latencies); a first token and a
    time to it per request; an inter-token latency of
    `step_seconds` per later step (none where steps take no time); the tokens of every step."""
    timed = _timed_drafts(server, now)
    for name, help_text, field_name in (
        ("vllm:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens"),
        ("vllm:request_success", "Count of successfully processed requests.", "requests"),
    ):
        _family(out, f"{name}_total", "counter", help_text)
        for instance, counted in enumerate(server.counters):
            extra = {"finished_reason": "length"} if field_name == "requests" else {}
            labels = _labels(instance, server.model_name, **extra)
            out.append(f"{name}_total{{{labels}}} {float(getattr(counted, field_name))}")
    histograms = [
        ("vllm:e2e_request_latency_seconds", "requests", "requests_time"),
        ("vllm:time_to_first_token_seconds", "requests", "first"),
        ("vllm:iteration_tokens_total", "steps", "tokens"),
    ]
    if server.step_seconds > 0:  # steps that take no time have no latency to tell
        histograms.append(("vllm:inter_token_latency_seconds", "later_steps", "later"))
    for name, count_of, sum_of in histograms:
        _family(out, name, "histogram", f"Histogram of {name.split(':')[1].replace('_', ' ')}.")
        for instance, counted in enumerate(server.counters):
            steps = counted.steps + timed[instance]
            count = {
                "requests": counted.requests,
                "later_steps": steps - counted.requests,
                "steps": steps,
            }[count_of]
            total = {
                "requests_time": counted.steps * server.step_seconds,
                "first": counted.requests * server.step_seconds,
                "later": (steps - counted.requests) * server.step_seconds,
                "tokens": counted.prompt_tokens + counted.tokens,
            }[sum_of]
            labels = _labels(instance, server.model_name)
            out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(count)}')
            out.append(f"{name}_count{{{labels}}} {float(count)}")
            out.append(f"{name}_sum{{{labels}}} {float(total)}")
            out.append(f"{name}_created{{{labels}}} {counted.created}")
    if not server.spec_decoding:  # the spec-decode block holds them otherwise
        _family(out, "vllm:generation_tokens_total", "counter", "Number of generation tokens.")
        for instance, counted in enumerate(server.counters):
            labels = _labels(instance, server.model_name)
            out.append(f"vllm:generation_tokens_total{{{labels}}} {float(counted.tokens)}")


def _spec_decode(out: list[str], server: "SimulatedServer", now: float) -> None:
    timed = _timed_drafts(server, now)
    drafts = [timed[e] + server.counters[e].drafts for e in range(server.instances)]
    accepted_at = [
        [
            math.floor(timed[e] * rate) + server.counters[e].accepted_at[i]
            for i, rate in enumerate(server.acceptance)
        ]
        for e in range(server.instances)
    ]
    draft_tokens = [d * server.k for d in drafts]
    accepted = [sum(at) for at in accepted_at]
    created = [server.counters[e].created for e in range(server.instances)]
    # Generated tokens: one a draft plus its accepted ones, for the timed drafts as served ones.
    generated = [
        server.counters[e].tokens
        + timed[e]
        + sum(accepted_at[e])
        - sum(server.counters[e].accepted_at)
        for e in range(server.instances)
    ]
    families = (
        ("vllm:generation_tokens", "Number of generation tokens processed.", generated),
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", drafts),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", draft_tokens),
        ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", accepted),
    )
    for name, help_text, per_instance in families:
        _family(out, f"{name}_total", "counter", help_text)
        for instance, value in enumerate(per_instance):
            out.append(f"{name}_total{{{_labels(instance, server.model_name)}}} {float(value)}")
        _family(out, f"{name}_created", "gauge", help_text)
        for instance in range(server.instances):
            out.append(
                f"{name}_created{{{_labels(instance, server.model_name)}}} {created[instance]}"
            )
    name = "vllm:spec_decode_num_accepted_tokens_per_pos"
    help_text = "Accepted tokens per draft position."
    for suffix, kind in (("_total", "counter"), ("_created", "gauge")):
        _family(out, f"{name}{suffix}", kind, help_text)
        for instance in range(server.instances):
            for position in range(server.k):
                labels = _labels(instance, server.model_name, position=str(position))
                sample: float = (
                    accepted_at[instance][position] if suffix == "_total" else created[instance]
                )
                out.append(f"{name}{suffix}{{{labels}}} {float(sample)}")
