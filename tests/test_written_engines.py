"""Engines read from payloads written from their own code (`tests/fixtures/written`): each is
recognised, and its window's figures equal the ones computed here from the counts."""

from pathlib import Path

from specdec_collector.core.counters import SCHEMAS
from specdec_collector.core.exposition import Series, SeriesKey, extract_spec_decode
from specdec_collector.core.figures import build_result
from specdec_collector.core.report import render_block
from specdec_collector.core.results import TargetResult
from specdec_collector.core.targets import EngineHints
from specdec_collector.store.tables import TABLES
from specdec_collector.windows.catalogue import family_of

WRITTEN = Path(__file__).parent / "fixtures" / "written"

# The counts the LMDeploy payloads hold, per DP rank: (drafts, draft tokens, accepted, per pos).
LMDEPLOY_BEFORE = {"0": (400, 1200, 700, [320, 230, 150]), "1": (380, 1140, 610, [300, 190, 120])}
LMDEPLOY_AFTER = {
    "0": (1000, 3000, 1840, [820, 610, 410]),
    "1": (1010, 3030, 1580, [770, 500, 310]),
}


def _read(name: str) -> Series:
    return extract_spec_decode((WRITTEN / name).read_text())


def test_an_lmdeploy_window_is_its_counters_increase_not_its_lifetime_gauges() -> None:
    result = build_result(
        "http://lmdeploy:23333/metrics",
        _read("lmdeploy_0.18_mtp_k3_before.txt"),
        _read("lmdeploy_0.18_mtp_k3_after.txt"),
    )
    drafts = sum(LMDEPLOY_AFTER[e][0] - LMDEPLOY_BEFORE[e][0] for e in LMDEPLOY_AFTER)
    draft_tokens = sum(LMDEPLOY_AFTER[e][1] - LMDEPLOY_BEFORE[e][1] for e in LMDEPLOY_AFTER)
    accepted = sum(LMDEPLOY_AFTER[e][2] - LMDEPLOY_BEFORE[e][2] for e in LMDEPLOY_AFTER)
    per_position = [
        sum(LMDEPLOY_AFTER[e][3][p] - LMDEPLOY_BEFORE[e][3][p] for e in LMDEPLOY_AFTER)
        for p in range(3)
    ]
    assert result.status == "ok" and result.engine == "lmdeploy" and result.exact is True
    assert result.data is not None
    assert result.data.num_drafts == drafts == 1230
    assert result.data.draft_tokens == draft_tokens == 3690
    assert result.data.accepted_tokens == accepted == 2110
    assert result.data.acceptance_rate == accepted / draft_tokens * 100
    assert result.data.acceptance_length == 1 + accepted / drafts
    assert result.data.per_position_acceptance_rates == {
        str(p): n / drafts for p, n in enumerate(per_position)
    }
    # The gauges are the lifetime ratios (engine 0: 1840 / 3000), shown as such, not the window's.
    assert result.lifetime is not None
    engine0 = next(
        r for r in result.lifetime if r.labels == {"engine": "0", "model_name": "Qwen3-8B"}
    )
    assert engine0.draft_acceptance_rate == 1840 / 3000
    assert engine0.acceptance_length == 1 + 1840 / 1000
    assert result.data.acceptance_rate != engine0.draft_acceptance_rate * 100


def test_every_stored_family_name_fits_its_column() -> None:
    """A series' stored family (`engine:role`) of every schema fits `endpoint_series.family`
    (PostgreSQL refuses a longer one: a 500 at the start)."""
    width = TABLES["endpoint_series"].c.family.type.length  # type: ignore[attr-defined]
    for schema in SCHEMAS:
        roles = [*schema.families.values(), *schema.gauges.values(), *schema.samples.values()]
        for role in {*roles, *schema.named_positions.values()}:
            assert len(family_of(SeriesKey(role, (), schema.engine))) <= width, (schema, role)


def _window(before: str, after: str, *samples: str, **hints: object) -> TargetResult:
    return build_result(
        "http://engine:8000/metrics",
        _read(before),
        _read(after),
        [_read(sample) for sample in samples],
        EngineHints(**hints),  # type: ignore[arg-type]
    )


def test_a_max_window_is_the_mean_of_its_batches_and_says_it_is_approximate() -> None:
    # The histograms' sums and counts in the payloads: length (count, sum), per position.
    length = (400 - 100, 1010.0 - 260.0)
    positions = [(400 - 100, 30000.0 - 7000.0), (300, 20000.0 - 5000.0), (300, 11000.0 - 3000.0)]
    result = _window("max_eagle_k3_before.txt", "max_eagle_k3_after.txt")
    assert (result.status, result.engine, result.exact) == ("ok", "max", False)
    assert result.data is not None
    assert result.data.acceptance_length == length[1] / length[0] == 2.5
    rates = {str(p): total / count / 100 for p, (count, total) in enumerate(positions)}
    assert result.data.per_position_acceptance_rates == rates
    assert result.data.acceptance_rate == sum(rates.values()) / 3 * 100
    # MAX counts no drafts or tokens: none is guessed.
    assert (result.data.num_drafts, result.data.draft_tokens, result.data.accepted_tokens) == (
        None,
        None,
        None,
    )
    assert result.notes is not None and "approximate" in result.notes[0]
    assert "every batch weighing the same" in result.notes[0]
    block = render_block("max:8000", result)
    assert "Accepted tokens                               N/A" in block
    assert "Engine                                        max (approximate: see notes)" in block


def test_fastdeploy_drafts_are_its_steps_emitted_minus_accepted() -> None:
    result = _window("fastdeploy_mtp_k2_before.txt", "fastdeploy_mtp_k2_after.txt")
    accepted, emitted, draft_tokens = 2100 - 600, 3800 - 1100, 3400 - 1000
    drafts = emitted - accepted
    assert (result.status, result.engine, result.exact) == ("ok", "fastdeploy", True)
    assert result.data is not None
    assert result.data.num_drafts == drafts == 1200
    assert result.data.draft_tokens == draft_tokens == drafts * 2  # MTP with 2 heads
    assert result.data.accepted_tokens == accepted
    assert result.data.acceptance_rate == accepted / draft_tokens * 100
    assert result.data.acceptance_length == 1 + accepted / drafts == emitted / drafts
    # Its per-head gauges are lifetime ratios: shown under `lifetime`, not as the window's.
    assert result.data.per_position_acceptance_rates is None
    assert result.lifetime is not None
    heads = {r.labels["position"]: r.position_acceptance_rate for r in result.lifetime if r.labels}
    assert heads == {"0": 0.75, "1": 0.55}
    assert result.raw.after is not None and result.raw.after.num_drafts == 3800 - 2100


def test_fastdeploy_ngram_needs_k_for_its_rate_and_then_calls_it_a_bound() -> None:
    accepted, drafts = 900 - 300, (2000 - 900) - (700 - 300)
    plain = _window("fastdeploy_ngram_before.txt", "fastdeploy_ngram_after.txt")
    assert plain.data is not None and plain.exact is True
    assert plain.data.num_drafts == drafts and plain.data.acceptance_length == 1 + accepted / drafts
    assert plain.data.draft_tokens is None and plain.data.acceptance_rate is None
    assert plain.notes is not None and any("only for MTP" in note for note in plain.notes)
    told = _window(
        "fastdeploy_ngram_before.txt", "fastdeploy_ngram_after.txt", draft_tokens_per_step=3
    )
    assert told.data is not None and told.exact is False
    assert told.data.acceptance_rate == accepted / (drafts * 3) * 100
    assert told.notes is not None and any("lower bound" in note for note in told.notes)


def test_tgi_accepted_tokens_per_step_come_from_its_histogram() -> None:
    # Steps by tokens accepted (the buckets' differences) at each end.
    before, after = [100, 50, 30, 20], [400, 200, 150, 100]
    window = [a - b for a, b in zip(after, before, strict=True)]
    steps = sum(window)
    accepted = sum(n * count for n, count in enumerate(window))
    result = _window("tgi_medusa_speculate3_before.txt", "tgi_medusa_speculate3_after.txt")
    assert (result.status, result.engine, result.exact) == ("ok", "tgi", False)
    assert result.data is not None
    assert result.data.num_drafts == steps == 650
    assert result.data.accepted_tokens == accepted == 630
    assert result.data.draft_tokens == steps * 3  # speculate: the largest bucket
    assert result.data.acceptance_rate == accepted / (steps * 3) * 100
    assert result.data.acceptance_length == 1 + accepted / steps
    reached = {i: sum(window[i + 1 :]) for i in range(3)}  # steps that accepted more than i
    assert result.data.per_position_acceptance_rates == {
        str(i): reached[i] / steps for i in range(3)
    }
    assert result.accepted_distribution == {str(n): c for n, c in enumerate(window)}
    assert result.notes is not None and "first token too" in result.notes[0]


def test_an_older_tgi_summary_gives_the_length_and_needs_speculate_for_the_rate() -> None:
    steps, accepted = 850 - 200, 800 - 170
    plain = _window("tgi_summary_before.txt", "tgi_summary_after.txt")
    assert plain.data is not None and plain.engine == "tgi"
    assert plain.data.acceptance_length == 1 + accepted / steps
    assert plain.data.acceptance_rate is None and plain.data.per_position_acceptance_rates is None
    told = _window("tgi_summary_before.txt", "tgi_summary_after.txt", draft_tokens_per_step=2)
    assert told.data is not None and told.data.acceptance_rate == accepted / (steps * 2) * 100


def test_dspark_drafts_by_length_give_each_drafted_positions_rate_and_are_not_drafts() -> None:
    by_length = {1: 100, 2: 100, 3: 100, 4: 200}  # the window's drafts of each length
    per_position = [350, 220, 150, 80]
    drafts = sum(by_length.values())
    result = _window("dspark_vllm_k4_before.txt", "dspark_vllm_k4_after.txt")
    assert result.status == "ok" and result.engine == "vllm" and result.exact is True
    assert result.data is not None
    # A substring parser (AISBench's) adds the by-length family to drafts: 1000 here.
    assert result.data.num_drafts == drafts == 500
    assert result.data.draft_tokens == sum(n * length for length, n in by_length.items())
    assert result.data.per_position_acceptance_rates == {
        str(i): n / drafts for i, n in enumerate(per_position)
    }
    assert result.per_drafted_position_acceptance_rates == {
        str(i): n / sum(c for length, c in by_length.items() if length > i)
        for i, n in enumerate(per_position)
    }
    assert result.notes is not None and any("DSpark" in note for note in result.notes)


def test_sglang_0_5_23_draft_tokens_come_from_its_active_draft_size() -> None:
    calls, generated, requests = 2000 - 1000, 6300 - 3100, 100 - 50
    accepted = generated - requests - calls
    steady = _window("sglang_0.5.23_before.txt", "sglang_0.5.23_after.txt")
    assert steady.data is not None and steady.engine == "sglang"
    assert steady.data.draft_tokens == calls * (4 - 1)  # spec_num_draft_tokens 4: 3 drafted
    assert steady.data.acceptance_rate == accepted / (calls * 3) * 100
    assert steady.data.acceptance_length == (generated - requests) / calls
    assert steady.notes is not None and not any("changed inside" in n for n in steady.notes)
    # AutoSpec raised it to 6 by the end: each interval counted with its own end's value.
    varied = _window(
        "sglang_0.5.23_before.txt", "sglang_0.5.23_autospec_after.txt", "sglang_0.5.23_sample.txt"
    )
    assert varied.data is not None
    assert varied.data.draft_tokens == (1600 - 1000) * 3 + (2000 - 1600) * 5
    assert varied.notes is not None and any("from 4 to 6" in n for n in varied.notes)


def test_an_sglang_without_verify_calls_says_which_build_it_needs() -> None:
    old = _read("sglang_before_verify_calls.txt")
    result = build_result("http://sglang:30000/metrics", old, old)
    assert result.status == "na" and result.error is not None
    assert "PR #25689" in result.error and "sglang:spec_accept_length" in result.error
    # A newer SGLang shows its verify calls only after the first speculative request: a
    # window that starts before it counts them from 0 (its tokens and requests from their
    # values at the start: 3000 more tokens, 10 more requests).
    later = (WRITTEN / "sglang_0.5.23_before.txt").read_text()
    later = later.replace(
        'generation_tokens_total{model_name="Qwen3-8B"} 3100.0',
        'generation_tokens_total{model_name="Qwen3-8B"} 6100.0',
    )
    later = later.replace(
        'num_requests_total{model_name="Qwen3-8B"} 50.0',
        'num_requests_total{model_name="Qwen3-8B"} 60.0',
    )
    first = build_result("http://sglang:30000/metrics", old, extract_spec_decode(later))
    assert first.status == "ok" and first.data is not None and first.data.num_drafts == 1000
    assert first.data.accepted_tokens == 3000 - 10 - 1000


def test_a_diffusion_llm_gives_committed_tokens_per_denoising_step() -> None:
    steps, canvas, committed = 400 - 100, 12800 - 3200, 3500 - 800
    result = _window("vllm_diffusion_before.txt", "vllm_diffusion_after.txt")
    assert result.engine == "vllm-diffusion" and result.status == "na"
    assert result.error is not None and "9.00 tokens per denoising step" in result.error
    assert result.diffusion is not None
    assert result.diffusion.tokens_per_step == committed / steps
    assert result.diffusion.committed_share == committed / canvas * 100
    assert result.as_json()["diffusion"]["denoising_steps"] == steps


def test_uniserve_speaks_vllms_names_under_its_own_prefix() -> None:
    result = _window("uniserve_k2_before.txt", "uniserve_k2_after.txt")
    drafts, accepted = 600, (480 + 250) - (60 + 30)
    assert (result.status, result.engine) == ("ok", "uniserve")
    assert result.data is not None and result.data.acceptance_length == 1 + accepted / drafts
    assert result.data.per_position_acceptance_rates == {"0": 420 / drafts, "1": 220 / drafts}


def test_vllms_names_without_vllms_own_counters_are_called_vllm_compatible() -> None:
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0"} 10\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 30\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 12\n'
    )
    later = text.replace("} 10", "} 20").replace("} 30", "} 60").replace("} 12", "} 25")
    result = build_result(
        "http://h:1/metrics", extract_spec_decode(text), extract_spec_decode(later)
    )
    assert result.engine == "vllm" and result.notes is not None
    assert any(note.startswith("vLLM-compatible") for note in result.notes)
    real = _window("dspark_vllm_k4_before.txt", "dspark_vllm_k4_after.txt")
    assert real.notes is not None and not any("compatible" in note for note in real.notes)


def test_an_unknown_engines_spec_like_families_are_named() -> None:
    payload = _read("unknown_engine.txt")
    result = build_result("http://h:1/metrics", payload, payload)
    assert result.status == "na" and result.engine == "unrecognised"
    assert result.error is not None
    assert "foo_draft_tokens, foo_speculative_accepted_tokens" in result.error
    assert "foo_requests" not in result.error
