"""The notes and reasons a result carries, each in one sentence: why a figure is not exact,
why a window is `na` and what to do about it. Every text a result says is here, so that it
can be read, and reworded, in one place."""

V0_REASON = (
    "vLLM V0 (the legacy engine) adds running totals to its spec-decode counters every few "
    "seconds, so their change over a window is not the window's tokens: no window can be "
    "measured (its lifetime ratios are under `lifetime`). Serve with vLLM's V1 engine "
    "(0.8.5 or later) to measure windows."
)
EARLY_V1_NOTE = (
    "early vLLM V1 (before 0.8.5) has no drafts counter: acceptance length and per-position "
    "rates cannot be derived"
)
LLAMACPP_COMPLETION_NOTE = (
    "llama.cpp counts a request when it completes: one running across an end of the window "
    "counts where it finishes"
)
MINDIE_REASON = (
    "MindIE Service documents no spec-decode counters on its metrics endpoint: no window can be "
    "measured. Measure on the client side (AISBench's own records) until it exports them."
)
DRAFTING_OFF = (
    ": the server generated {tokens} tokens in the window and drafted none (speculative "
    "decoding is off); {how}"
)
VARIABLE_DRAFT_LENGTH = (
    "drafts of variable length: {mean} draft tokens a draft on average, {positions} positions "
    "counted; a position's rate is over every draft, those too short to reach it included "
    "(accepted at N / drafts), so the rates fall faster than the acceptance of long drafts"
)
RESTARTED = (
    "the engine restarted inside the window ({n}x) and no sample was taken in between: what it "
    "counted before the restart is lost, the figures count from the restart on; sample the "
    "window (sample_interval_s) to keep it"
)
RESTARTED_SAMPLED = (
    "the engine restarted inside the window ({n}x): what it counted between the last sample "
    "before a restart and the restart is lost (a shorter sample_interval_s loses less)"
)
UNSEEN_RESTART = (
    "{engine} shows no start time (_created) for its counters and no sample was taken: a "
    "restart inside the window that left every counter higher at the end than at the start "
    "cannot be seen; sample the window (sample_interval_s) to see restarts"
)
MORE_ACCEPTED_AT = (
    "Inconsistent counters: more tokens accepted at position {position} ({accepted}) than "
    "drafts ({drafts}) in the window"
)
BEYOND_EXACT = (
    "a count of the window passed 2^53 ({count}): floats hold it to within a few units, so "
    "the figures are not exact"
)
NO_DISTRIBUTION = (
    "the distribution of accepted tokens per draft needs drafts of one length: not given"
)
DSPARK_NOTE = (
    "drafts counted by length (DSpark): per_drafted_position_acceptance_rates is each "
    "position's rate over the drafts that reached it, exact"
)
VLLM_COMPATIBLE_NOTE = (
    "vLLM-compatible: the payload has vLLM's spec-decode names but none of vLLM's own token "
    "counters (vllm:generation_tokens), as servers that speak vLLM's names do (pegainfer, "
    "tokenspeed); the figures take the counters in vLLM's meaning"
)
#: What each verification mode a start body names does to the acceptance (vLLM's
#: `rejection_sample_method`; the counters cannot tell them apart).
VERIFICATION_NOTES = {
    "standard": None,
    "block": "block verification (as the start body says) accepts at least as many draft tokens "
    "as standard verification of the same drafts: compare it with windows of block "
    "verification only",
    "fly": "fly verification (as the start body says) is lossy: it accepts drafts the target "
    "model would not have sampled, so its acceptance is not comparable with a lossless one's",
    "synthetic": "synthetic verification (as the start body says) accepts at the configured "
    "synthetic_acceptance_rates whatever the drafts: the figures measure the test stand, "
    "not a drafter",
}
MIXED_NOTE = "the engines' figures do not mean the same: these are {first}'s; see `engines`"
SUM_NOTE = "the sum over the engines {names}; each one's figures are under `engines`"
TRTLLM_NOTE = (
    "TensorRT-LLM: the acceptance rate is exact (iteration counters); drafts, the acceptance "
    "length and per-position rates count finished requests only"
)
SGLANG_NOTES = [
    "SGLang counts a request when it completes: one running across an end of the window "
    "counts where it finishes",
    "accepted tokens are derived as generated tokens - requests - verify calls (each finished "
    "request gave 1 + the sum over its verify calls of accepted + 1 tokens)",
    "draft tokens and the acceptance rate need the server's draft tokens per step, which its "
    "metrics do not give",
]
INCONSISTENT = "Inconsistent counters: fewer generated tokens than requests and verify calls"
MORE_ACCEPTED = (
    "Inconsistent counters: more tokens accepted ({accepted}) than drafted ({drafted}) in the "
    "window"
)
MAX_NOTES = [
    "Modular MAX exports per-batch histograms only: the acceptance length is the mean of its "
    "batches' mean lengths and each position's rate the mean of its batches' rates "
    "(change of the sum / change of the count), every batch weighing the same whatever its "
    "tokens: approximate",
    "the acceptance rate is the mean of the positions' rates; MAX counts no drafts or tokens",
]
FASTDEPLOY_NOTE = (
    "FastDeploy counts no drafts: they are its decoding steps, derived exactly as emitted - "
    "accepted tokens (each step emits its accepted tokens and one more); its per-head rates "
    "are lifetime gauges (under `lifetime`), so per-position rates are not given"
)
FASTDEPLOY_NGRAM_NOTE = (
    "FastDeploy counts draft tokens only for MTP: the acceptance rate needs the draft tokens "
    "per step (draft_tokens_per_step)"
)
FASTDEPLOY_CONFIGURED = (
    "draft tokens from the configured {k} per step (draft_tokens_per_step); n-gram drafts can "
    "be shorter, so the acceptance rate is a lower bound"
)
TGI_NOTES = [
    "TGI counts tokens per generation step (its tgi_request_skipped_tokens histogram): the "
    "accepted tokens are exact, but every step is a draft here, the one that gives a request "
    "its first token too, so the acceptance length and per-position rates are low by about "
    "one step per request",
]
TGI_SPECULATE = "draft tokens are steps x speculate = {k} ({source})"
TGI_NO_SPECULATE = (
    "draft tokens and the acceptance rate need TGI's speculate: its histogram has no buckets "
    "(an older TGI) and the start body gave no draft_tokens_per_step"
)
TGI_NO_BUCKETS = "per-position rates need the histogram's buckets, which this TGI does not write"
SGLANG_ACTIVE = (
    "draft tokens from sglang:spec_num_draft_tokens - 1 per verify call (the root of each "
    "verified block is not a draft)"
)
SGLANG_ACTIVE_VARIED = (
    "the server's draft tokens per verify call changed inside the window (AutoSpec: "
    "sglang:spec_num_draft_tokens went from {low} to {high}): each interval's calls counted "
    "with the value at its end, so the draft tokens are approximate; sample the window "
    "(sample_interval_s) to follow it closer"
)
DIFFUSION_REASON = (
    "a diffusion LLM (vLLM's diffusion_* counters): it drafts nothing, so there is no "
    "acceptance; it committed {tokens} tokens per denoising step in the window (under "
    "`diffusion`)"
)
DIFFUSION_IDLE = (
    "a diffusion LLM (vLLM's diffusion_* counters) that ran no denoising step in the window"
)
UNRECOGNISED_REASON = (
    "No spec decode metrics the collector reads: the server shows families that look like "
    "speculative decoding ({names}), of an engine it does not know; see docs/engines.md for "
    "the engines it reads"
)
OLD_SGLANG_REASON = (
    "SGLang before May 2026 (PR #25689) shows spec decoding only as interval gauges ({names}), "
    "which cannot give a window: serve with an SGLang that has sglang:spec_verify_calls_total "
    "(it appears after the first speculative request)"
)
