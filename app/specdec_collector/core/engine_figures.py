"""The figures of the engines whose counters are not vLLM's shape: TensorRT-LLM (iteration
counters), SGLang (verify calls, and its draft tokens per step), MAX (batch histograms),
FastDeploy, TGI (a skipped-tokens histogram), diffusion LLMs, and a payload no schema reads.
Each turns one engine's increases over a window into its `EngineResult`, under the contract
of `core.figures`. Pure functions.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from specdec_collector.core.arithmetic import (
    INVALID_COUNTERS,
    NO_ACTIVITY,
    Totals,
    as_number,
)
from specdec_collector.core.counters import Role, ServingEngine
from specdec_collector.core.exposition import SPEC_LIKE_MAX_NAMES, Series
from specdec_collector.core.notes import (
    DIFFUSION_IDLE,
    DIFFUSION_REASON,
    FASTDEPLOY_CONFIGURED,
    FASTDEPLOY_NGRAM_NOTE,
    FASTDEPLOY_NOTE,
    INCONSISTENT,
    MAX_NOTES,
    MORE_ACCEPTED,
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
)
from specdec_collector.core.results import (
    DiffusionFigures,
    EngineResult,
    ResultData,
)


def trtllm_result(totals: Totals) -> EngineResult:
    """TensorRT-LLM: rate from iteration counters; drafts, length, positions from finished
    requests (drafted at position 0 = drafts; vLLM-style rate at i = accepted_i / drafts)."""
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
            if drafts > 0 else None
        ),
    )  # fmt: skip
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


def sglang_result(
    totals: Totals, per_step: int | None, active: ActiveDraftTokens | None = None
) -> EngineResult:
    """SGLang: drafts are verify calls V; accepted = G - R - V; length = (G - R) / V; draft
    tokens and the rate from its active-draft-tokens gauge (0.5.23) or the draft tokens per
    step the start body gave."""
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
        notes = [*notes, f"draft tokens from the configured {per_step} per step "
                 "(draft_tokens_per_step)"]  # fmt: skip
    else:
        notes = [*notes, *SGLANG_NOTES[2:]]
    data = ResultData(
        num_drafts=as_number(calls), accepted_tokens=as_number(accepted),
        draft_tokens=None if draft_tokens is None else as_number(draft_tokens),
        acceptance_rate=None if not draft_tokens else accepted / draft_tokens * 100,
        acceptance_length=(generated - requests) / calls, per_position_acceptance_rates=None,
    )  # fmt: skip
    return EngineResult(engine=engine, status="ok", data=data, exact=False, notes=notes)


def max_result(totals: Totals) -> EngineResult:
    """Modular MAX: the mean of per-batch figures over the window (their histograms'
    change of sum over change of count), batch-weighted."""
    engine = ServingEngine.MAX
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
        num_drafts=None, draft_tokens=None, accepted_tokens=None,
        acceptance_rate=sum(rates.values()) / len(rates) * 100 if rates else None,
        acceptance_length=length, per_position_acceptance_rates=rates or None,
    )  # fmt: skip
    if not data.is_finite():
        return EngineResult(engine=engine, status="na", error=INVALID_COUNTERS, exact=False)
    return EngineResult(engine=engine, status="ok", data=data, exact=False, notes=MAX_NOTES)


def _more_accepted(
    engine: ServingEngine, accepted: float, draft_tokens: float | None
) -> EngineResult | None:
    """The `na` of a window that accepted more tokens than it drafted, else None."""
    if draft_tokens is None or accepted <= draft_tokens:
        return None
    error = MORE_ACCEPTED.format(accepted=as_number(accepted), drafted=as_number(draft_tokens))
    return EngineResult(engine=engine, status="na", error=error, exact=False)


def fastdeploy_result(totals: Totals, per_step: int | None) -> EngineResult:
    """FastDeploy: drafts are its steps (emitted - accepted tokens, added so in `Totals`);
    draft tokens counted with MTP, else from the start body's draft tokens per step."""
    engine = ServingEngine.FASTDEPLOY
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
    data = ResultData(
        num_drafts=as_number(drafts), accepted_tokens=as_number(accepted),
        draft_tokens=None if draft_tokens is None else as_number(draft_tokens),
        acceptance_rate=None if draft_tokens is None else accepted / draft_tokens * 100,
        acceptance_length=1 + accepted / drafts, per_position_acceptance_rates=None,
    )  # fmt: skip
    return EngineResult(engine=engine, status="ok", data=data, exact=exact, notes=notes)


def tgi_result(totals: Totals, per_step: int | None) -> EngineResult:
    """TGI: steps are drafts, the tokens they gave beyond the first accepted tokens; its
    buckets (0..speculate) give speculate, the per-position rates and the distribution."""
    engine = ServingEngine.TGI
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
    data = ResultData(
        num_drafts=as_number(steps), accepted_tokens=as_number(accepted),
        draft_tokens=None if draft_tokens is None else as_number(draft_tokens),
        acceptance_rate=None if draft_tokens is None else accepted / draft_tokens * 100,
        acceptance_length=1 + accepted / steps, per_position_acceptance_rates=rates,
    )  # fmt: skip
    if not data.is_finite():
        return EngineResult(engine=engine, status="na", error=INVALID_COUNTERS, exact=False)
    return EngineResult(
        engine=engine, status="ok", data=data, exact=False, notes=notes,
        accepted_distribution=distribution,
    )  # fmt: skip


def diffusion_result(totals: Totals) -> EngineResult:
    """vLLM serving a diffusion LLM: committed tokens per denoising step, not acceptance."""
    engine = ServingEngine.VLLM_DIFFUSION
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
