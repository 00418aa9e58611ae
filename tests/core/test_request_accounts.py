"""Each answer's own account of its request's drafts: read from every shape a server writes,
summed and spread, and held against a window's counters over the same load."""

from typing import Any

import pytest

from specdec_collector.core.request_accounts import (
    DIFFERENCES,
    RequestAccount,
    account_of,
    merged_chunks,
    render,
    summarise,
)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (  # vLLM 0.32 `--per-request-spec-decode-metrics summary` (RequestSpecDecodeMetrics)
            {"metrics": {"speculative_decoding": {"num_spec_steps": 10, "num_draft_tokens": 40,
                                                  "num_accepted_draft_tokens": 17}}},
            RequestAccount("vllm", 40, 17, 10),
        ),
        ({"timings": {"draft_n": 64, "draft_n_accepted": 31}}, RequestAccount("llamacpp", 64, 31)),
        # llama.cpp leaves both out of the timings of a request that drafted nothing.
        ({"timings": {"predicted_n": 12, "predicted_ms": 80.0}}, RequestAccount("llamacpp", 0, 0)),
        (  # SGLang's three generations of meta_info names
            {"meta_info": {"spec_num_proposed_drafts": 30, "spec_num_correct_drafts": 12,
                           "spec_verify_ct": 10}},
            RequestAccount("sglang", 30, 12, 10),
        ),
        ({"meta_info": {"spec_proposed_drafts": 9, "spec_accepted_drafts": 4}},
         RequestAccount("sglang", 9, 4)),
        ({"meta_info": {"spec_draft_token_num": 6, "spec_accept_token_num": 5}},
         RequestAccount("sglang", 6, 5)),
        (  # a gateway's OpenAI usage fields
            {"usage": {"completion_tokens": 50, "completion_tokens_details": {
                "accepted_prediction_tokens": 20, "rejected_prediction_tokens": 8}}},
            RequestAccount("usage", 28, 20),
        ),
        ({"usage": {"completion_tokens": 50}}, None),
        # Odd or hostile values are no account, never a crash.
        ({"timings": {"draft_n": -1, "draft_n_accepted": 3}}, None),
        ({"timings": {"draft_n": "64", "draft_n_accepted": 3}}, None),
        ({"metrics": {"speculative_decoding": {"num_draft_tokens": 1.5,
                                               "num_accepted_draft_tokens": 1}}}, None),
        ({"metrics": "no", "timings": None, "meta_info": [1]}, None),
    ],
)  # fmt: skip
def test_every_shape_of_account(answer: dict[str, object], expected: RequestAccount | None) -> None:
    assert account_of(answer) == expected


def test_a_streams_final_usage_chunk_carries_the_account() -> None:
    chunks: list[dict[str, Any]] = [
        {"choices": [{"text": "a"}], "usage": None},
        {"choices": [], "usage": {"completion_tokens": 2},
         "metrics": {"speculative_decoding": {"num_spec_steps": 1, "num_draft_tokens": 4,
                                              "num_accepted_draft_tokens": 1}}},
    ]  # fmt: skip
    assert account_of(merged_chunks(chunks)) == RequestAccount("vllm", 4, 1, 1)


def test_the_view_spreads_acceptance_over_requests() -> None:
    accounts = [RequestAccount("vllm", 40, n, 10) for n in range(0, 41, 4)]  # 11 requests
    view = summarise(accounts)
    assert view is not None and view.accounted == 11 and view.steps == 110
    assert view.drafted == 440 and view.accepted == sum(range(0, 41, 4))
    assert view.acceptance_rate is not None and view.acceptance_length is not None
    # Rates 0, 10, ..., 100 %: the inclusive deciles are 10 and 90, the median 50.
    spread = view.acceptance_rate
    assert spread.p10 == pytest.approx(10.0) and spread.p50 == 50.0
    assert spread.p90 == pytest.approx(90.0)
    assert view.acceptance_length.p50 == 1 + 20 / 10
    text = render(view)
    assert "11 answers with accounts, vllm" in text and DIFFERENCES["vllm"] in text
    assert summarise([]) is None
