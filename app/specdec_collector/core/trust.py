"""How far a result's figures can be trusted: the 95 % intervals of a sampled window's
figures (`core.uncertainty`'s estimator over each engine's ratios) and flags on figures that
look wrong, each with its reason. Pure functions over a window's interval increases."""

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from specdec_collector.core.arithmetic import Totals
from specdec_collector.core.counters import SCHEMAS, ServingEngine
from specdec_collector.core.results import (
    Confidence,
    EngineResult,
    FigureInterval,
    Flag,
    FlagKind,
    ResultData,
)
from specdec_collector.core.uncertainty import (
    METHOD,
    MIN_INTERVALS,
    TOO_FEW,
    Interval,
    batches,
    ratio_interval,
)


def _shown(interval: Interval | None) -> FigureInterval | None:
    return None if interval is None else FigureInterval(low=interval.low, high=interval.high)


@dataclass(frozen=True, slots=True)
class _Intervals:
    rate: Interval | None = None
    length: Interval | None = None
    positions: dict[str, FigureInterval] = field(default_factory=dict)


def _positions(
    keys: Iterable[str], interval_of: Callable[[int], Interval | None]
) -> dict[str, FigureInterval]:
    found = {key: interval_of(int(key)) for key in keys}
    return {key: FigureInterval(low=i.low, high=i.high) for key, i in found.items() if i}


def counted_intervals(steps: Sequence[Totals], data: ResultData) -> _Intervals:
    """AISBench's ratios of drafts, draft tokens and accepted tokens."""
    accepted = [s.num_accepted_tokens for s in steps]
    drafts = [s.num_drafts for s in steps]
    rate = length = None
    counted = [s.num_draft_tokens for s in steps]
    # TGI's draft tokens are not counted (steps x speculate): no interval for its rate.
    if data.acceptance_rate is not None and data.draft_tokens and sum(counted) > 0:
        rate = ratio_interval(accepted, counted, scale=100.0)
    if data.acceptance_length is not None:
        length = ratio_interval(accepted, drafts, offset=1.0)
    positions = _positions(
        data.per_position_acceptance_rates or {},
        lambda at: ratio_interval([s.accepted_per_pos.get(at, 0.0) for s in steps], drafts),
    )
    return _Intervals(rate, length, positions)


def sglang_intervals(steps: Sequence[Totals], data: ResultData) -> _Intervals:
    """SGLang's length: generated tokens less requests, over verify calls."""
    if data.acceptance_length is None:
        return _Intervals()
    emitted = [s.generation_tokens - s.requests for s in steps]
    return _Intervals(length=ratio_interval(emitted, [s.verify_calls for s in steps]))


def max_intervals(steps: Sequence[Totals], data: ResultData) -> _Intervals:
    """MAX's batch histograms: each figure's change of sum over change of count."""
    length = None
    if data.acceptance_length is not None:
        sums, counts = [s.batch_length_sum for s in steps], [s.batch_length_count for s in steps]
        length = ratio_interval(sums, counts)
    positions = _positions(
        data.per_position_acceptance_rates or {},
        lambda at: ratio_interval(
            [s.batch_rate_sum.get(at, 0.0) for s in steps],
            [s.batch_rate_count.get(at, 0.0) for s in steps],
            scale=0.01,
        ),
    )
    return _Intervals(length=length, positions=positions)


IntervalsFunction = Callable[[Sequence[Totals], ResultData], _Intervals]


def _intervals_functions() -> dict[ServingEngine, IntervalsFunction]:
    """Each engine's intervals: the function of this module its schema row names."""
    here = globals()
    return {s.engine: here[s.intervals] for s in SCHEMAS if s.intervals is not None}


#: Each engine's intervals (`CounterSchema.intervals`); an engine without is given none.
INTERVALS_OF: dict[ServingEngine, IntervalsFunction] = _intervals_functions()


def confidence_of(
    engine: ServingEngine, steps: Sequence[Totals], result: EngineResult
) -> Confidence | None:
    """The 95 % intervals of a sampled window's figures, each the ratio of two sums over its
    sample intervals (`steps`: the increase of each, `arithmetic.interval_increases`,
    `core.uncertainty`); None for an unsampled window, a result without figures, or an engine
    whose figures are not such ratios (TensorRT-LLM mixes iteration and request counts)."""
    intervals_of = INTERVALS_OF.get(engine)
    if len(steps) < 2 or result.status != "ok" or result.data is None or intervals_of is None:
        return None
    count = batches(len(steps))
    if not count:
        reason = TOO_FEW.format(n=len(steps), need=MIN_INTERVALS)
        return Confidence(method=METHOD, intervals=len(steps), batches=0, reason=reason)
    found = intervals_of(steps, result.data)
    return Confidence(
        method=METHOD,
        intervals=len(steps),
        batches=count,
        acceptance_rate=_shown(found.rate),
        acceptance_length=_shown(found.length),
        per_position_acceptance_rates=found.positions or None,
    )


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
