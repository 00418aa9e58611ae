"""The console block, byte for byte as the design shows it."""

from typing import Any

from app.report import render_block, render_report
from app.results import TargetResult

SEED: dict[str, Any] = {
    "status": "ok",
    "url": "http://10.0.0.1:8080/metrics",
    "error": None,
    "data": {
        "num_drafts": 163,
        "draft_tokens": 815,
        "accepted_tokens": 809,
        "acceptance_rate": 99.2638036809816,
        "acceptance_length": 5.96319018404908,
        "per_position_acceptance_rates": {
            "0": 0.9939,
            "1": 0.9939,
            "2": 0.9939,
            "3": 0.9939,
            "4": 0.9877,
        },
    },
}

DESIGN_BLOCK = """
===================================================================
========== Speculative Decoding Metrics  [10.0.0.1:8080] ==========
===================================================================
Acceptance rate (%)                           99.26
Acceptance length                             5.96
Drafts                                        163
Draft tokens                                  815
Accepted tokens                               809
Per-position acceptance rates                 {0: 0.9939, 1: 0.9939, 2: 0.9939, 3: 0.9939, 4: 0.9877}
"""


def test_block_matches_the_design_byte_for_byte() -> None:
    assert render_block("10.0.0.1:8080", TargetResult.model_validate(SEED)) == DESIGN_BLOCK


def test_na_block() -> None:
    result = TargetResult(
        status="na",
        url="http://[::1]:9000/metrics",
        error="[before] Metrics endpoint returned HTTP 500",
    )
    title = "========== Speculative Decoding Metrics  [[::1]:9000] =========="
    assert render_block("[::1]:9000", result) == (
        f"\n{'=' * len(title)}\n{title}\n{'=' * len(title)}\n"
        "Status                                        N/A\n"
        "Reason                                        [before] Metrics endpoint returned HTTP 500\n"
    )


def test_positions_sort_numerically_and_blocks_concatenate() -> None:
    data = dict(SEED["data"])
    data["per_position_acceptance_rates"] = {"10": 0.1, "2": 0.5, "0": 1.0}
    a, b = TargetResult.model_validate({**SEED, "data": data}), TargetResult.model_validate(SEED)
    report = render_report([("a:1", a), ("b:2", b)])
    assert "{0: 1.0000, 2: 0.5000, 10: 0.1000}" in report
    assert report == render_block("a:1", a) + render_block("b:2", b)
