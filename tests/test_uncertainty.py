"""Confidence intervals of sampled windows: on the simulator, whose acceptance per position is
known, the 95 % intervals cover the true figures in about 95 % of windows, and narrow as the
window grows."""

import random
import statistics

from specdec_collector.core.arithmetic import interval_increases
from specdec_collector.core.exposition import extract_spec_decode
from specdec_collector.core.uncertainty import MIN_INTERVALS, Interval, ratio_interval
from specdec_collector.simulator.server import SimulatedServer

RATES = [0.8, 0.5, 0.3]


def _window(intervals: int, seed: int) -> list[tuple[float, float, float, list[float]]]:
    """One sampled window over an in-process simulator (requests only, of random lengths and
    number per interval): each interval's drafts, draft tokens, accepted, accepted per position."""
    server = SimulatedServer(
        instances=2, k=3, drafts_per_s=0, acceptance=RATES, seed=seed, engine="llamacpp"
    )
    draw = random.Random(seed)
    chain = [extract_spec_decode(server.render())]
    for _ in range(intervals):
        for _ in range(draw.randint(1, 4)):
            server.generate(draw.randint(8, 64))
        chain.append(extract_spec_decode(server.render()))
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
