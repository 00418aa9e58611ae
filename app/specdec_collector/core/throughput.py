"""Throughput and latency beside acceptance: a window's figures from the engine's witnesses
(`counters.WITNESSES`), which exist with spec decoding and without. Pure functions.

Every figure is a ratio of two counters' increases over the same window, so it is exact where
the counters are (no histogram bucket is interpolated): generated tokens per second over the
seconds between the two scrapes; the inter-token latency as decode seconds summed over
requests divided by the tokens they decoded after their first; generated tokens per forward
pass of the batch; and the share of output tokens that were accepted drafts. The engines
count them differently (docs/computation.md): vLLM observes one inter-token latency per
request and step (a step gives 1 + accepted tokens), so its latency sum is divided by its
tokens after each request's first; llama.cpp counts a request's tokens and generation time
when it completes.
"""

from specdec_collector.core.arithmetic import Totals, as_number
from specdec_collector.core.counters import Role, ServingEngine
from specdec_collector.core.results import ResultData, Throughput

#: Engines whose decode seconds exclude each request's first token, which their first-token
#: count then takes off the tokens decoded (vLLM's inter-token latencies start after it).
_AFTER_FIRST_TOKEN = frozenset({ServingEngine.VLLM})


def throughput_of(
    engine: ServingEngine,
    totals: Totals,
    roles: set[Role],
    seconds: float | None,
    data: ResultData | None = None,
) -> Throughput | None:
    """The window's throughput from its increases (`totals`) where the engine's last scrape
    showed generated tokens (`roles`) and it generated some; None where not. `seconds` is the
    time between the scrapes the increases span (None where unknown); `data` the acceptance
    figures, for the share of output tokens that were accepted drafts."""
    if Role.GENERATION_TOKENS not in roles or totals.generation_tokens <= 0:
        return None  # nothing generated in the window: no throughput to tell
    generated = totals.generation_tokens
    decoded = generated
    if engine in _AFTER_FIRST_TOKEN:
        decoded = generated - totals.first_tokens if Role.FIRST_TOKENS in roles else 0.0
    accepted = None if data is None else data.accepted_tokens
    return Throughput(
        seconds=seconds,
        generated_tokens=as_number(generated),
        prompt_tokens=as_number(totals.prompt_tokens) if Role.PROMPT_TOKENS in roles else None,
        finished_requests=as_number(totals.requests) if Role.REQUESTS in roles else None,
        generated_tokens_per_second=_ratio(generated, seconds),
        inter_token_latency_ms=(
            None
            if Role.DECODE_SECONDS not in roles or decoded <= 0
            else totals.decode_seconds / decoded * 1000
        ),
        generated_tokens_per_step=(
            _ratio(generated, totals.decode_calls) if Role.DECODE_CALLS in roles else None
        ),
        accepted_token_share=(
            None if accepted is None or generated <= 0 else accepted / generated * 100
        ),
    )


def _ratio(part: float, whole: float | None) -> float | None:
    return None if whole is None or whole <= 0 else part / whole


def speedup(
    drafting: Throughput | None, plain: Throughput | None
) -> dict[str, float | None] | None:
    """A window with spec decoding against one without, on the same server: how many times
    the generated tokens per second and the inter-token latency improved (above 1: faster);
    each None where either window lacks the figure, all None without both throughputs."""
    if drafting is None or plain is None:
        return None
    tokens = (
        None
        if drafting.generated_tokens_per_second is None
        else _ratio(drafting.generated_tokens_per_second, plain.generated_tokens_per_second)
    )
    latency = (
        None
        if plain.inter_token_latency_ms is None or drafting.inter_token_latency_ms is None
        else _ratio(plain.inter_token_latency_ms, drafting.inter_token_latency_ms)
    )
    return {"generated_tokens_per_second": tokens, "inter_token_latency": latency}
