"""Flags on suspicious figures: each with its reason, on the result and in the console block."""

from specdec_collector.core.exposition import Series, extract_spec_decode
from specdec_collector.core.figures import build_result
from specdec_collector.core.report import render_block
from specdec_collector.core.results import CountedWindows, FlagKind, Overlaps, TargetResult
from specdec_collector.core.trust import FEW_DRAFTS, NEAR_ZERO_DRAFT_TOKENS
from tests.support.payloads import InstanceCounters, vllm_payload

URL = "http://10.0.0.1:8000/metrics"


def snap(drafts: int, tokens: int, per_pos: list[int]) -> Series:
    return extract_spec_decode(vllm_payload([InstanceCounters(drafts, tokens, per_pos)]))


def kinds(result: TargetResult) -> list[FlagKind]:
    return [flag.kind for flag in result.flags or []]


def test_a_plain_window_has_no_flags() -> None:
    result = build_result(URL, snap(0, 0, [0, 0]), snap(500, 1000, [300, 200]))
    assert result.flags is None and "flags" not in result.as_json()


def test_acceptance_near_zero_over_many_drafts() -> None:
    drafts = NEAR_ZERO_DRAFT_TOKENS // 2  # two tokens a draft: the draft tokens needed
    result = build_result(URL, snap(0, 0, [0, 0]), snap(drafts, 2 * drafts, [3, 1]))
    assert kinds(result) == [FlagKind.NEAR_ZERO]
    assert result.flags is not None and "#34734" in result.flags[0].reason
    # the same rate over fewer draft tokens is flagged as few drafts only
    few = build_result(URL, snap(0, 0, [0, 0]), snap(FEW_DRAFTS - 1, 2 * FEW_DRAFTS - 2, [0, 0]))
    assert kinds(few) == [FlagKind.FEW_DRAFTS]


def test_rising_positions() -> None:
    result = build_result(URL, snap(0, 0, [0, 0, 0]), snap(400, 1200, [100, 150, 20]))
    assert kinds(result) == [FlagKind.RISING_POSITIONS]
    assert result.flags is not None and "position 1" in result.flags[0].reason


def test_draft_length_that_varies_inside_a_sampled_window() -> None:
    chain = [snap(0, 0, [0, 0, 0]), snap(100, 300, [80, 50, 20]), snap(200, 400, [160, 90, 20])]
    result = build_result(URL, chain[0], chain[-1], chain[1:-1])
    assert FlagKind.LENGTH_VARIED in kinds(result)
    flag = next(f for f in result.flags or [] if f.kind is FlagKind.LENGTH_VARIED)
    assert "from 1.00 to 3.00" in flag.reason
    # the same ends unsampled: nothing inside the window to compare
    assert FlagKind.LENGTH_VARIED not in kinds(build_result(URL, chain[0], chain[-1]))


def test_overlapping_windows_are_flagged_and_shown_in_the_block() -> None:
    result = build_result(URL, snap(0, 0, [0, 0]), snap(500, 1000, [300, 200]))
    overlapped = result.with_overlaps(Overlaps(other_teams=CountedWindows(windows=2, seconds=30.0)))
    assert kinds(overlapped) == [FlagKind.OVERLAPS]
    again = overlapped.with_overlaps(Overlaps(other_teams=CountedWindows(windows=1, seconds=5.0)))
    assert kinds(again) == [FlagKind.OVERLAPS]  # replaced, never twice
    assert result.with_overlaps(Overlaps()).flags is None
    block = render_block("10.0.0.1:8000", overlapped)
    assert "Flag" in block and "2 other window(s) ran on this server" in block
