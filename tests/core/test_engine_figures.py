"""Results engine by engine: what each engine's counters give, exactly or not, and why.

Payloads are written here the way each engine prints them (see docs/engines.md);
every expected figure is computed by hand in the test.
"""

from fractions import Fraction

from specdec_collector.core.counters import Role
from specdec_collector.core.exposition import Series, extract_spec_decode
from specdec_collector.core.figures import build_result
from specdec_collector.core.notes import (
    EARLY_V1_NOTE,
    LLAMACPP_COMPLETION_NOTE,
    MINDIE_REASON,
    SGLANG_NOTES,
    TRTLLM_NOTE,
    UNSEEN_RESTART,
    V0_REASON,
)
from specdec_collector.core.report import render_block
from specdec_collector.core.targets import EngineHints

URL = "http://10.0.0.1:8080/metrics"


def llamacpp(drafts: float, draft_tokens: float, per_position: list[float]) -> Series:
    """llama.cpp's four families, printed with %g (six significant digits), as it prints them."""
    name = "llamacpp:spec_decode_num"
    lines = [
        f"# TYPE {name}_drafts_total counter", f"{name}_drafts_total {drafts:g}",
        f"# TYPE {name}_draft_tokens_total counter", f"{name}_draft_tokens_total {draft_tokens:g}",
        f"# TYPE {name}_accepted_tokens_total counter",
        f"{name}_accepted_tokens_total {sum(per_position):g}",
        f"# TYPE {name}_accepted_tokens_per_pos_total counter",
        *(f'{name}_accepted_tokens_per_pos_total{{position="{p}"}} {n:g}'
          for p, n in enumerate(per_position)),
    ]  # fmt: skip
    return extract_spec_decode("\n".join(lines) + "\n")


def test_llamacpp_below_a_million_is_exact() -> None:
    result = build_result(URL, llamacpp(100, 300, [80, 50, 20]), llamacpp(250, 750, [200, 120, 60]))
    assert (result.status, result.engine, result.exact) == ("ok", "llamacpp", True)
    assert result.notes == [LLAMACPP_COMPLETION_NOTE, UNSEEN_RESTART.format(engine="llamacpp")]
    assert result.data is not None
    assert (result.data.num_drafts, result.data.draft_tokens, result.data.accepted_tokens) == (
        150, 450, (200 + 120 + 60) - (80 + 50 + 20)
    )  # fmt: skip
    assert result.data.acceptance_length == float(1 + Fraction(230, 150))
    assert result.data.per_position_acceptance_rates == {
        "0": 120 / 150, "1": 70 / 150, "2": 40 / 150
    }  # fmt: skip
    block = render_block("10.0.0.1:8080", result)
    assert block.splitlines()[-1].split() == ["Engine", "llamacpp"]


def test_llamacpp_past_a_million_is_approximate_with_its_bound() -> None:
    """3054061 drafts print as 3.05406e+06: each end is known within half a unit of the 6th
    digit, 5 drafts; the increase within 5 + 5."""
    before = llamacpp(3_054_061, 15_270_305, [2_000_000, 900_000])
    after = llamacpp(3_104_555, 15_522_775, [2_040_000, 919_999])
    result = build_result(URL, before, after)
    assert (result.status, result.exact) == ("ok", False)
    assert result.data is not None
    # What the printed values say, not the true counts.
    assert result.data.num_drafts == 3_104_560 - 3_054_060
    assert result.notes is not None and result.notes[1] == (
        "llama.cpp prints its counters with 6 significant digits and some reached 10^6: each "
        "count is known within half a unit of its 6th digit at each end (±10 drafts, "
        "±100 draft tokens, ±10 accepted tokens)"
    )
    assert "Engine                                        llamacpp (approximate: see notes)" in (
        render_block("h:1", result)
    )


def test_early_vllm_v1_gives_the_acceptance_rate_only() -> None:
    def early(draft_tokens: int, accepted: int) -> Series:
        return extract_spec_decode(
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {draft_tokens}.0\n'
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {accepted}.0\n'
            f'vllm:generation_tokens_total{{engine="0"}} {accepted * 3}.0\n'
        )

    result = build_result(URL, early(100, 60), early(500, 310))
    assert (result.status, result.engine, result.exact) == ("ok", "vllm", True)
    assert result.notes == [EARLY_V1_NOTE, UNSEEN_RESTART.format(engine="vllm")]
    assert result.data is not None
    assert result.data.acceptance_rate == float(Fraction(250 * 100, 400))
    assert result.data.num_drafts is None and result.data.acceptance_length is None
    assert result.data.per_position_acceptance_rates is None
    block = render_block("h:1", result)
    assert "Acceptance length                             N/A" in block
    assert "Engine" not in block  # still vLLM


def test_vllm_v0_is_na_saying_why_with_its_lifetime_ratios() -> None:
    def v0(total: int) -> Series:
        return extract_spec_decode(
            f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {5 * total}.0\n'
            f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {3 * total}.0\n'
            f'vllm:spec_decode_num_emitted_tokens_total{{model_name="m"}} {4 * total}.0\n'
            'vllm:spec_decode_draft_acceptance_rate{model_name="m"} 0.6\n'
            'vllm:spec_decode_efficiency{model_name="m"} 0.55\n'
        )

    result = build_result(URL, v0(10), v0(30))
    assert (result.status, result.engine, result.error, result.data) == (
        "na", "vllm-v0", V0_REASON, None
    )  # fmt: skip
    assert result.lifetime is not None and [
        r.model_dump(exclude_none=True) for r in result.lifetime
    ] == [{"labels": {"model_name": "m"}, "draft_acceptance_rate": 0.6, "efficiency": 0.55}]
    assert result.series_resets == 0  # the gauges are never counters


def test_a_server_of_two_engines_gets_each_ones_result_and_their_sum() -> None:
    def both(vllm_drafts: int, llama_drafts: int) -> Series:
        vllm = extract_spec_decode(
            f"vllm:spec_decode_num_drafts_total {vllm_drafts}.0\n"
            f"vllm:spec_decode_num_draft_tokens_total {3 * vllm_drafts}.0\n"
            f"vllm:spec_decode_num_accepted_tokens_total {2 * vllm_drafts}.0\n"
        )
        return {**vllm, **llamacpp(llama_drafts, 3 * llama_drafts, [llama_drafts])}

    result = build_result(URL, both(10, 20), both(110, 70))
    assert (result.status, result.engine, result.exact) == ("ok", "vllm+llamacpp", True)
    assert result.engines is not None and [e.engine for e in result.engines] == ["vllm", "llamacpp"]
    assert [e.data.num_drafts for e in result.engines if e.data] == [100, 50]
    assert result.data is not None and result.data.num_drafts == 150
    assert result.data.acceptance_rate == float(Fraction((200 + 50) * 100, 300 + 150))
    assert result.notes is not None and result.notes[0].startswith("the sum over the engines")


def test_resets_and_restarts_count_every_engine_even_one_gone_by_the_end() -> None:
    """llama.cpp restarts (its four series fall) and is gone by the stop; vLLM restarts
    later (its three fall): two restarts, seven series resets, and vLLM's figures alone."""

    def vllm(drafts: int) -> Series:
        return extract_spec_decode(
            f"vllm:spec_decode_num_drafts_total {drafts}.0\n"
            f"vllm:spec_decode_num_draft_tokens_total {3 * drafts}.0\n"
            f"vllm:spec_decode_num_accepted_tokens_total {2 * drafts}.0\n"
        )

    before = {**vllm(10), **llamacpp(20, 60, [20])}
    middle = {**vllm(50), **llamacpp(5, 15, [5])}
    result = build_result(URL, before, vllm(4), [middle])
    assert (result.restarts, result.series_resets) == (2, 4 + 3)
    assert (result.status, result.engine) == ("ok", "vllm")
    # 10 -> 50, then a restart: 4 counted from zero.
    assert result.data is not None and result.data.num_drafts == 40 + 4


def test_a_payload_of_no_engine_is_no_metrics() -> None:
    result = build_result(URL, {}, {})
    assert result.error == (
        "[before] No spec decode metrics found on server; "
        "[after] No spec decode metrics found on server"
    )


def trtllm(draft_tokens: int, accepted: int, drafted_0: int, accepted_at: list[int]) -> Series:
    """TensorRT-LLM's families at /prometheus/metrics (per-position series: finished requests)."""
    name = "trtllm_spec_decode"
    lines = [
        f"{name}_num_draft_tokens_total {draft_tokens}.0",
        f"{name}_num_accepted_tokens_total {accepted}.0",
        f'{name}_drafted_tokens_total{{token_position="0"}} {drafted_0}.0',
        f'{name}_drafted_tokens_total{{token_position="1"}} {max(0, drafted_0 - 2)}.0',
        *(f'{name}_accepted_tokens_total{{token_position="{p}"}} {n}.0'
          for p, n in enumerate(accepted_at)),
    ]  # fmt: skip
    return extract_spec_decode("\n".join(lines) + "\n")


def test_trtllm_exact_rate_and_approximate_length_from_finished_requests() -> None:
    # Its series appear only after the first speculative iteration: the window starts at 0.
    result = build_result(URL, {}, trtllm(400, 260, 190, [150, 90]))
    assert (result.status, result.engine, result.exact) == ("ok", "trtllm", False)
    assert result.notes == [TRTLLM_NOTE, UNSEEN_RESTART.format(engine="trtllm")]
    assert result.data is not None
    assert result.data.acceptance_rate == float(Fraction(260 * 100, 400))  # exact
    assert result.data.num_drafts == 190
    assert result.data.acceptance_length == float(1 + Fraction(150 + 90, 190))
    assert result.data.per_position_acceptance_rates == {
        "0": 150 / 190, "1": 90 / 190
    }  # fmt: skip


def sglang(verify_calls: int, generated: int, requests: int, extra: str = "") -> Series:
    return extract_spec_decode(
        f'sglang:spec_verify_calls_total{{model_name="m"}} {verify_calls}.0\n'
        f'sglang:generation_tokens_total{{model_name="m"}} {generated}.0\n'
        f'sglang:num_requests_total{{model_name="m"}} {requests}.0\n'
        # Gauges over the last log interval: never counters, never averaged into a figure.
        'sglang:spec_accept_length{model_name="m"} 3.9\n'
        'sglang:spec_accept_rate{model_name="m"} 0.7\n'
        'sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0\n' + extra
    )


def test_sglang_length_from_generated_tokens_requests_and_verify_calls() -> None:
    """10 requests finish, 60 verify calls, 250 tokens: each request gave
    1 + sum(accepted + 1): accepted = 250 - 10 - 60 = 180, length = (250 - 10) / 60 = 4."""
    result = build_result(URL, sglang(100, 1000, 40), sglang(160, 1250, 50))
    assert (result.status, result.engine, result.exact) == ("ok", "sglang", False)
    assert result.notes == [*SGLANG_NOTES, UNSEEN_RESTART.format(engine="sglang")]
    assert result.data is not None
    assert result.data.num_drafts == 60 and result.data.accepted_tokens == 180
    assert result.data.acceptance_length == 4.0
    assert result.data.draft_tokens is None and result.data.acceptance_rate is None


def test_sglang_without_speculative_decoding_has_no_spec_metrics() -> None:
    plain = extract_spec_decode(
        "sglang:generation_tokens_total 5.0\nsglang:num_requests_total 1.0\n"
    )
    # Its token and request counters are read as witnesses only: the same answer as a vLLM
    # server without speculative decoding, with its throughput.
    assert {key.role for key in plain} == {Role.GENERATION_TOKENS, Role.REQUESTS}
    assert build_result(URL, plain, plain).error == (
        "[before] No spec decode metrics found on server; "
        "[after] No spec decode metrics found on server"
    )


def test_engines_of_other_meanings_are_not_summed() -> None:
    mixed_before = {**trtllm(0, 0, 0, [0, 0]), **sglang(0, 0, 0)}
    mixed_after = {**trtllm(400, 260, 190, [150, 90]), **sglang(60, 250, 10)}
    result = build_result(URL, mixed_before, mixed_after)
    assert result.engine == "trtllm+sglang" and result.exact is False
    assert result.data is not None and result.data.acceptance_rate == 65.0  # TensorRT-LLM's
    assert result.notes is not None and result.notes[0] == (
        "the engines' figures do not mean the same: these are trtllm's; see `engines`"
    )


def test_sglang_with_its_draft_tokens_per_step_gives_draft_tokens_and_the_rate() -> None:
    hints = EngineHints("sglang", draft_tokens_per_step=4)
    result = build_result(URL, sglang(100, 1000, 40), sglang(160, 1250, 50), (), hints)
    assert result.data is not None
    assert result.data.draft_tokens == 60 * 4
    assert result.data.acceptance_rate == float(Fraction(180 * 100, 240))
    assert result.notes is not None
    assert result.notes[-2] == "draft tokens from the configured 4 per step (draft_tokens_per_step)"


def test_a_target_named_mindie_is_na_saying_why() -> None:
    result = build_result(URL, {}, {}, (), EngineHints("mindie"))
    assert (result.status, result.engine, result.error) == ("na", "mindie", MINDIE_REASON)
