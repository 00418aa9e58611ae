"""What a server says of each request's speculative decoding, in its answer: read, summed and
rendered beside the window's counters. Pure functions.

The shapes read (docs/engines.md, "Per-request accounts"):
- vLLM >= 0.32 with `--per-request-spec-decode-metrics summary|detailed`:
  `metrics.speculative_decoding` (`num_spec_steps`, `num_draft_tokens`,
  `num_accepted_draft_tokens`), on a plain answer and on a stream's final usage chunk;
- llama.cpp: `timings.draft_n` and `timings.draft_n_accepted` (both left out when the request
  drafted nothing: its `timings` still tell it, by `predicted_n`);
- SGLang's `meta_info`: `spec_num_proposed_drafts` / `spec_num_correct_drafts` (0.5.12 on), before
  that `spec_proposed_drafts` / `spec_accepted_drafts`, and first `spec_draft_token_num` /
  `spec_accept_token_num`; `spec_verify_ct` is its verify calls;
- gateways that fill OpenAI's `usage.completion_tokens_details.accepted_prediction_tokens` and
  `rejected_prediction_tokens`.
"""

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: SGLang's per-request `meta_info` keys, newest first: (drafted, accepted).
SGLANG_KEYS = (
    ("spec_num_proposed_drafts", "spec_num_correct_drafts"),
    ("spec_proposed_drafts", "spec_accepted_drafts"),
    ("spec_draft_token_num", "spec_accept_token_num"),
)

#: Where the per-request accounts and the counters may differ, per source.
DIFFERENCES = {
    "vllm": "vLLM counts accepted tokens that EOS, a stop string or max_tokens then cut off "
    "(vLLM issue #56101): these sums equal its counters, the tokens received can be fewer",
    "llamacpp": "llama.cpp adds a request to its counters when it completes, with these same "
    "numbers: the sums equal the counters' increase once every request has completed",
    "sglang": "SGLang's meta_info counts a request's drafts as its counters do, at completion",
    "usage": "a gateway's usage fields count what the gateway saw (OpenAI's predicted-output "
    "fields): they can differ from the engine's counters, which count every draft",
}


@dataclass(frozen=True, slots=True)
class RequestAccount:
    """One request's speculative decoding as its answer told it."""

    source: str  # a key of `DIFFERENCES`
    drafted: int  # draft tokens proposed
    accepted: int  # draft tokens accepted
    steps: int | None = None  # verify steps (drafts), where told

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted * 100 if self.drafted else None

    @property
    def acceptance_length(self) -> float | None:
        return 1 + self.accepted / self.steps if self.steps else None


def _count(value: Any) -> int | None:
    """A non-negative whole count, or None for anything else (a hostile or odd answer)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0 or not float(value).is_integer():
        return None
    return int(value)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def account_of(answer: Mapping[str, Any]) -> RequestAccount | None:
    """The account an answer (or a stream's chunks merged) gives of its request, None where
    it gives none."""
    spec = _mapping(_mapping(answer.get("metrics")).get("speculative_decoding"))
    if spec:
        drafted, accepted = (
            _count(spec.get("num_draft_tokens")),
            _count(spec.get("num_accepted_draft_tokens")),
        )
        if drafted is not None and accepted is not None:
            return RequestAccount("vllm", drafted, accepted, _count(spec.get("num_spec_steps")))
    timings = _mapping(answer.get("timings"))
    if "draft_n" in timings or "predicted_n" in timings:
        drafted = _count(timings.get("draft_n", 0))
        accepted = _count(timings.get("draft_n_accepted", 0))
        if drafted is not None and accepted is not None:
            return RequestAccount("llamacpp", drafted, accepted)
    meta = _mapping(answer.get("meta_info"))
    for drafted_key, accepted_key in SGLANG_KEYS:
        if drafted_key in meta:
            drafted, accepted = _count(meta.get(drafted_key)), _count(meta.get(accepted_key))
            if drafted is not None and accepted is not None:
                steps = _count(meta.get("spec_verify_ct"))
                return RequestAccount("sglang", drafted, accepted, steps)
    details = _mapping(_mapping(answer.get("usage")).get("completion_tokens_details"))
    if "accepted_prediction_tokens" in details:
        accepted = _count(details.get("accepted_prediction_tokens"))
        rejected = _count(details.get("rejected_prediction_tokens") or 0)
        if accepted is not None and rejected is not None:
            return RequestAccount("usage", accepted + rejected, accepted)
    return None


def merged_chunks(chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A stream's chunks as one answer: the last value of each top-level key (vLLM's final
    usage chunk carries `metrics`, llama.cpp's last chunk `timings`)."""
    merged: dict[str, Any] = {}
    for chunk in chunks:
        merged.update({key: value for key, value in chunk.items() if value is not None})
    return merged


@dataclass(frozen=True, slots=True)
class Spread:
    """The 10th, 50th and 90th percentiles of a figure over requests."""

    p10: float
    p50: float
    p90: float


def _spread(values: Sequence[float]) -> Spread | None:
    if not values:
        return None
    if len(values) == 1:
        return Spread(values[0], values[0], values[0])
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return Spread(deciles[0], statistics.median(values), deciles[-1])


@dataclass(frozen=True, slots=True)
class PerRequestView:
    """The requests' accounts: how many had one, their sums, and how acceptance spread."""

    accounted: int
    sources: tuple[str, ...]
    drafted: int
    accepted: int
    steps: int | None
    acceptance_rate: Spread | None
    acceptance_length: Spread | None

    def as_json(self) -> dict[str, Any]:
        def spread(value: Spread | None) -> dict[str, float] | None:
            return None if value is None else {"p10": value.p10, "p50": value.p50, "p90": value.p90}

        return {
            "requests": self.accounted,
            "sources": list(self.sources),
            "drafted": self.drafted,
            "accepted": self.accepted,
            "steps": self.steps,
            "acceptance_rate": spread(self.acceptance_rate),
            "acceptance_length": spread(self.acceptance_length),
            "differences": [DIFFERENCES[source] for source in self.sources],
        }


def summarise(accounts: Sequence[RequestAccount]) -> PerRequestView | None:
    """The view of `accounts`, None when no request had one."""
    if not accounts:
        return None
    rates = [a.acceptance_rate for a in accounts if a.acceptance_rate is not None]
    lengths = [a.acceptance_length for a in accounts if a.acceptance_length is not None]
    steps = [a.steps for a in accounts]
    return PerRequestView(
        accounted=len(accounts),
        sources=tuple(dict.fromkeys(a.source for a in accounts)),
        drafted=sum(a.drafted for a in accounts),
        accepted=sum(a.accepted for a in accounts),
        steps=None if any(s is None for s in steps) else sum(s or 0 for s in steps),
        acceptance_rate=_spread(rates),
        acceptance_length=_spread(lengths),
    )


def render(view: PerRequestView) -> str:
    """The view as lines for a terminal, beside the window's counters."""
    lines = [
        f"per request ({view.accounted} answers with accounts, {', '.join(view.sources)}): "
        f"{view.drafted} draft tokens, {view.accepted} accepted"
        + ("" if view.steps is None else f", {view.steps} drafts")
    ]
    if view.acceptance_rate is not None:
        r = view.acceptance_rate
        lines.append(f"  acceptance rate p10/p50/p90: {r.p10:.1f} / {r.p50:.1f} / {r.p90:.1f} %")
    if view.acceptance_length is not None:
        n = view.acceptance_length
        lines.append(f"  acceptance length p10/p50/p90: {n.p10:.2f} / {n.p50:.2f} / {n.p90:.2f}")
    lines += [f"  note: {DIFFERENCES[source]}" for source in view.sources]
    return "\n".join(lines) + "\n"
