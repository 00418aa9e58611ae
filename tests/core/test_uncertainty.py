"""Confidence intervals of sampled windows: on the simulator, whose acceptance per position is
known, the 95 % intervals cover the true figures in about 95 % of windows, and narrow as the
window grows."""

import json
import statistics

import pytest

from specdec_collector.core.arithmetic import interval_increases
from specdec_collector.core.exposition import Series, extract_spec_decode
from specdec_collector.core.figures import build_result
from specdec_collector.core.report import render_block
from specdec_collector.core.results import TargetResult
from specdec_collector.core.uncertainty import (
    MIN_INTERVALS,
    TOO_FEW,
    Interval,
    ratio_interval,
)
from tests.support.simulated import sampled_chain

RATES = [0.8, 0.5, 0.3]


def _window(intervals: int, seed: int) -> list[tuple[float, float, float, list[float]]]:
    """One sampled window over an in-process simulator (requests only, of random lengths and
    number per interval): each interval's drafts, draft tokens, accepted, accepted per position."""
    chain = sampled_chain(RATES, intervals, seed)
    return [
        (s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens,
         [s.accepted_per_pos.get(i, 0.0) for i in range(3)])
        for s in interval_increases(chain)
    ]  # fmt: skip


def _intervals(steps: list[tuple[float, float, float, list[float]]]) -> dict[str, Interval]:
    drafts = [s[0] for s in steps]
    found = {
        "rate": ratio_interval([s[2] for s in steps], [s[1] for s in steps], scale=100.0),
        "length": ratio_interval([s[2] for s in steps], drafts, offset=1.0),
        **{f"p{i}": ratio_interval([s[3][i] for s in steps], drafts) for i in range(3)},
    }
    assert all(value is not None for value in found.values())
    return {name: value for name, value in found.items() if value is not None}


TRUE = {
    "rate": sum(RATES) / 3 * 100,
    "length": 1 + sum(RATES),
    **{f"p{i}": rate for i, rate in enumerate(RATES)},
}


def test_intervals_cover_the_true_figures_at_about_the_stated_rate() -> None:
    windows = 300
    covered = dict.fromkeys(TRUE, 0)
    for seed in range(windows):
        for name, interval in _intervals(_window(40, seed)).items():
            covered[name] += interval.low <= TRUE[name] <= interval.high
    for name, hits in covered.items():
        # 95 % of 300: 285; the binomial's 99.9 % band is about 273 to 296.
        assert 270 <= hits <= 297, (name, hits)


def test_intervals_narrow_as_the_window_grows() -> None:
    def width(intervals: int) -> float:
        found = [_intervals(_window(intervals, seed))["length"] for seed in range(40)]
        return statistics.median(i.high - i.low for i in found)

    short, long = width(40), width(160)
    # Four times the intervals: half the width, as 1 / sqrt(n) has it (within noise).
    assert 0.35 < long / short < 0.7, (short, long)


def test_too_few_intervals_give_none() -> None:
    steps = _window(MIN_INTERVALS - 1, 1)
    assert ratio_interval([s[2] for s in steps], [s[1] for s in steps]) is None
    steps = _window(MIN_INTERVALS, 1)
    assert ratio_interval([s[2] for s in steps], [s[1] for s in steps]) is not None


def _chain(intervals: int, seed: int = 7, engine: str = "llamacpp") -> list[Series]:
    return sampled_chain(RATES, intervals, seed, engine=engine)


def test_a_sampled_windows_result_carries_its_intervals_around_its_figures() -> None:
    chain = _chain(40)
    result = build_result("http://h:1/metrics", chain[0], chain[-1], chain[1:-1])
    assert result.data is not None and result.confidence is not None
    confidence = result.confidence
    assert (confidence.intervals, confidence.batches, confidence.reason) == (40, 20, None)
    for interval, figure in [
        (confidence.acceptance_rate, result.data.acceptance_rate),
        (confidence.acceptance_length, result.data.acceptance_length),
    ]:
        assert interval is not None and figure is not None
        assert interval.low < figure < interval.high
        assert (interval.low + interval.high) / 2 == pytest.approx(figure)
    rates = result.data.per_position_acceptance_rates or {}
    positions = confidence.per_position_acceptance_rates or {}
    assert positions.keys() == rates.keys() == {"0", "1", "2"}
    assert all(positions[p].low < rates[p] < positions[p].high for p in rates)
    # Beside AISBench's keys, never in them; kept through storage's JSON.
    assert "confidence" not in result.as_json()["data"]
    stored = TargetResult.from_stored(json.loads(result.as_stored()), result.url)
    assert stored.confidence == confidence


def test_too_few_samples_say_why_and_an_unsampled_window_has_none() -> None:
    chain = _chain(5)
    few = build_result("http://h:1/metrics", chain[0], chain[-1], chain[1:-1])
    assert few.confidence is not None and few.confidence.acceptance_rate is None
    assert few.confidence.reason == TOO_FEW.format(n=5, need=MIN_INTERVALS)
    assert build_result("http://h:1/metrics", chain[0], chain[-1]).confidence is None


@pytest.mark.parametrize("engine", ["sglang", "max"])
def test_engines_of_other_ratios_get_the_intervals_their_figures_allow(engine: str) -> None:
    chain = _chain(30, engine=engine)
    result = build_result("http://h:1/metrics", chain[0], chain[-1], chain[1:-1])
    assert result.data is not None and result.confidence is not None
    length = result.confidence.acceptance_length
    assert length is not None and result.data.acceptance_length is not None
    assert length.low < result.data.acceptance_length < length.high
    if engine == "max":  # its per-position rates are ratios of its histograms' sums and counts
        assert (result.confidence.per_position_acceptance_rates or {}).keys() == {"0", "1", "2"}


def test_the_console_block_shows_the_intervals_below_aisbenchs_rows() -> None:
    chain = _chain(40)
    result = build_result("http://h:1/metrics", chain[0], chain[-1], chain[1:-1])
    assert result.confidence is not None and result.confidence.acceptance_rate is not None
    block = render_block("h:1", result)
    rate = result.confidence.acceptance_rate
    assert f"{rate.low:.2f} to {rate.high:.2f}" in block
    lines = block.splitlines()
    assert lines.index(next(x for x in lines if x.startswith("Per-position"))) < lines.index(
        next(x for x in lines if x.startswith("Acceptance rate, 95% interval"))
    )


def test_compare_gives_a_verdict_on_each_figures_interval() -> None:
    """Two windows of one drafter: no significant difference; a worse drafter: worse, with
    the smallest difference the pair could have detected; other settings are flagged."""
    from specdec_collector.core.comparison import compare_results

    def sampled(rates: list[float], seed: int) -> TargetResult:
        chain = sampled_chain(rates, 40, seed, instances=1, requests=(2, 5), tokens=(16, 64))
        return build_result("http://h:1/metrics", chain[0], chain[-1], chain[1:-1])

    base, same, worse = sampled(RATES, 11), sampled(RATES, 12), sampled([0.6, 0.3, 0.1], 13)
    shorter = sampled([0.8, 0.5], 14)
    rows = compare_results(
        [("a", {"h:1": base}), ("b", {"h:1": same}), ("c", {"h:1": worse}),
         ("d", {"h:1": shorter})]
    )  # fmt: skip
    by_window = {d["window"]: d for d in rows[0]["differences"]}
    rate_b, rate_c = (
        by_window["b"]["verdicts"]["acceptance_rate"],
        by_window["c"]["verdicts"]["acceptance_rate"],
    )
    assert rate_b["verdict"] == "no significant difference"
    assert rate_b["low"] < 0 < rate_b["high"] and rate_b["detectable"] > 0
    assert rate_c["verdict"] == "worse" and rate_c["high"] < 0
    assert abs(rate_c["difference"]) > rate_c["detectable"]
    assert by_window["c"]["per_position_verdicts"]["2"]["verdict"] == "worse"
    assert by_window["b"]["mismatches"] == []
    assert by_window["d"]["mismatches"] == ["draft positions (k): 3 then 2"]


def test_compare_flags_windows_of_other_models() -> None:
    from specdec_collector.core.comparison import compare_results
    from tests.support.payloads import InstanceCounters, vllm_payload

    def window(model: str) -> TargetResult:
        def snap(drafts: int, accepted: list[int]) -> Series:
            counters = InstanceCounters(drafts, 2 * drafts, accepted, model=model)
            return extract_spec_decode(vllm_payload([counters]))

        return build_result("http://h:1/metrics", snap(0, [0, 0]), snap(300, [200, 100]))

    rows = compare_results([("a", {"h:1": window("m-8b")}), ("b", {"h:1": window("m-70b")})])
    (said,) = rows[0]["differences"][0]["mismatches"]
    before, _, after = said.removeprefix("model: ").partition(" then ")
    assert "m-8b" in before and "m-70b" not in before and "m-70b" in after
