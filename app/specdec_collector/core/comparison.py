"""Windows side by side per target: each figure's difference from the first window's, judged
on its confidence interval, and the settings that make two windows incomparable. Pure
functions."""

from collections.abc import Sequence
from typing import Any

from specdec_collector.core.results import TargetResult
from specdec_collector.core.throughput import speedup
from specdec_collector.core.uncertainty import Difference, difference, standard_error

Windows = Sequence[tuple[str, dict[str, TargetResult | None]]]


def compare_results(windows: Windows) -> list[dict[str, Any]]:
    """Windows side by side per target (same `host:port`), with differences from the first.

    `windows` is (window id, {target: result or None while open}) in the order to compare.
    For each target, `results` has one entry per window (null where the window lacks the
    target), and `differences` compares every later window with an `ok` result against the
    first window that has one: acceptance rate (points), acceptance length, per-position rates.
    `speedups` compares every window with spec decoding against the first without.
    """
    targets: list[str] = []
    for _, results in windows:
        targets += [target for target in results if target not in targets]
    return [
        {
            "target": target,
            "results": [_entry(window_id, results, target) for window_id, results in windows],
            "differences": _differences(target, windows),
            "speedups": _speedups(target, windows),
        }
        for target in targets
    ]


#: An entry's fields besides its window and status: all null while the window is open.
_ENTRY_FIELDS = (
    "error",
    "engine",
    "exact",
    "restarts",
    "notes",
    "acceptance_rate",
    "acceptance_length",
    "num_drafts",
    "per_position_acceptance_rates",
    "throughput",
)


def _entry(
    window_id: str, results: dict[str, TargetResult | None], target: str
) -> dict[str, Any] | None:
    """One window's figures of `target`; None where the window lacks the target."""
    if target not in results:
        return None
    result = results[target]
    if result is None:
        return {"window": window_id, "status": "open", **dict.fromkeys(_ENTRY_FIELDS)}
    data = result.data
    return {
        "window": window_id,
        "status": result.status,
        "error": result.error,
        "engine": result.engine,
        "exact": result.exact,
        "restarts": result.restarts,
        "notes": result.notes,
        "acceptance_rate": None if data is None else data.acceptance_rate,
        "acceptance_length": None if data is None else data.acceptance_length,
        "num_drafts": None if data is None else data.num_drafts,
        "per_position_acceptance_rates": (
            None if data is None else data.per_position_acceptance_rates
        ),
        "throughput": result.throughput,
    }


def _differences(target: str, windows: Windows) -> list[dict[str, Any]]:
    """Every later window with an `ok` result of `target` against the first that has one."""
    good = [
        (window_id, result)
        for window_id, results in windows
        if (result := results.get(target)) is not None and result.ok and result.data is not None
    ]
    if not good:
        return []
    base_id, base = good[0]
    return [_difference_from(window_id, result, base_id, base) for window_id, result in good[1:]]


def _difference_from(
    window_id: str, result: TargetResult, base_id: str, base: TargetResult
) -> dict[str, Any]:
    data, base_data = result.data, base.data
    assert data is not None and base_data is not None  # ok results
    rates = data.per_position_acceptance_rates or {}
    base_rates = base_data.per_position_acceptance_rates or {}
    shared = sorted(set(rates) & set(base_rates), key=int)
    return {
        "window": window_id,
        "versus": base_id,
        "acceptance_rate": _difference(data.acceptance_rate, base_data.acceptance_rate),
        "acceptance_length": _difference(data.acceptance_length, base_data.acceptance_length),
        "per_position_acceptance_rates": {pos: rates[pos] - base_rates[pos] for pos in shared},
        "verdicts": {
            figure: _verdict(result, base, figure)
            for figure in ("acceptance_rate", "acceptance_length")
        },
        "per_position_verdicts": {
            pos: _verdict(result, base, "per_position", pos) for pos in shared
        },
        "mismatches": _mismatches(result, base),
    }


def _speedups(target: str, windows: Windows) -> list[dict[str, Any]]:
    """Each window of `target` with spec decoding against the first without (its server
    showed no spec-decode series but its throughput): the measured speedup, beside the
    acceptance length that should explain it."""
    results = [(window_id, found.get(target)) for window_id, found in windows]
    plain = next(
        (
            (window_id, result)
            for window_id, result in results
            if result is not None
            and result.data is None
            and result.throughput is not None
            and result.engine is None
        ),
        None,
    )
    if plain is None:
        return []
    found = []
    for window_id, result in results:
        if result is None or not result.ok or result.throughput is None:
            continue
        assert result.data is not None
        ratios = speedup(result.throughput, plain[1].throughput)
        found.append(
            {
                "window": window_id,
                "versus": plain[0],
                **(ratios or {}),
                "acceptance_length": result.data.acceptance_length,
                "note": SPEEDUP_NOTE,
            }
        )
    return found


SPEEDUP_NOTE = (
    "measured under each window's own load: compare windows of the same benchmark (requests, "
    "concurrency, lengths), or the ratio is the load's as much as the drafting's"
)


NO_INTERVAL = (
    "no verdict: both windows need confidence intervals (sample them, at least 20 intervals each)"
)


def figure_interval(
    result: TargetResult, figure: str, position: str | None = None
) -> tuple[float, float, int] | None:
    """A result's (low, high, degrees of freedom) of a figure (`acceptance_rate`,
    `acceptance_length`, or a position's rate), where its window was sampled enough."""
    confidence = result.confidence
    if confidence is None or confidence.batches < 2:
        return None
    if position is None:
        interval = getattr(confidence, figure)
    else:
        interval = (confidence.per_position_acceptance_rates or {}).get(position)
    return None if interval is None else (interval.low, interval.high, confidence.batches - 1)


def judged_difference(
    value: float,
    result: TargetResult,
    before: float,
    base: TargetResult,
    figure: str,
    position: str | None = None,
) -> Difference | None:
    """`value - before` of two windows' figures with its interval, None where either window
    has no interval of the figure."""
    ours, theirs = (
        figure_interval(result, figure, position),
        figure_interval(base, figure, position),
    )
    if ours is None or theirs is None:
        return None
    return difference(
        value, standard_error(*ours), ours[2], before, standard_error(*theirs), theirs[2]
    )


def _verdict(
    result: TargetResult, base: TargetResult, figure: str, position: str | None = None
) -> dict[str, Any]:
    """`result`'s figure minus `base`'s, its 95 % interval, the smallest difference the pair
    could have detected, and the verdict: better (the interval above 0: more accepted),
    worse, or no significant difference."""
    assert result.data is not None and base.data is not None
    if position is None:
        value, before = getattr(result.data, figure), getattr(base.data, figure)
    else:
        value = (result.data.per_position_acceptance_rates or {}).get(position)
        before = (base.data.per_position_acceptance_rates or {}).get(position)
    found: dict[str, Any] = dict.fromkeys(
        ("difference", "low", "high", "detectable", "verdict", "reason")
    )
    if value is None or before is None:
        found["reason"] = "the figure is not given in both windows"
        return found
    found["difference"] = value - before
    change = judged_difference(value, result, before, base, figure, position)
    if change is None:
        found["reason"] = NO_INTERVAL
        return found
    verdict = (
        "better" if change.low > 0 else "worse" if change.high < 0 else "no significant difference"
    )
    found.update(low=change.low, high=change.high, detectable=change.detectable, verdict=verdict)
    return found


def _mismatches(result: TargetResult, base: TargetResult) -> list[str]:
    """Settings in which two windows' results differ where a comparison needs them equal."""
    said = []
    if result.engine != base.engine:
        said.append(f"engine: {base.engine} then {result.engine}")
    positions = len((result.data.per_position_acceptance_rates or {}) if result.data else {})
    base_positions = len((base.data.per_position_acceptance_rates or {}) if base.data else {})
    if positions != base_positions:
        said.append(f"draft positions (k): {base_positions} then {positions}")
    if result.models and base.models and result.models != base.models:
        said.append(f"model: {', '.join(base.models)} then {', '.join(result.models)}")
    if result.verification != base.verification:
        said.append(f"verification: {base.verification} then {result.verification}")
    return said


def _difference(value: float | None, base: float | None) -> float | None:
    """`value - base`, or null where either figure could not be derived."""
    return None if value is None or base is None else value - base
