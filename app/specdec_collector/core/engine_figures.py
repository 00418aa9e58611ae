"""Each engine's result over a window: the function its schema row names
(`CounterSchema.result`) turns its increases (`EngineIncreases`) into its `EngineResult`, under
the contract of `core.figures`. vLLM's four counters (`counted_result`, and vLLM's and
llama.cpp's own), TensorRT-LLM (iteration counters), SGLang (verify calls, and its draft tokens
per step), MAX (batch histograms), FastDeploy, TGI (a skipped-tokens histogram), diffusion LLMs,
and a payload no schema reads. Pure functions.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specdec_collector.core.arithmetic import (
    INVALID_COUNTERS,
    NO_ACTIVITY,
    Totals,
    absolute_totals,
    as_number,
    derived,
)
from specdec_collector.core.counters import GAUGES, SCHEMA_OF, SCHEMAS, Role, ServingEngine
from specdec_collector.core.exposition import MAX_COUNTER, SPEC_LIKE_MAX_NAMES, Series
from specdec_collector.core.notes import (
    BEYOND_EXACT,
    DIFFUSION_IDLE,
    DIFFUSION_REASON,
    DRAFTING_OFF,
    DSPARK_NOTE,
    EARLY_V1_NOTE,
    FASTDEPLOY_CONFIGURED,
    FASTDEPLOY_NGRAM_NOTE,
    FASTDEPLOY_NOTE,
    INCONSISTENT,
    LLAMACPP_COMPLETION_NOTE,
    MAX_NOTES,
    MORE_ACCEPTED,
    MORE_ACCEPTED_AT,
    NO_DISTRIBUTION,
    OLD_SGLANG_REASON,
    SGLANG_ACTIVE,
    SGLANG_ACTIVE_VARIED,
    SGLANG_NOTES,
    TGI_NO_BUCKETS,
    TGI_NO_SPECULATE,
    TGI_NOTES,
    TGI_SPECULATE,
    TRTLLM_NOTE,
    UNRECOGNISED_REASON,
    V0_REASON,
    VARIABLE_DRAFT_LENGTH,
    VLLM_COMPATIBLE_NOTE,
)
from specdec_collector.core.results import (
    DiffusionFigures,
    EngineResult,
    ResultData,
)
from specdec_collector.core.targets import EngineHints


@dataclass(frozen=True, slots=True)
class EngineIncreases:
    """What one engine's result over a window is computed from: its increases (`totals`),
    whether it counts drafts at all, each interval's increases (`steps`) and its series at
    each snapshot (`chain`, the two ends at least) with the roles of those at its end
    (`roles`; all three empty for a sum over engines), and what the start body told
    (`hints`)."""

    engine: ServingEngine
    totals: Totals
    has_drafts: bool
    steps: Sequence[Totals] = ()
    chain: Sequence[Series] = ()
    hints: EngineHints = field(default_factory=EngineHints)
    roles: frozenset[Role] = frozenset()  # of its series at the window's end


def trtllm_result(window: EngineIncreases) -> EngineResult:
    """TensorRT-LLM: rate from iteration counters; drafts, length, positions from finished
    requests (drafted at position 0 = drafts; vLLM-style rate at i = accepted_i / drafts)."""
    totals = window.totals
    engine = ServingEngine.TRTLLM
    if totals.num_draft_tokens <= 0:
        return EngineResult(engine=engine, status="na", error=NO_ACTIVITY, exact=False)
    drafts = totals.drafted_per_pos.get(0, 0.0)
    accepted_finished = sum(totals.accepted_per_pos.values())
    data = ResultData(
        num_drafts=as_number(drafts) if drafts > 0 else None,
        draft_tokens=as_number(totals.num_draft_tokens),
        accepted_tokens=as_number(totals.num_accepted_tokens),
        acceptance_rate=totals.num_accepted_tokens / totals.num_draft_tokens * 100,
        acceptance_length=1 + accepted_finished / drafts if drafts > 0 else None,
        per_position_acceptance_rates=(
            {str(p): n / drafts for p, n in sorted(totals.accepted_per_pos.items())}
            if drafts > 0
            else None
        ),
    )
    return EngineResult(engine=engine, status="ok", data=data, exact=False, notes=[TRTLLM_NOTE])


@dataclass(frozen=True, slots=True)
class ActiveDraftTokens:
    """SGLang's draft tokens of a window from its `spec_num_draft_tokens` gauge: each
    interval's verify calls times the gauge at the interval's end, less one (the root)."""

    draft_tokens: float
    low: float
    high: float


def active_draft_tokens(
    chain: Sequence[Series], steps: Sequence[Totals]
) -> ActiveDraftTokens | None:
    """The draft tokens of an SGLang chain (`steps` its increases) by its gauge, None where a
    snapshot lacks it."""
    values = []
    for snapshot in chain:
        shown = [
            v.value
            for k, v in snapshot.items()
            if k.role is Role.ACTIVE_DRAFT_TOKENS and v.value is not None
        ]
        if not shown:
            return None
        values.append(sum(shown) / len(shown))
    ends = zip(steps, values[1:], strict=True)
    drafted = sum(step.verify_calls * max(0.0, value - 1) for step, value in ends)
    return ActiveDraftTokens(drafted, min(values), max(values))


def sglang_result(window: EngineIncreases) -> EngineResult:
    """SGLang: drafts are verify calls V; accepted = G - R - V; length = (G - R) / V; draft
    tokens and the rate from its active-draft-tokens gauge (0.5.23) or the draft tokens per
    step the start body gave."""
    totals, per_step = window.totals, window.hints.draft_tokens_per_step
    active = active_draft_tokens(window.chain, window.steps) if window.steps else None
    engine = ServingEngine.SGLANG
    calls, generated, requests = totals.verify_calls, totals.generation_tokens, totals.requests
    if calls <= 0:
        return EngineResult(engine=engine, status="na", error=NO_ACTIVITY, exact=False)
    accepted = generated - requests - calls
    if accepted < 0:
        return EngineResult(engine=engine, status="na", error=INCONSISTENT, exact=False)
    notes = SGLANG_NOTES[:2]
    draft_tokens: float | None = None
    if active is not None and active.high > 1:
        draft_tokens = active.draft_tokens
        notes = [*notes, SGLANG_ACTIVE]
        if active.low != active.high:
            low, high = as_number(active.low), as_number(active.high)
            notes.append(SGLANG_ACTIVE_VARIED.format(low=low, high=high))
    elif per_step:
        draft_tokens = calls * per_step
        notes = [
            *notes,
            f"draft tokens from the configured {per_step} per step (draft_tokens_per_step)",
        ]
    else:
        notes = [*notes, *SGLANG_NOTES[2:]]
    data = ResultData(
        num_drafts=as_number(calls),
        accepted_tokens=as_number(accepted),
        draft_tokens=None if draft_tokens is None else as_number(draft_tokens),
        acceptance_rate=None if not draft_tokens else accepted / draft_tokens * 100,
        acceptance_length=(generated - requests) / calls,
        per_position_acceptance_rates=None,
    )
    return EngineResult(engine=engine, status="ok", data=data, exact=False, notes=notes)


def max_result(window: EngineIncreases) -> EngineResult:
    """Modular MAX: the mean of per-batch figures over the window (their histograms'
    change of sum over change of count), batch-weighted."""
    engine, totals = ServingEngine.MAX, window.totals
    rates = {
        str(position): totals.batch_rate_sum.get(position, 0.0) / count / 100
        for position, count in sorted(totals.batch_rate_count.items())
        if count > 0
    }
    if totals.batch_length_count <= 0 and not rates:
        return EngineResult(engine=engine, status="na", error=NO_ACTIVITY, exact=False)
    length = (
        totals.batch_length_sum / totals.batch_length_count
        if totals.batch_length_count > 0
        else None
    )
    data = ResultData(
        num_drafts=None,
        draft_tokens=None,
        accepted_tokens=None,
        acceptance_rate=sum(rates.values()) / len(rates) * 100 if rates else None,
        acceptance_length=length,
        per_position_acceptance_rates=rates or None,
    )
    return _checked(engine, data, False, MAX_NOTES)


def _more_accepted(
    engine: ServingEngine, accepted: float, draft_tokens: float | None
) -> EngineResult | None:
    """The `na` of a window that accepted more tokens than it drafted, else None."""
    if draft_tokens is None or accepted <= draft_tokens:
        return None
    error = MORE_ACCEPTED.format(accepted=as_number(accepted), drafted=as_number(draft_tokens))
    return EngineResult(engine=engine, status="na", error=error, exact=False)


def fastdeploy_result(window: EngineIncreases) -> EngineResult:
    """FastDeploy: drafts are its steps (emitted - accepted tokens, added so in `Totals`);
    draft tokens counted with MTP, else from the start body's draft tokens per step."""
    engine, totals = ServingEngine.FASTDEPLOY, window.totals
    per_step = window.hints.draft_tokens_per_step
    drafts, accepted = totals.num_drafts, totals.num_accepted_tokens
    if drafts <= 0:
        return EngineResult(engine=engine, status="na", error=NO_ACTIVITY, exact=False)
    notes, exact = [FASTDEPLOY_NOTE], True
    draft_tokens: float | None = totals.num_draft_tokens or None
    if draft_tokens is None:
        if per_step:
            draft_tokens = drafts * per_step
            notes.append(FASTDEPLOY_CONFIGURED.format(k=per_step))
            exact = False
        else:
            notes.append(FASTDEPLOY_NGRAM_NOTE)
    refused = _more_accepted(engine, accepted, draft_tokens)
    if refused is not None:
        return refused
    data = _drafted(drafts, accepted, draft_tokens, None)
    return EngineResult(engine=engine, status="ok", data=data, exact=exact, notes=notes)


def tgi_result(window: EngineIncreases) -> EngineResult:
    """TGI: steps are drafts, the tokens they gave beyond the first accepted tokens; its
    buckets (0..speculate) give speculate, the per-position rates and the distribution."""
    engine, totals = ServingEngine.TGI, window.totals
    per_step = window.hints.draft_tokens_per_step
    steps, accepted = totals.num_drafts, totals.num_accepted_tokens
    if steps <= 0:
        return EngineResult(engine=engine, status="na", error=NO_ACTIVITY, exact=False)
    notes = list(TGI_NOTES)
    at_most = totals.steps_at_most
    speculate = max(at_most) if at_most else None
    complete = speculate is not None and all(n in at_most for n in range(speculate + 1))
    if speculate is not None and speculate > 0:
        notes.append(TGI_SPECULATE.format(k=speculate, source="the histogram's largest bucket"))
    elif per_step:
        speculate = per_step
        notes.append(TGI_SPECULATE.format(k=per_step, source="draft_tokens_per_step"))
    else:
        speculate = None
        notes.append(TGI_NO_SPECULATE)
    draft_tokens = steps * speculate if speculate else None
    refused = _more_accepted(engine, accepted, draft_tokens)
    if refused is not None:
        return refused
    rates = distribution = None
    if complete and speculate:
        rates = {str(i): (steps - at_most[i]) / steps for i in range(speculate)}
        distribution = {
            str(n): as_number(at_most[n] - (at_most[n - 1] if n else 0.0))
            for n in range(speculate + 1)
        }
    else:
        notes.append(TGI_NO_BUCKETS)
    data = _drafted(steps, accepted, draft_tokens, rates)
    return _checked(engine, data, False, notes, accepted_distribution=distribution)


def diffusion_result(window: EngineIncreases) -> EngineResult:
    """vLLM serving a diffusion LLM: committed tokens per denoising step, not acceptance."""
    engine, totals = ServingEngine.VLLM_DIFFUSION, window.totals
    steps = totals.denoising_steps
    if steps <= 0:
        return EngineResult(engine=engine, status="na", error=DIFFUSION_IDLE, exact=False)
    figures = DiffusionFigures(
        denoising_steps=as_number(steps),
        canvas_positions=as_number(totals.canvas_positions),
        committed_tokens=as_number(totals.committed_tokens),
        tokens_per_step=totals.committed_tokens / steps,
        committed_share=(
            totals.committed_tokens / totals.canvas_positions * 100
            if totals.canvas_positions > 0
            else None
        ),
    )
    error = DIFFUSION_REASON.format(tokens=f"{figures.tokens_per_step:.2f}")
    return EngineResult(engine=engine, status="na", error=error, exact=True, diffusion=figures)


def unrecognised_result(after: Series) -> EngineResult:
    """A payload no schema reads, with families that look like spec decoding: named."""
    names = sorted(dict(key.labels).get("family", "") for key in after)
    shown = ", ".join(names[:SPEC_LIKE_MAX_NAMES])
    if names and all(name.startswith(("sglang:", "sglang_")) for name in names):
        error = OLD_SGLANG_REASON.format(names=shown)
    else:
        error = UNRECOGNISED_REASON.format(names=shown)
    return EngineResult(engine=ServingEngine.UNRECOGNISED, status="na", error=error, exact=False)


# llama.cpp prints its counters with %g: six significant digits.
ROUNDED_FROM = 1_000_000


def _rounding(value: float) -> float:
    """The largest error of a value printed with six significant digits."""
    if value < ROUNDED_FROM:
        return 0.0
    return 0.5 * 10.0 ** (math.floor(math.log10(value)) - 5)


def _llamacpp_rounding(before: Totals, after: Totals) -> str | None:
    """The note on llama.cpp's six significant digits, with its bound, once a counter reached
    10^6; None while all are below (then they are exact)."""
    bounds = {
        "drafts": _rounding(before.num_drafts) + _rounding(after.num_drafts),
        "draft tokens": _rounding(before.num_draft_tokens) + _rounding(after.num_draft_tokens),
        "accepted tokens": (
            _rounding(before.num_accepted_tokens) + _rounding(after.num_accepted_tokens)
        ),
    }
    if not any(bounds.values()):
        return None
    told = ", ".join(f"±{as_number(bound)} {name}" for name, bound in bounds.items() if bound)
    return (
        "llama.cpp prints its counters with 6 significant digits and some reached 10^6: each "
        f"count is known within half a unit of its 6th digit at each end ({told})"
    )


def _variable_draft_length(totals: Totals) -> str | None:
    """The note on drafts shorter than the positions counted (n-gram drafts, capped drafts,
    vLLM's dynamic speculative decoding), with the mean draft length; None when every draft of
    the window had a token at every position."""
    positions = len(totals.accepted_per_pos)
    if not positions or totals.num_draft_tokens == positions * totals.num_drafts:
        return None
    mean = totals.num_draft_tokens / totals.num_drafts
    return VARIABLE_DRAFT_LENGTH.format(mean=f"{mean:.2f}", positions=positions)


def accepted_distribution(totals: Totals) -> dict[str, int | float] | None:
    """Drafts that had exactly n tokens accepted, n = 0..k, from cumulative per-position
    counts (a draft accepted at position i was accepted at every earlier one, so exactly n
    accepted is accepted at n - 1 and not at n); None unless every draft was k long (then
    a short draft's missing positions would count as rejections) and the counts are so
    shaped."""
    k = len(totals.accepted_per_pos)
    at = totals.accepted_per_pos
    if not k or totals.num_drafts <= 0 or set(at) != set(range(k)):
        return None
    if totals.num_draft_tokens != k * totals.num_drafts:
        return None
    reached = [totals.num_drafts, *(at[i] for i in range(k)), 0.0]
    exactly = [reached[n] - reached[n + 1] for n in range(k + 1)]
    if any(count < 0 for count in exactly):
        return None
    return {str(n): as_number(count) for n, count in enumerate(exactly)}


def _per_drafted_position(totals: Totals) -> dict[str, float] | None:
    """DSpark: accepted at position i / drafts of length > i, where drafts are counted by
    length; None without that family (or where no draft reached a position counted)."""
    if not totals.drafts_by_length:
        return None
    rates = {}
    for position, accepted in sorted(totals.accepted_per_pos.items()):
        reached = sum(n for length, n in totals.drafts_by_length.items() if length > position)
        if reached <= 0:
            return None
        rates[str(position)] = accepted / reached
    return rates


def _inconsistency(totals: Totals, has_drafts: bool) -> str | None:
    """Why the window's counts cannot be (a position, or all, accepted more than was
    drafted: a buggy or hostile server), or None."""
    if totals.num_accepted_tokens > totals.num_draft_tokens:
        return MORE_ACCEPTED.format(
            accepted=as_number(totals.num_accepted_tokens),
            drafted=as_number(totals.num_draft_tokens),
        )
    if has_drafts:
        for position, accepted in sorted(totals.accepted_per_pos.items()):
            if accepted > totals.num_drafts:
                return MORE_ACCEPTED_AT.format(
                    position=position,
                    accepted=as_number(accepted),
                    drafts=as_number(totals.num_drafts),
                )
    return None


def counted_result(window: EngineIncreases) -> EngineResult:
    """vLLM's four counters, in vLLM's meaning (its own, LMDeploy's, and those that write
    vLLM's names under their own prefix)."""
    return _counted(window, [], exact=True)


def vllm_result(window: EngineIncreases) -> EngineResult:
    """vLLM's V1 engine; its V0 engine, whose counters have the same names but another
    meaning, is `na`; a server with vLLM's names but none of vLLM's token counters is told."""
    if window.roles & {Role.EMITTED, *GAUGES}:
        return EngineResult(engine=ServingEngine.VLLM_V0, status="na", error=V0_REASON, exact=False)
    result = counted_result(window)
    if window.roles and Role.GENERATION_TOKENS not in window.roles:
        result = result.model_copy(update={"notes": [*result.notes, VLLM_COMPATIBLE_NOTE]})
    return result


def llamacpp_result(window: EngineIncreases) -> EngineResult:
    """llama.cpp: vLLM's counters, counted at each request's completion and printed with six
    significant digits."""
    notes, exact = [LLAMACPP_COMPLETION_NOTE], True
    if window.chain:
        ends = absolute_totals(window.chain[0]), absolute_totals(window.chain[-1])
        rounding = _llamacpp_rounding(*ends)
        if rounding is not None:
            notes.append(rounding)
            exact = False
    return _counted(window, notes, exact)


def _counted(window: EngineIncreases, notes: list[str], exact: bool) -> EngineResult:
    """The result of vLLM's four counters, beside `notes` and as `exact` as the engine's own
    counting allows."""
    engine, totals, has_drafts = window.engine, window.totals, window.has_drafts
    if totals.num_draft_tokens <= 0 or (has_drafts and totals.num_drafts <= 0):
        return _no_activity(engine, totals, notes)
    inconsistent = _inconsistency(totals, has_drafts)
    if inconsistent is not None:
        return EngineResult(engine=engine, status="na", error=inconsistent, exact=False)
    beyond = max(totals.num_drafts, totals.num_draft_tokens, totals.num_accepted_tokens)
    if beyond > MAX_COUNTER:
        notes = [*notes, BEYOND_EXACT.format(count=as_number(beyond))]
        exact = False
    distribution = per_drafted = None
    if has_drafts:
        data = derived(totals)
        variable = _variable_draft_length(totals)
        if variable is not None:
            notes = [*notes, variable, NO_DISTRIBUTION]
        distribution = accepted_distribution(totals)
        per_drafted = _per_drafted_position(totals)
        if per_drafted is not None:
            notes = [*notes, DSPARK_NOTE]
    else:
        notes = [*notes, EARLY_V1_NOTE]
        data = _without_drafts(totals)
    return _checked(
        engine,
        data,
        exact,
        notes,
        accepted_distribution=distribution,
        per_drafted_position_acceptance_rates=per_drafted,
    )


def _drafted(
    drafts: float, accepted: float, draft_tokens: float | None, rates: dict[str, float] | None
) -> ResultData:
    """The figures of `drafts` (steps) that had `accepted` tokens accepted, of `draft_tokens`
    drafted where known."""
    return ResultData(
        num_drafts=as_number(drafts),
        accepted_tokens=as_number(accepted),
        draft_tokens=None if draft_tokens is None else as_number(draft_tokens),
        acceptance_rate=None if draft_tokens is None else accepted / draft_tokens * 100,
        acceptance_length=1 + accepted / drafts,
        per_position_acceptance_rates=rates,
    )


def _checked(
    engine: ServingEngine, data: ResultData, exact: bool, notes: list[str], **more: Any
) -> EngineResult:
    """An `ok` result of `data`, unless a figure is not finite: counters are read only up to
    2**53, so this is a backstop, and nothing stored may hold a figure that JSON, PostgreSQL or
    a later read cannot."""
    if not data.is_finite():
        return EngineResult(engine=engine, status="na", error=INVALID_COUNTERS, exact=exact)
    return EngineResult(engine=engine, status="ok", data=data, exact=exact, notes=notes, **more)


def _no_activity(engine: ServingEngine, totals: Totals, notes: list[str]) -> EngineResult:
    """No draft in the window; where tokens were generated, drafting is off: how to turn it on."""
    error = NO_ACTIVITY
    if totals.num_draft_tokens <= 0 and totals.generation_tokens > 0:
        schema = SCHEMA_OF.get(engine)
        error += DRAFTING_OFF.format(
            tokens=as_number(totals.generation_tokens),
            how=schema.turn_on if schema else "turn speculative decoding on",
        )
    return EngineResult(engine=engine, status="na", error=error, exact=False, notes=notes)


def _without_drafts(totals: Totals) -> ResultData:
    """Early vLLM V1's figures: no drafts counter, so only the rate."""
    return ResultData(
        num_drafts=None,
        draft_tokens=as_number(totals.num_draft_tokens),
        accepted_tokens=as_number(totals.num_accepted_tokens),
        acceptance_rate=totals.num_accepted_tokens / totals.num_draft_tokens * 100,
        acceptance_length=None,
        per_position_acceptance_rates=None,
    )


ResultFunction = Callable[[EngineIncreases], EngineResult]


def _result_functions() -> dict[ServingEngine, ResultFunction]:
    """Each engine's result function: the one of this module its schema row names."""
    here = globals()
    return {schema.engine: here[schema.result] for schema in SCHEMAS}


#: Each engine's result function (`CounterSchema.result`).
RESULT_OF: dict[ServingEngine, ResultFunction] = _result_functions()
