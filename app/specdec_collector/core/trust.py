"""How far a result's figures can be trusted: the 95 % intervals of a sampled window's
figures (`core.uncertainty`'s estimator over each engine's ratios) and flags on figures that
look wrong, each with its reason. Pure functions over a window's interval increases."""

import itertools
from collections.abc import Sequence

from specdec_collector.core.arithmetic import Totals
from specdec_collector.core.counters import ServingEngine
from specdec_collector.core.results import (
    Confidence,
    EngineResult,
    FigureInterval,
    Flag,
    FlagKind,
)
from specdec_collector.core.uncertainty import (
    METHOD,
    MIN_INTERVALS,
    TOO_FEW,
    Interval,
    batches,
    ratio_interval,
)

#: Engines whose figures are AISBench's ratios of drafts, draft tokens and accepted tokens.
_COUNTED = frozenset(
    {
        ServingEngine.VLLM,
        ServingEngine.LLAMACPP,
        ServingEngine.LMDEPLOY,
        ServingEngine.UNISERVE,
        ServingEngine.FASTDEPLOY,
        ServingEngine.TGI,
    }
)


def _shown(interval: Interval | None) -> FigureInterval | None:
    return None if interval is None else FigureInterval(low=interval.low, high=interval.high)


def confidence_of(
    engine: ServingEngine, steps: Sequence[Totals], result: EngineResult
) -> Confidence | None:
    """The 95 % intervals of a sampled window's figures, each the ratio of two sums over its
    sample intervals (`steps`: the increase of each, `arithmetic.interval_increases`,
    `core.uncertainty`); None for an unsampled window, a result without figures, or an engine
    whose figures are not such ratios (TensorRT-LLM mixes iteration and request counts)."""
    if len(steps) < 2 or result.status != "ok" or result.data is None:
        return None
    count = batches(len(steps))
    if not count:
        reason = TOO_FEW.format(n=len(steps), need=MIN_INTERVALS)
        return Confidence(method=METHOD, intervals=len(steps), batches=0, reason=reason)
    data = result.data
    rate = length = None
    positions: dict[str, FigureInterval] = {}
    if engine in _COUNTED:
        accepted = [s.num_accepted_tokens for s in steps]
        drafts = [s.num_drafts for s in steps]
        if data.acceptance_rate is not None and data.draft_tokens:
            counted = [s.num_draft_tokens for s in steps]
            if sum(counted) > 0:  # TGI's draft tokens are not counted: steps x speculate
                rate = ratio_interval(accepted, counted, scale=100.0)
        if data.acceptance_length is not None:
            length = ratio_interval(accepted, drafts, offset=1.0)
        for key in data.per_position_acceptance_rates or {}:
            at = [s.accepted_per_pos.get(int(key), 0.0) for s in steps]
            found = ratio_interval(at, drafts)
            if found is not None:
                positions[key] = FigureInterval(low=found.low, high=found.high)
    elif engine is ServingEngine.SGLANG and data.acceptance_length is not None:
        length = ratio_interval(
            [s.generation_tokens - s.requests for s in steps], [s.verify_calls for s in steps]
        )
    elif engine is ServingEngine.MAX:
        if data.acceptance_length is not None:
            length = ratio_interval(
                [s.batch_length_sum for s in steps], [s.batch_length_count for s in steps]
            )
        for key in data.per_position_acceptance_rates or {}:
            found = ratio_interval(
                [s.batch_rate_sum.get(int(key), 0.0) for s in steps],
                [s.batch_rate_count.get(int(key), 0.0) for s in steps],
                scale=0.01,
            )
            if found is not None:
                positions[key] = FigureInterval(low=found.low, high=found.high)
    else:
        return None
    return Confidence(
        method=METHOD, intervals=len(steps), batches=count, acceptance_rate=_shown(rate),
        acceptance_length=_shown(length), per_position_acceptance_rates=positions or None,
    )  # fmt: skip


#: Below this share of draft tokens accepted, over at least `NEAR_ZERO_DRAFT_TOKENS`, a
#: window's acceptance is flagged as near 0 %.
NEAR_ZERO_PERCENT = 1.0
NEAR_ZERO_DRAFT_TOKENS = 1000
#: Fewer drafts than this are flagged as too few for the figures to mean much.
FEW_DRAFTS = 100
#: A sample interval's mean draft length this far from another's (tokens) is flagged, when
#: both intervals had at least `LENGTH_MIN_DRAFTS` drafts.
LENGTH_SPREAD = 0.5
LENGTH_MIN_DRAFTS = 20
FLAG_TEXTS = {
    FlagKind.NEAR_ZERO: "acceptance near 0 % ({rate:.2f} %) over {tokens} draft tokens: drafts "
    "that are padded or skipped (vLLM issue #34734 reports it for long sequences), or a drafter "
    "that does not fit the model",
    FlagKind.RISING_POSITIONS: "position {later} was accepted more often than position "
    "{earlier} ({high:.4f} > {low:.4f}): counted cumulatively, a later position cannot be; a "
    "tree drafter's positions, or a server's fault",
    FlagKind.LENGTH_VARIED: "the draft length varied inside the window (from {low:.2f} to "
    "{high:.2f} draft tokens a draft between samples): the figures mix drafts of several lengths",
    FlagKind.FEW_DRAFTS: "only {drafts} drafts: too few for the figures to mean much (a "
    "sampled window says how sure they are, under confidence)",
}


def flags_of(steps: Sequence[Totals], result: EngineResult) -> list[Flag]:
    """Reasons to doubt an `ok` result's figures (`steps`: the increase of each interval of
    the window), each said (`FlagKind`)."""
    data = result.data
    if result.status != "ok" or data is None:
        return []
    flags = []
    tokens = data.draft_tokens or 0
    rate = data.acceptance_rate
    if rate is not None and rate < NEAR_ZERO_PERCENT and tokens >= NEAR_ZERO_DRAFT_TOKENS:
        text = FLAG_TEXTS[FlagKind.NEAR_ZERO].format(rate=rate, tokens=tokens)
        flags.append(Flag(kind=FlagKind.NEAR_ZERO, reason=text))
    rates = sorted((int(p), r) for p, r in (data.per_position_acceptance_rates or {}).items())
    for (earlier, low), (later, high) in itertools.pairwise(rates):
        if high > low:
            text = FLAG_TEXTS[FlagKind.RISING_POSITIONS].format(
                earlier=earlier, later=later, low=low, high=high
            )
            flags.append(Flag(kind=FlagKind.RISING_POSITIONS, reason=text))
            break
    if len(steps) > 1 and tokens:
        lengths = [
            step.num_draft_tokens / step.num_drafts
            for step in steps
            if step.num_drafts >= LENGTH_MIN_DRAFTS and step.num_draft_tokens > 0
        ]
        if lengths and max(lengths) - min(lengths) > LENGTH_SPREAD:
            text = FLAG_TEXTS[FlagKind.LENGTH_VARIED].format(low=min(lengths), high=max(lengths))
            flags.append(Flag(kind=FlagKind.LENGTH_VARIED, reason=text))
    if data.num_drafts is not None and data.num_drafts < FEW_DRAFTS:
        text = FLAG_TEXTS[FlagKind.FEW_DRAFTS].format(drafts=data.num_drafts)
        flags.append(Flag(kind=FlagKind.FEW_DRAFTS, reason=text))
    return flags
