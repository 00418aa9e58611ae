"""Throughput and latency beside acceptance (`core.throughput`): each figure against what the
test computes itself from the counters it wrote, and end to end against what the load
generator (`specdec load`) counted of the answers it received."""

from specdec_collector.core.exposition import extract_spec_decode
from specdec_collector.core.figures import build_result
from specdec_collector.core.throughput import speedup

URL = "http://engine:8000/metrics"
LABELS = 'engine="0",model_name="m"'


def vllm(
    generated: int, prompt: int, finished: int, itl_sum: float, later: int, first: int,
    steps: int, drafts: int | None = None, accepted: int = 0,
) -> str:  # fmt: skip
    """A vLLM payload: its witnesses, and its spec-decode counters where `drafts` is given."""
    lines = [
        f"vllm:generation_tokens_total{{{LABELS}}} {generated}.0",
        f"vllm:prompt_tokens_total{{{LABELS}}} {prompt}.0",
        f"vllm:e2e_request_latency_seconds_count{{{LABELS}}} {finished}.0",
        f"vllm:e2e_request_latency_seconds_sum{{{LABELS}}} {finished * 1.5}",
        f"vllm:inter_token_latency_seconds_sum{{{LABELS}}} {itl_sum}",
        f"vllm:inter_token_latency_seconds_count{{{LABELS}}} {later}.0",
        f"vllm:time_to_first_token_seconds_count{{{LABELS}}} {first}.0",
        f"vllm:time_to_first_token_seconds_sum{{{LABELS}}} 9.5",
        f"vllm:iteration_tokens_total_count{{{LABELS}}} {steps}.0",
        f"vllm:iteration_tokens_total_sum{{{LABELS}}} {generated + prompt}.0",
    ]
    if drafts is not None:
        lines += [
            f"vllm:spec_decode_num_drafts_total{{{LABELS}}} {drafts}.0",
            f"vllm:spec_decode_num_draft_tokens_total{{{LABELS}}} {drafts * 3}.0",
            f"vllm:spec_decode_num_accepted_tokens_total{{{LABELS}}} {accepted}.0",
        ]
    return "\n".join(lines) + "\n"


def test_a_vllm_windows_throughput_is_its_witnesses_increase_over_the_seconds() -> None:
    before = extract_spec_decode(vllm(1000, 5000, 10, 4.0, 800, 10, 900, drafts=300, accepted=400))
    after = extract_spec_decode(
        vllm(3000, 9000, 30, 10.0, 1400, 30, 1500, drafts=900, accepted=1700)
    )
    result = build_result(URL, before, after, seconds=8.0)
    throughput = result.throughput
    assert result.status == "ok" and throughput is not None
    assert throughput.seconds == 8.0
    assert (throughput.generated_tokens, throughput.prompt_tokens) == (2000, 4000)
    assert throughput.finished_requests == 20
    assert throughput.generated_tokens_per_second == 2000 / 8
    # 6 s of inter-token latencies over the tokens after each of the 20 first tokens.
    assert throughput.inter_token_latency_ms == 6.0 / (2000 - 20) * 1000
    assert throughput.generated_tokens_per_step == 2000 / 600
    assert throughput.accepted_token_share == 1300 / 2000 * 100
    # Without the scrapes' times, nothing per second; the rest stands.
    untimed = build_result(URL, before, after).throughput
    assert untimed is not None and untimed.generated_tokens_per_second is None
    assert untimed.generated_tokens_per_step == 2000 / 600


def test_a_vllm_without_spec_decoding_is_na_with_its_throughput() -> None:
    before = extract_spec_decode(vllm(1000, 5000, 10, 4.0, 800, 10, 900))
    after = extract_spec_decode(vllm(1500, 6000, 15, 6.5, 1295, 15, 1395))
    result = build_result(URL, before, after, seconds=5.0)
    assert result.status == "na" and result.data is None
    # The contract's error and raw, as for any server without spec-decode metrics.
    assert result.error == (
        "[before] No spec decode metrics found on server; "
        "[after] No spec decode metrics found on server"
    )
    assert result.raw.before is None and result.raw.after is None
    plain = result.throughput
    assert plain is not None and plain.generated_tokens_per_second == 500 / 5
    assert plain.inter_token_latency_ms == 2.5 / (500 - 5) * 1000
    assert plain.generated_tokens_per_step == 500 / 495 and plain.accepted_token_share is None


def test_a_llamacpp_windows_latency_is_its_generation_seconds_per_token() -> None:
    def payload(tokens: int, seconds: float, decodes: int, drafts: int, accepted: int) -> str:
        return (
            f"llamacpp:prompt_tokens_total 100\nllamacpp:tokens_predicted_total {tokens}\n"
            f"llamacpp:tokens_predicted_seconds_total {seconds}\n"
            f"llamacpp:n_decode_total {decodes}\n"
            f"llamacpp:spec_decode_num_drafts_total {drafts}\n"
            f"llamacpp:spec_decode_num_draft_tokens_total {drafts * 4}\n"
            f"llamacpp:spec_decode_num_accepted_tokens_total {accepted}\n"
        )

    result = build_result(
        URL,
        extract_spec_decode(payload(200, 4.0, 120, 50, 60)),
        extract_spec_decode(payload(1200, 14.0, 520, 350, 560)),
        seconds=12.5,
    )
    throughput = result.throughput
    assert result.engine == "llamacpp" and throughput is not None
    assert throughput.generated_tokens_per_second == 1000 / 12.5
    assert throughput.inter_token_latency_ms == 10.0 / 1000 * 1000  # its first token included
    assert throughput.generated_tokens_per_step == 1000 / 400
    assert throughput.accepted_token_share == 500 / 1000 * 100
    assert throughput.finished_requests is None  # llama.cpp counts no requests


def test_the_speedup_is_the_ratio_of_the_two_windows_figures() -> None:
    fast = build_result(
        URL,
        extract_spec_decode(vllm(0, 0, 0, 0.0, 0, 0, 0, drafts=0)),
        extract_spec_decode(vllm(3000, 100, 10, 3.0, 990, 10, 1000, drafts=1000, accepted=2000)),
        seconds=10.0,
    ).throughput
    slow = build_result(
        URL,
        extract_spec_decode(vllm(0, 0, 0, 0.0, 0, 0, 0)),
        extract_spec_decode(vllm(3000, 100, 10, 8.97, 2990, 10, 3000)),
        seconds=25.0,
    ).throughput
    ratios = speedup(fast, slow)
    assert ratios is not None and fast is not None and slow is not None
    assert ratios["generated_tokens_per_second"] == (3000 / 10) / (3000 / 25)
    assert ratios["inter_token_latency"] == (8.97 / 2990) / (3.0 / 2990)
    assert speedup(fast, None) is None
