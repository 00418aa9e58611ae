"""What a test knows without the collector: the engine's own `/metrics` read with
prometheus_client's parser (not the collector's extraction), and the engine's own per-request
accounts (llama.cpp's `timings`, vLLM's `metrics.speculative_decoding`)."""

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

ROLES = {
    "spec_decode_num_drafts_total": "drafts",
    "spec_decode_num_draft_tokens_total": "draft_tokens",
    "spec_decode_num_accepted_tokens_total": "accepted",
}


@dataclass
class Counters:
    """The spec-decode counters of one payload, summed over label sets."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: dict[int, float] = field(default_factory=dict)


def counters(text: str, prefix: str) -> Counters:
    """Sum every `<prefix>spec_decode_*_total` sample of `text` (prefix `vllm:`, `llamacpp:`)."""
    found = Counters()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removeprefix(prefix)
            if not sample.name.startswith(prefix):
                continue
            if name == "spec_decode_num_accepted_tokens_per_pos_total":
                position = int(sample.labels["position"])
                found.per_position[position] = found.per_position.get(position, 0) + sample.value
            elif name in ROLES:
                setattr(found, ROLES[name], getattr(found, ROLES[name]) + sample.value)
    return found


def increase(before: Counters, after: Counters) -> Counters:
    """after - before, with no reset rule: the tests read both ends of an idle engine."""
    return Counters(
        drafts=after.drafts - before.drafts,
        draft_tokens=after.draft_tokens - before.draft_tokens,
        accepted=after.accepted - before.accepted,
        per_position={
            p: n - before.per_position.get(p, 0.0) for p, n in after.per_position.items()
        },
    )


def expected_data(window: Counters) -> dict[str, object]:
    """The AISBench `data` block of an increase, by the seed formulas."""
    return {
        "num_drafts": int(window.drafts),
        "draft_tokens": int(window.draft_tokens),
        "accepted_tokens": int(window.accepted),
        "acceptance_rate": window.accepted / window.draft_tokens * 100,
        "acceptance_length": 1 + window.accepted / window.drafts,
        "per_position_acceptance_rates": {
            str(p): n / window.drafts for p, n in sorted(window.per_position.items())
        },
    }


def expected_distribution(window: Counters) -> dict[str, int] | None:
    """How many drafts had exactly n tokens accepted, where every draft was k long (draft
    tokens = k x drafts): accepted at n - 1 and not at n (position -1: every draft; k: none)."""
    k = len(window.per_position)
    if not k or window.draft_tokens != k * window.drafts:
        return None
    at = [window.drafts] + [window.per_position[p] for p in range(k)] + [0.0]
    return {str(n): int(at[n] - at[n + 1]) for n in range(k + 1)}


def sample_sum(text: str, name: str) -> float:
    """Every sample named `name` of `text` summed (a counter's `_total`, a histogram's `_sum`
    or `_count`), over its label sets."""
    found = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]
    assert found, f"no {name}"
    return sum(found)


def generated_tokens(text: str, name: str) -> int:
    """The tokens an engine generated: its counter `name` (vLLM's
    `vllm:generation_tokens_total`, llama.cpp's `llamacpp:tokens_predicted_total`), summed."""
    return int(sample_sum(text, name))


#: vLLM's witnesses a window's throughput is computed from.
VLLM_WITNESSES = {
    "generated": "vllm:generation_tokens_total",
    "finished": "vllm:request_success_total",
    "decode_seconds": "vllm:inter_token_latency_seconds_sum",
    "first_tokens": "vllm:time_to_first_token_seconds_count",
    "steps": "vllm:iteration_tokens_total_count",
}


#: llama.cpp's.
LLAMACPP_WITNESSES = {
    "generated": "llamacpp:tokens_predicted_total",
    "decode_seconds": "llamacpp:tokens_predicted_seconds_total",
    "steps": "llamacpp:n_decode_total",
}


def witnesses(text: str, names: dict[str, str]) -> dict[str, float]:
    """Each of `names`' samples summed (`VLLM_WITNESSES`, say), by its key."""
    return {key: sample_sum(text, name) for key, name in names.items()}
