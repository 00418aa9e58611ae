"""Engine restarts inside a window: found, counted once, and never called exact.

The payloads are llama.cpp's (`tests.support.payloads.llamacpp_payload`, written from its
`to_metrics`): no `_created`, and the per-position family printed only once a speculative
request has completed since the server started.
"""

from specdec_collector.core.exposition import Series, extract_spec_decode
from specdec_collector.core.figures import build_result
from specdec_collector.core.notes import (
    RESTARTED,
    RESTARTED_SAMPLED,
    UNSEEN_RESTART,
    VARIABLE_DRAFT_LENGTH,
)
from specdec_collector.core.report import render_block
from tests.support.payloads import (
    InstanceCounters,
    LlamaCppCounters,
    llamacpp_payload,
    vllm_payload,
)

URL = "http://127.0.0.1:8080/metrics"


def llama(drafts: int, per_pos: list[int], predicted: int, prompt: int = 0) -> Series:
    counters = LlamaCppCounters(
        drafts=drafts, draft_tokens=8 * drafts, accepted_per_pos=per_pos,
        predicted=predicted, prompt=prompt, decodes=predicted // 4,
    )  # fmt: skip
    return extract_spec_decode(llamacpp_payload(counters))


def test_a_llamacpp_restart_whose_per_position_family_comes_back_late_counts_once() -> None:
    """Sampled: 100 -> 150, crash; the new server shows its scalar counters at once (12 drafts,
    no per-position family yet), the family one sample later."""
    before = llama(100, [90, 80], 4000, 900)
    chain = [
        llama(150, [135, 120], 6000, 1300),
        llama(12, [], 500, 200),  # restarted: per-position family absent
        llama(30, [27, 20], 1200, 400),  # ... back, from 0
    ]
    after = llama(41, [37, 30], 1700, 500)
    result = build_result(URL, before, after, chain)
    assert result.restarts == 1
    assert result.data is not None
    assert result.data.num_drafts == (150 - 100) + 41
    assert result.data.accepted_tokens == (135 + 120 - 90 - 80) + (37 + 30)
    assert result.data.per_position_acceptance_rates == {
        "0": (135 - 90 + 37) / 91, "1": (120 - 80 + 30) / 91,
    }  # fmt: skip
    assert result.exact is False
    assert result.notes is not None and RESTARTED_SAMPLED.format(n=1) in result.notes


def test_a_restart_whose_new_counts_outgrew_the_old_is_found_by_its_falling_witnesses() -> None:
    """Unsampled llama.cpp: every spec-decode counter is higher at the end than at the start,
    but its prompt tokens fell. The figures are the new server's, and say so."""
    before = llama(90, [80, 70], 9000, prompt=5000)
    after = llama(198, [180, 160], 9500, prompt=3000)  # prompt tokens fell: a new server
    result = build_result(URL, before, after)
    assert result.restarts == 1
    assert result.data is not None and result.data.num_drafts == 198  # not 198 - 90
    assert result.data.accepted_tokens == 340
    assert result.exact is False
    assert result.notes is not None and RESTARTED.format(n=1) in result.notes


def test_an_unsampled_llamacpp_window_says_a_restart_may_be_unseen() -> None:
    result = build_result(URL, llama(90, [80, 70], 9000, 5000), llama(198, [180, 160], 9500, 6000))
    assert (result.restarts, result.exact) == (0, True)
    assert result.notes is not None and UNSEEN_RESTART.format(engine="llamacpp") in result.notes
    sampled = build_result(
        URL, llama(90, [80, 70], 9000, 5000), llama(198, [180, 160], 9500, 6000),
        [llama(150, [130, 110], 9200, 5500)],
    )  # fmt: skip
    assert sampled.notes is not None
    assert not any("cannot be seen" in note for note in sampled.notes)


def test_a_vllm_restart_without_samples_is_counted_and_says_what_was_lost() -> None:
    before = extract_spec_decode(
        vllm_payload([InstanceCounters(300, 1200, [250, 200], created=1.0)])
    )
    after = extract_spec_decode(vllm_payload([InstanceCounters(85, 340, [70, 60], created=2.0)]))
    result = build_result(URL, before, after)
    assert result.restarts == 1 and result.exact is False
    assert result.data is not None and result.data.num_drafts == 85
    assert result.notes is not None and RESTARTED.format(n=1) in result.notes
    block = render_block("127.0.0.1:8080", result)
    assert "Restarts" in block and "1 (see notes)" in block


def test_a_server_that_generated_tokens_but_drafted_none_says_so() -> None:
    """llama.cpp without speculation prints its three counters at 0 and no per-position family."""
    before, after = llama(0, [], 100, 50), llama(0, [], 740, 120)
    result = build_result(URL, before, after)
    assert (result.status, result.engine, result.exact) == ("na", "llamacpp", False)
    assert result.error == (
        "No spec decode activity detected during benchmark window: the server generated 640 "
        "tokens in the window and drafted none (speculative decoding is off); start "
        "llama-server with a draft model (-md) or --spec-type (ngram-simple, for one)"
    )
    idle = build_result(URL, before, before)
    assert idle.error == "No spec decode activity detected during benchmark window"


def test_drafts_of_variable_length_say_so_with_their_mean_length() -> None:
    """llama.cpp's n-gram drafts: 8 positions, 7.6 draft tokens a draft on average."""
    before = extract_spec_decode(llamacpp_payload(LlamaCppCounters(10, 76, [9] * 8, 500, 100, 10)))
    after = extract_spec_decode(llamacpp_payload(LlamaCppCounters(60, 456, [50] * 8, 900, 300, 60)))
    result = build_result(URL, before, after)
    assert result.notes is not None
    assert VARIABLE_DRAFT_LENGTH.format(mean="7.60", positions=8) in result.notes
    assert result.data is not None and result.data.per_position_acceptance_rates == {
        str(p): 41 / 50 for p in range(8)
    }
    fixed = build_result(  # every draft two tokens long, two positions
        URL, extract_spec_decode(llamacpp_payload(LlamaCppCounters(10, 20, [9, 8], 500))),
        extract_spec_decode(llamacpp_payload(LlamaCppCounters(60, 120, [50, 40], 900))),
    )  # fmt: skip
    assert fixed.notes is not None and not any("variable" in note for note in fixed.notes)
