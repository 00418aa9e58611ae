"""The console block, byte for byte as the design shows it."""

import csv
import io
from typing import Any

from specdec_collector.core.report import render_block, render_report, results_csv
from specdec_collector.core.results import ResultData, TargetResult

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


def test_many_positions_wrap_at_the_value_column() -> None:
    """llama.cpp drafts up to 48 positions and more: one line of them was 900 characters."""
    rates = {str(p): (48 - p) / 48 for p in range(48)}
    data = ResultData(num_drafts=48, draft_tokens=48 * 48, accepted_tokens=1176,
                      acceptance_rate=51.0, acceptance_length=25.5,
                      per_position_acceptance_rates=rates)  # fmt: skip
    block = render_block("h:1", TargetResult(status="ok", url="http://h:1/metrics", data=data))
    lines = block.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Per-position"))
    rows = [lines[first]]
    rows += [line for line in lines[first + 1 :] if line.startswith(" " * 46)]
    assert len(rows) > 1 and all(len(line) <= 120 for line in rows)
    text = " ".join(line[46:].strip() for line in rows)
    assert text == "{" + ", ".join(f"{p}: {r:.4f}" for p, r in rates.items()) + "}"
    short = render_block("h:1", TargetResult(status="ok", url="u", data=data.model_copy(
        update={"per_position_acceptance_rates": {"0": 0.5, "1": 0.25}})))  # fmt: skip
    assert f"{'Per-position acceptance rates':<45} {{0: 0.5000, 1: 0.2500}}" in short.splitlines()


def test_what_the_collector_adds_is_a_second_block_after_aisbenchs() -> None:
    """Intervals, throughput, flags and the engine never change AISBench's block: they follow
    it in a block of their own."""
    result = TargetResult.model_validate(
        {
            **SEED,
            "engine": "llamacpp",
            "exact": False,
            "confidence": {
                "method": "ratio estimator",
                "intervals": 40,
                "batches": 20,
                "acceptance_rate": {"low": 98.5, "high": 99.9},
            },
            "throughput": {
                "seconds": 10.0,
                "generated_tokens": 1000,
                "prompt_tokens": None,
                "finished_requests": None,
                "generated_tokens_per_second": 100.0,
                "inter_token_latency_ms": 12.5,
                "generated_tokens_per_step": 2.5,
                "accepted_token_share": 80.9,
            },
            "flags": [{"kind": "few_drafts", "reason": "only 163 drafts"}],
        }
    )
    block = render_block("10.0.0.1:8080", result)
    assert block.startswith(DESIGN_BLOCK)
    assert block[len(DESIGN_BLOCK) :] == (
        "\n---------- Beside AISBench's block  [10.0.0.1:8080] ----------\n"
        "Acceptance rate, 95% interval (%)             98.50 to 99.90\n"
        "Generated tokens/s                            100.00\n"
        "Inter-token latency (ms)                      12.50\n"
        "Generated tokens per step                     2.50\n"
        "Accepted drafts in output (%)                 80.90\n"
        "Flag                                          only 163 drafts\n"
        "Engine                                        llamacpp (approximate: see notes)\n"
    )
    # A server without spec decoding: N/A in AISBench's block, its throughput in the second.
    plain = TargetResult(
        status="na", url=SEED["url"], error="[before] No spec decode metrics found on server",
        throughput=result.throughput,
    )  # fmt: skip
    assert "Generated tokens/s                            100.00" in render_block("a:1", plain)


def test_a_windows_results_as_csv_carry_what_the_json_does() -> None:
    result = TargetResult.model_validate(
        {**SEED, "confidence": {"method": "m", "intervals": 40, "batches": 20,
                                "acceptance_length": {"low": 5.9, "high": 6.0}},
         "flags": [{"kind": "few_drafts", "reason": "r"}, {"kind": "overlaps", "reason": "r"}]}
    )  # fmt: skip
    plain = TargetResult(status="na", url="http://b:2/metrics", error="=1+1")
    rows = list(csv.DictReader(io.StringIO(results_csv([("a:1", result), ("b:2", plain)]))))
    assert [row["target"] for row in rows] == ["a:1", "b:2"]
    assert float(rows[0]["acceptance_rate"]) == SEED["data"]["acceptance_rate"]
    assert (rows[0]["acceptance_length_low"], rows[0]["acceptance_length_high"]) == ("5.9", "6.0")
    assert rows[0]["acceptance_rate_low"] == "" and rows[0]["position_4"] == "0.9877"
    assert rows[0]["flags"] == "few_drafts;overlaps"
    assert rows[1]["error"] == "'=1+1" and rows[1]["num_drafts"] == rows[1]["position_0"] == ""
