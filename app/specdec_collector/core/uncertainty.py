"""How sure a sampled window's figures are: 95 % confidence intervals from the variation
between its sample intervals. Pure functions.

Each figure is a ratio of two sums over the window's intervals: the acceptance rate is
accepted / draft tokens, the acceptance length 1 + accepted / drafts, a position's rate
accepted there / drafts. The ratio estimator's standard error comes from the linearised
residuals `y - R x` (Cochran, *Sampling Techniques*, 3rd ed., 1977, section 6.4: the variance
of the ratio estimate). Consecutive intervals are not independent (a request running across
an interval's end, an engine that counts requests when they complete), so the intervals are
first summed into batches of consecutive ones and the batches are the observations (the
method of batch means: Schmeiser, "Batch size effects in the analysis of simulation output",
Operations Research 30(3), 1982): at most `MAX_BATCHES` batches, every one of at least
`MIN_PER_BATCH` intervals, with Student's t of `batches - 1` degrees of freedom.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Fewer sample intervals give no interval (too few batches for a t interval to mean much).
MIN_INTERVALS = 20
MIN_PER_BATCH = 2
MAX_BATCHES = 30
LEVEL = 0.95

# Student's t, two-sided 95 %, by degrees of freedom (1 to 29): the batches are at most 30.
_T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045,
)  # fmt: skip


def t_975(df: int) -> float:
    """Student's t quantile of a two-sided 95 % interval with `df` degrees of freedom (a
    table to 29; beyond, 1.96 + 2.4 / df, within 0.002 of it)."""
    if df < 1:
        raise ValueError("degrees of freedom are at least 1")
    return _T_975[df - 1] if df <= len(_T_975) else 1.96 + 2.4 / df


#: The normal quantile of 80 % power: a difference of (t + this) standard errors is found in
#: four of five pairs of windows (the smallest difference a pair could have detected).
_Z_POWER = 0.8416


@dataclass(frozen=True, slots=True)
class Difference:
    """A difference of two windows' figures: its 95 % interval and the smallest difference
    this pair of windows could have detected (80 % power)."""

    value: float
    low: float
    high: float
    detectable: float


def standard_error(low: float, high: float, df: int) -> float:
    """A figure's standard error back from its 95 % interval."""
    return (high - low) / 2 / t_975(df)


def difference(
    value: float, error: float, df: int, base: float, base_error: float, base_df: int
) -> Difference:
    """`value - base` of two independent windows, with the t of the fewer degrees of freedom."""
    spread = math.sqrt(error * error + base_error * base_error)
    t = t_975(min(df, base_df))
    change = value - base
    return Difference(change, change - t * spread, change + t * spread, (t + _Z_POWER) * spread)


TOO_FEW = (
    "no confidence interval: {n} sample intervals, {need} are needed (sample the window more "
    "often, or for longer)"
)
METHOD = (
    "95 % interval of a ratio estimator over batches of consecutive sample intervals "
    "(batch means, Student's t)"
)


@dataclass(frozen=True, slots=True)
class Interval:
    """A figure's confidence interval."""

    low: float
    high: float


def batches(n: int) -> int:
    """How many batches `n` intervals are summed into (0: too few for an interval)."""
    if n < MIN_INTERVALS:
        return 0
    return min(MAX_BATCHES, n // MIN_PER_BATCH)


def _batched(values: Sequence[float], count: int) -> list[float]:
    """`values` summed into `count` batches of consecutive ones, as equal in size as can be."""
    bounds = [round(i * len(values) / count) for i in range(count + 1)]
    return [math.fsum(values[bounds[i] : bounds[i + 1]]) for i in range(count)]


def ratio_interval(
    numerators: Sequence[float],
    denominators: Sequence[float],
    scale: float = 1.0,
    offset: float = 0.0,
) -> Interval | None:
    """The interval of `offset + scale * sum(numerators) / sum(denominators)` over intervals
    (one pair each, in time order); None with too few intervals or nothing counted."""
    count = batches(len(numerators))
    if not count:
        return None
    ys, xs = _batched(numerators, count), _batched(denominators, count)
    total_x = math.fsum(xs)
    if total_x <= 0:
        return None
    ratio = math.fsum(ys) / total_x
    residuals = [y - ratio * x for y, x in zip(ys, xs, strict=True)]
    variance = math.fsum(d * d for d in residuals) / (count - 1)
    mean_x = total_x / count
    error = math.sqrt(variance / count) / mean_x
    half = t_975(count - 1) * error * scale
    centre = offset + scale * ratio
    return Interval(centre - half, centre + half)
