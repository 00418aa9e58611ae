"""The spec-decode families of engines other than vLLM V1, as `specdec simulate --engine` serves
them: each engine's own names, labels, endpoint and number printing (docs/engines.md).

The counts are the simulated server's (`simulator.server.EngineCounters`), which move with
requests only (no time-based drafts for these engines): each request is counted when it
completes, as llama.cpp and SGLang count. Per engine:
- `llamacpp` (`/metrics`): the four counters, printed with `%g` (six significant digits, as
  llama.cpp prints them); the per-position series appear after the first speculative request.
- `trtllm` (`/prometheus/metrics`): draft and accepted token counters, and drafted / accepted
  tokens per `token_position` of finished requests; nothing before the first request.
- `sglang` (`/metrics`): verify calls (one per draft), generated tokens (1 + the tokens of its
  steps, per request) and requests, with the interval gauges `spec_accept_length` /
  `spec_accept_rate` beside them.
- `lmdeploy` (`/metrics`): vLLM's four counters under `lmdeploy:`, labels `model_name` and
  `engine` (the DP rank), the per-position series from a position's first count, and the
  lifetime gauges `spec_decode_mean_accept_rate` / `mean_accept_length` beside them.
- `vllm-v0` (`/metrics`): V0's counters (draft, accepted and emitted tokens) and its lifetime
  gauges `spec_decode_draft_acceptance_rate` and `spec_decode_efficiency`.
"""

from collections.abc import Sequence
from typing import Protocol

#: Engines the simulator serves, and the path of each one's Prometheus metrics.
METRICS_PATHS: dict[str, str] = {
    "vllm": "/metrics",
    "llamacpp": "/metrics",
    "trtllm": "/prometheus/metrics",
    "sglang": "/metrics",
    "vllm-v0": "/metrics",
    "lmdeploy": "/metrics",
}


class Counted(Protocol):
    """What one simulated data-parallel instance counted from requests."""

    drafts: int
    accepted_at: list[int]
    requests: int
    tokens: int


def _counter(out: list[str], name: str, samples: Sequence[tuple[str, float]], fmt: str) -> None:
    out.append(f"# HELP {name} {name.replace('_', ' ')}.")
    out.append(f"# TYPE {name} counter")
    out += [f"{name}{labels} {value:{fmt}}" for labels, value in samples]


def _sum(instances: Sequence[Counted], field: str) -> float:
    return float(sum(getattr(instance, field) for instance in instances))


def llamacpp(out: list[str], instances: Sequence[Counted], k: int) -> None:
    """llama.cpp: one server, no labels; `%g` printing (six significant digits)."""
    drafts = _sum(instances, "drafts")
    at = [float(sum(e.accepted_at[i] for e in instances)) for i in range(k)]
    name = "llamacpp:spec_decode_num"
    _counter(out, f"{name}_drafts_total", [("", drafts)], "g")
    _counter(out, f"{name}_draft_tokens_total", [("", drafts * k)], "g")
    _counter(out, f"{name}_accepted_tokens_total", [("", sum(at))], "g")
    if _sum(instances, "requests"):
        samples = [(f'{{position="{i}"}}', value) for i, value in enumerate(at)]
        _counter(out, f"{name}_accepted_tokens_per_pos_total", samples, "g")


def trtllm(out: list[str], instances: Sequence[Counted], k: int) -> None:
    """TensorRT-LLM: its series appear after the first speculative iteration."""
    drafts = _sum(instances, "drafts")
    if not drafts:
        return
    at = [float(sum(e.accepted_at[i] for e in instances)) for i in range(k)]
    name = "trtllm_spec_decode"
    _counter(out, f"{name}_num_draft_tokens_total", [("", drafts * k)], ".1f")
    _counter(out, f"{name}_num_accepted_tokens_total", [("", sum(at))], ".1f")
    drafted = [(f'{{token_position="{i}"}}', drafts) for i in range(k)]
    _counter(out, f"{name}_drafted_tokens_total", drafted, ".1f")
    accepted = [(f'{{token_position="{i}"}}', value) for i, value in enumerate(at)]
    _counter(out, f"{name}_accepted_tokens_total", accepted, ".1f")


def sglang(out: list[str], instances: Sequence[Counted], k: int, model: str) -> None:
    """SGLang: verify calls, generated tokens and requests (at completion), and its gauges."""
    labels = f'{{model_name="{model}"}}'
    calls, requests = _sum(instances, "drafts"), _sum(instances, "requests")
    generated = requests + _sum(instances, "tokens")  # 1 + the tokens of its steps, per request
    _counter(out, "sglang:spec_verify_calls_total", [(labels, calls)], ".1f")
    _counter(out, "sglang:generation_tokens_total", [(labels, generated)], ".1f")
    _counter(out, "sglang:num_requests_total", [(labels, requests)], ".1f")
    length = (generated - requests) / calls if calls else 0.0
    for gauge, value in (("spec_accept_length", length), ("spec_accept_rate", 0.0)):
        out += [f"# TYPE sglang:{gauge} gauge", f"sglang:{gauge}{labels} {value:.4f}"]
    out += [
        "# TYPE sglang:time_to_first_token_seconds histogram",
        f'sglang:time_to_first_token_seconds_bucket{{le="0.1",model_name="{model}"}} {requests}',
    ]


def vllm_v0(out: list[str], instances: Sequence[Counted], k: int, model: str) -> None:
    """vLLM V0: its counters (running totals added up) and lifetime gauges."""
    labels = f'{{model_name="{model}"}}'
    drafts = _sum(instances, "drafts")
    accepted = float(sum(sum(e.accepted_at) for e in instances))
    name = "vllm:spec_decode_num"
    _counter(out, f"{name}_draft_tokens_total", [(labels, drafts * k)], ".1f")
    _counter(out, f"{name}_accepted_tokens_total", [(labels, accepted)], ".1f")
    _counter(out, f"{name}_emitted_tokens_total", [(labels, accepted + drafts)], ".1f")
    rate = accepted / (drafts * k) if drafts else 0.0
    efficiency = (accepted + drafts) / (drafts * (k + 1)) if drafts else 0.0
    for gauge, value in (("draft_acceptance_rate", rate), ("efficiency", efficiency)):
        out += [
            f"# TYPE vllm:spec_decode_{gauge} gauge",
            f"vllm:spec_decode_{gauge}{labels} {value}",
        ]


def lmdeploy(out: list[str], instances: Sequence[Counted], k: int, model: str) -> None:
    """LMDeploy: the three counters and the two lifetime gauges from the start, at 0 (made with
    their labels in `PrometheusStatLogger.__init__`), one series per DP rank; a rank's
    per-position series from its first speculative step (`record_specdecode`)."""
    ranks = [(f'{{model_name="{model}",engine="{i}"}}', e) for i, e in enumerate(instances)]
    name = "lmdeploy:spec_decode"
    _counter(out, f"{name}_num_drafts_total", [(lb, float(e.drafts)) for lb, e in ranks], ".1f")
    tokens = [(lb, float(e.drafts * k)) for lb, e in ranks]
    _counter(out, f"{name}_num_draft_tokens_total", tokens, ".1f")
    accepted = [(lb, float(sum(e.accepted_at))) for lb, e in ranks]
    _counter(out, f"{name}_num_accepted_tokens_total", accepted, ".1f")
    per_position = [
        (lb[:-1] + f',position="{i}"}}', float(e.accepted_at[i]))
        for lb, e in ranks
        if e.drafts
        for i in range(k)
    ]
    if per_position:
        _counter(out, f"{name}_num_accepted_tokens_per_pos_total", per_position, ".1f")
    # Lifetime ratios of the counters (`record_specdecode` sets them from the totals).
    rates = [(lb, sum(e.accepted_at) / (e.drafts * k) if e.drafts else 0.0) for lb, e in ranks]
    lengths = [(lb, 1 + sum(e.accepted_at) / e.drafts if e.drafts else 0.0) for lb, e in ranks]
    for gauge, samples in (("mean_accept_rate", rates), ("mean_accept_length", lengths)):
        out.append(f"# TYPE {name}_{gauge} gauge")
        out += [f"{name}_{gauge}{labels} {value}" for labels, value in samples]
