"""The spec-decode families of engines other than vLLM V1, as `specdec simulate --engine` serves
them: each engine's own names, labels, endpoint and number printing (docs/engines.md).

The counts are the simulated server's (`simulator.server.InstanceCounters`), which move with
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
- `max`: Modular MAX's histograms `maxserve_spec_decode_avg_acceptance_length` and
  `..._acceptance_rate_per_position_percent{position}`, one observation per request (the
  simulator's batch), their `_sum` and `_count` (and a bucket), from the first request on.
- `fastdeploy`: accepted, emitted (accepted + one per step) and, as with MTP, draft tokens,
  unlabelled, from the first request on; its lifetime gauges beside them.
- `tgi`: the histogram `tgi_request_skipped_tokens`, buckets 0..k, one observation per step
  and one of 0 for each request's first token (TGI records its prefill's generation too).
- `uniserve`: vLLM's four counters under `uniserve:`, in OpenMetrics with a final `# EOF`.
- `dspark`: vLLM's families with `vllm:spec_decode_num_drafts_by_draft_length{draft_length}`
  (every simulated draft is k long).
- `vllm-diffusion`: vLLM's diffusion counters: a step is a denoising step over k + 1 canvas
  positions that commits its tokens.
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
    "max": "/metrics",
    "fastdeploy": "/metrics",
    "tgi": "/metrics",
    "uniserve": "/metrics",
    "dspark": "/metrics",
    "vllm-diffusion": "/metrics",
}


class Counted(Protocol):
    """What one simulated data-parallel instance counted from requests."""

    drafts: int
    accepted_at: list[int]
    requests: int
    tokens: int
    length_sum: float
    rate_sum: list[float]


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
    # SGLang 0.5.23's active draft size: k drafted tokens and the verified block's root.
    gauges = (
        ("spec_accept_length", length),
        ("spec_accept_rate", 0.0),
        ("spec_num_draft_tokens", k + 1.0),
    )
    for gauge, value in gauges:
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


def _totals(instances: Sequence[Counted], k: int) -> tuple[float, float, list[float]]:
    """Drafts, accepted tokens and accepted at each position, over every instance."""
    at = [float(sum(e.accepted_at[i] for e in instances)) for i in range(k)]
    return _sum(instances, "drafts"), sum(at), at


def _histogram(
    out: list[str], name: str, labels: str, count: float, total: float, top: float
) -> None:
    """A histogram's samples: one bucket holding every observation, `_sum`, `_count`."""
    pairs = labels[1:-1] + "," if labels else ""
    out.append(f'{name}_bucket{{{pairs}le="{top}"}} {count}')
    out.append(f'{name}_bucket{{{pairs}le="+Inf"}} {count}')
    out.append(f"{name}_sum{labels} {total}")
    out.append(f"{name}_count{labels} {count}")


def max_serve(out: list[str], instances: Sequence[Counted], k: int, model: str) -> None:
    """Modular MAX: OpenTelemetry histograms, present from their first observation."""
    requests = _sum(instances, "requests")
    if not requests:
        return
    scope = 'otel_scope_name="max.serve"'
    name = "maxserve_spec_decode_avg_acceptance_length"
    out.append(f"# TYPE {name} histogram")
    _histogram(out, name, f"{{{scope}}}", requests, _sum(instances, "length_sum"), float(k + 1))
    name = "maxserve_spec_decode_acceptance_rate_per_position_percent"
    out.append(f"# TYPE {name} histogram")
    for position in range(k):
        total = sum(e.rate_sum[position] for e in instances if e.rate_sum)
        _histogram(out, name, f'{{{scope},position="{position}"}}', requests, total, 100.0)


def fastdeploy(out: list[str], instances: Sequence[Counted], k: int, model: str) -> None:
    """FastDeploy with MTP: its metrics are made at the first step it records."""
    drafts, accepted, _ = _totals(instances, k)
    if not drafts:
        return
    name = "fastdeploy:spec_decode_num"
    _counter(out, f"{name}_accepted_tokens_total", [("", accepted)], ".1f")
    _counter(out, f"{name}_emitted_tokens_total", [("", accepted + drafts)], ".1f")
    _counter(out, f"{name}_draft_tokens_total", [("", drafts * k)], ".1f")
    out += [
        "# TYPE fastdeploy:spec_decode_draft_acceptance_rate gauge",
        f"fastdeploy:spec_decode_draft_acceptance_rate {accepted / (drafts * k)}",
    ]


def tgi(out: list[str], instances: Sequence[Counted], k: int, model: str) -> None:
    """TGI: one observation per step (its tokens beyond the first) and one 0 per request."""
    drafts, accepted, at = _totals(instances, k)
    requests = _sum(instances, "requests")
    if not requests:
        return
    name = "tgi_request_skipped_tokens"
    out.append(f"# TYPE {name} histogram")
    for bound in range(k + 1):
        at_most = requests + drafts - (at[bound] if bound < k else 0.0)
        out.append(f'{name}_bucket{{le="{bound}"}} {at_most:.0f}')
    out.append(f'{name}_bucket{{le="+Inf"}} {requests + drafts:.0f}')
    out.append(f"{name}_sum {accepted:.0f}")
    out.append(f"{name}_count {requests + drafts:.0f}")


def uniserve(out: list[str], instances: Sequence[Counted], k: int, model: str) -> None:
    """uniserve: vLLM's names under its own prefix, one series per engine, OpenMetrics."""
    name = "uniserve:spec_decode_num"
    ranks = [(f'{{engine="{i}",model_name="{model}"}}', e) for i, e in enumerate(instances)]
    for family, values in (
        ("drafts", [float(e.drafts) for _, e in ranks]),
        ("draft_tokens", [float(e.drafts * k) for _, e in ranks]),
        ("accepted_tokens", [float(sum(e.accepted_at)) for _, e in ranks]),
    ):
        out.append(f"# TYPE {name}_{family} counter")
        out += [
            f"{name}_{family}_total{lb} {v:.0f}" for (lb, _), v in zip(ranks, values, strict=True)
        ]
    out.append(f"# TYPE {name}_accepted_tokens_per_pos counter")
    out += [
        f'{name}_accepted_tokens_per_pos_total{lb[:-1]},position="{i}"}} {e.accepted_at[i]}'
        for lb, e in ranks
        for i in range(k)
    ]
    out.append("# EOF")


def dspark(out: list[str], instances: Sequence[Counted], k: int, model: str) -> None:
    """The DSpark fork of vLLM: vLLM's families and its drafts by length (all k long here)."""
    drafts, accepted, at = _totals(instances, k)
    labels = f'{{engine="0",model_name="{model}"}}'
    tokens = _sum(instances, "requests") + _sum(instances, "tokens")
    _counter(out, "vllm:generation_tokens_total", [(labels, tokens)], ".1f")
    name = "vllm:spec_decode_num"
    _counter(out, f"{name}_drafts_total", [(labels, drafts)], ".1f")
    _counter(out, f"{name}_draft_tokens_total", [(labels, drafts * k)], ".1f")
    _counter(out, f"{name}_accepted_tokens_total", [(labels, accepted)], ".1f")
    per_position = [(labels[:-1] + f',position="{i}"}}', v) for i, v in enumerate(at)]
    _counter(out, f"{name}_accepted_tokens_per_pos_total", per_position, ".1f")
    by_length = [(f'{{draft_length="{k}",engine="0",model_name="{model}"}}', drafts)]
    _counter(out, f"{name}_drafts_by_draft_length_total", by_length, ".1f")


def vllm_diffusion(out: list[str], instances: Sequence[Counted], k: int, model: str) -> None:
    """vLLM serving a diffusion LLM: each step denoises k + 1 positions, commits its tokens."""
    steps = _sum(instances, "drafts")
    labels = f'{{engine="0",model_name="{model}"}}'
    name = "vllm:diffusion_num"
    _counter(out, f"{name}_denoising_steps_total", [(labels, steps)], ".1f")
    _counter(out, f"{name}_canvas_positions_total", [(labels, steps * (k + 1))], ".1f")
    _counter(out, f"{name}_committed_tokens_total", [(labels, _sum(instances, "tokens"))], ".1f")


#: The engines served by a function of this module's last part.
MORE = {
    "max": max_serve,
    "fastdeploy": fastdeploy,
    "tgi": tgi,
    "uniserve": uniserve,
    "dspark": dspark,
    "vllm-diffusion": vllm_diffusion,
}
