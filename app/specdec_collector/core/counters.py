"""Which counters of which engine the arithmetic reads: one schema row per engine.

A schema names the sample families of one engine's `/metrics` that hold each role (drafts,
draft tokens, accepted tokens, accepted tokens per position, ...), the label that holds the
position and the prefix every one of its families starts with (the extraction looks only at
the lines of the sample names they give, `SAMPLE_NAMES`). Extraction keys each series by its
engine, role and labels; the arithmetic (`core.arithmetic`) works per engine on roles. What
each engine exposes, and where that is written down, is in docs/engines.md.
"""

from dataclasses import dataclass, field
from enum import StrEnum


class ServingEngine(StrEnum):
    """A serving engine whose spec-decode metrics the collector reads; the `engine` of results."""

    VLLM = "vllm"  # vLLM V1 and vllm-ascend (early V1 too: told apart by its counters)
    VLLM_V0 = "vllm-v0"  # vLLM's legacy engine: same family names, other meaning
    LLAMACPP = "llamacpp"
    TRTLLM = "trtllm"
    SGLANG = "sglang"
    LMDEPLOY = "lmdeploy"
    MAX = "max"  # Modular MAX Serve: batch histograms only
    FASTDEPLOY = "fastdeploy"
    TGI = "tgi"  # Hugging Face text-generation-inference: a histogram of accepted tokens
    UNISERVE = "uniserve"  # vLLM's names under `uniserve:`
    VLLM_DIFFUSION = "vllm-diffusion"  # vLLM serving a diffusion LLM: no drafts, commits
    # A payload whose families look like spec decoding but no schema reads: its names are
    # kept (role `SPEC_LIKE`, label `family`) so its result can say what it found.
    UNRECOGNISED = "unrecognised"


class Role(StrEnum):
    """What a series counts (or, for gauges, shows). The values are stored with each series."""

    DRAFTS = "num_drafts"
    DRAFT_TOKENS = "num_draft_tokens"
    ACCEPTED = "num_accepted_tokens"
    ACCEPTED_PER_POSITION = "accepted_per_pos"
    # TensorRT-LLM: drafted tokens at each position, of finished requests (position 0: drafts).
    DRAFTED_PER_POSITION = "drafted_per_pos"
    # SGLang: verify calls (one per draft).
    VERIFY_CALLS = "verify_calls"
    # Witnesses (`WITNESSES`): counters that exist without speculative decoding, read beside a
    # schema's spec-decode families, and alone on a server without them. A restart that none
    # of those shows (llama.cpp has no `_created`) shows in them where they fell; they give
    # the window's throughput and latency (`core.throughput`), drafting or not.
    GENERATION_TOKENS = "generation_tokens"  # output tokens, the first of each request too
    PROMPT_TOKENS = "prompt_tokens"
    REQUESTS = "num_requests"  # finished requests (SGLang: its spec arithmetic reads them too)
    # Forward passes of the target model over the whole batch: vLLM's engine steps (the count
    # of its iteration-tokens histogram), llama.cpp's `llama_decode` calls.
    DECODE_CALLS = "decode_calls"
    # Seconds requests spent decoding, summed over requests: vLLM's inter-token latencies
    # (after each request's first token), llama.cpp's generation time.
    DECODE_SECONDS = "decode_seconds"
    FIRST_TOKENS = "first_tokens"  # vLLM: requests' first tokens (its time-to-first-token count)
    # vLLM V0 only: tells its counters from V1's, which have the same names.
    EMITTED = "num_emitted_tokens"
    # vLLM V0's lifetime ratios: gauges, shown as such, never counted.
    LIFETIME_ACCEPTANCE_RATE = "lifetime_acceptance_rate"
    LIFETIME_EFFICIENCY = "lifetime_efficiency"
    # LMDeploy's lifetime ratios beside its counters: gauges too, never a window's figures.
    LIFETIME_ACCEPTANCE_LENGTH = "lifetime_acceptance_length"
    LIFETIME_POSITION_RATE = "lifetime_position_rate"
    # The DSpark fork of vLLM: drafts counted by their length (label `draft_length`).
    DRAFTS_BY_LENGTH = "drafts_by_length"
    # Modular MAX: histograms of per-batch figures, read as their sums and counts.
    BATCH_LENGTH_SUM = "batch_length_sum"
    BATCH_LENGTH_COUNT = "batch_length_count"
    BATCH_RATE_SUM = "batch_rate_sum"  # per position, in percent
    BATCH_RATE_COUNT = "batch_rate_count"
    # TGI: a histogram of the tokens each decoding step gave beyond the first (the accepted
    # draft tokens): its count (steps), its sum, and its buckets (label `le`).
    STEPS = "steps"
    SKIPPED_TOKENS = "skipped_tokens"
    STEPS_AT_MOST = "steps_at_most"
    # SGLang >= 0.5.23: the draft tokens per step it is running with now (a gauge).
    ACTIVE_DRAFT_TOKENS = "active_draft_tokens"
    # vLLM's diffusion LLMs, in place of the spec-decode families.
    DENOISING_STEPS = "denoising_steps"
    CANVAS_POSITIONS = "canvas_positions"
    COMMITTED_TOKENS = "committed_tokens"
    # The name of a family no schema reads that looks like spec decoding (see
    # `ServingEngine.UNRECOGNISED`): never counted.
    SPEC_LIKE = "spec_like"


#: Roles that are gauges: read from the family name itself, never treated as counters.
GAUGES: frozenset[Role] = frozenset(
    {
        Role.LIFETIME_ACCEPTANCE_RATE,
        Role.LIFETIME_EFFICIENCY,
        Role.LIFETIME_ACCEPTANCE_LENGTH,
        Role.LIFETIME_POSITION_RATE,
        Role.ACTIVE_DRAFT_TOKENS,
        Role.SPEC_LIKE,
    }
)

#: Roles of the witnesses (see `Role`): a payload of only these has no spec-decode series.
WITNESSES: frozenset[Role] = frozenset(
    {
        Role.GENERATION_TOKENS,
        Role.PROMPT_TOKENS,
        Role.REQUESTS,
        Role.DECODE_CALLS,
        Role.DECODE_SECONDS,
        Role.FIRST_TOKENS,
    }
)

#: Gauge roles that are an engine's lifetime ratios: shown under a result's `lifetime`.
LIFETIME: frozenset[Role] = GAUGES - {Role.ACTIVE_DRAFT_TOKENS, Role.SPEC_LIKE}


@dataclass(frozen=True, slots=True)
class CounterSchema:
    """The spec-decode families of one engine."""

    engine: ServingEngine
    prefix: str
    # Family name, without the `_total` / `_created` suffix -> the role of its samples.
    families: dict[str, Role]
    # The label whose value is the position, on the per-position families.
    position_label: str
    # Gauge family name (the sample name itself) -> its role.
    gauges: dict[str, Role] = field(default_factory=dict)
    # Samples read by their whole name as counters: the `_sum`, `_count` and `_bucket` parts
    # of a histogram (its `_created`, where there is one, is that of its `_count`).
    samples: dict[str, Role] = field(default_factory=dict)
    # Labels other than `position_label` that index a family's series (a bucket's `le`, a
    # draft length): like a position, never part of which engine instance a series is.
    index_labels: frozenset[str] = frozenset()
    # Gauges with the position in their name (FastDeploy's `..._rate_0`, `..._rate_1`):
    # name without the position -> role; read for positions 0 to `MAX_NAMED_POSITIONS` - 1.
    named_positions: dict[str, Role] = field(default_factory=dict)
    # Families and samples read only on a server that shows another family of the schema
    # (the witnesses: they exist without speculative decoding) or, on a payload without
    # spec-decode series, one whose engine shows generated tokens. Their names may lie outside
    # `prefix`.
    companions: frozenset[str] = frozenset()
    # The function of `core.engine_figures` that computes the engine's result from its
    # increases over a window (`counted_result`: vLLM's four counters, in vLLM's meaning).
    result: str = "counted_result"
    # The function of `core.trust` that gives the 95 % intervals of its figures over a
    # sampled window (`counted_intervals`: AISBench's ratios of its counters); None where its
    # figures are not ratios of two sums over the intervals.
    intervals: str | None = "counted_intervals"
    # What to tell a server that generated tokens but drafted none.
    turn_on: str = "turn speculative decoding on"
    # Whether its spec-decode series appear only once first used: a server that had none at
    # the start counts from 0, as a series absent earlier does.
    appears_late: bool = False
    # Whether its counters mean what vLLM's do (drafts, draft tokens, accepted, per
    # position), so that its figures may be summed with another such engine's.
    summable: bool = False

    def __post_init__(self) -> None:
        names = [*self.families, *self.gauges, *self.samples, *self.named_positions]
        stray = [
            name
            for name in names
            if not name.startswith(self.prefix) and name not in self.companions
        ]
        if stray:
            raise ValueError(f"{self.engine}: families outside prefix {self.prefix!r}: {stray}")
        named = self.families.keys() | self.gauges.keys() | self.samples.keys()
        if not self.companions <= named:
            unnamed = sorted(self.companions - named)
            raise ValueError(f"{self.engine}: companions that are not its families: {unnamed}")


def _under(prefix: str, families: dict[str, Role]) -> dict[str, Role]:
    """`families` named relative to `prefix`, by their full names."""
    return {prefix + name: role for name, role in families.items()}


#: The spec-decode families vLLM named, which llama.cpp took over under its own prefix.
_VLLM_NAMES = {
    "num_drafts": Role.DRAFTS,
    "num_draft_tokens": Role.DRAFT_TOKENS,
    "num_accepted_tokens": Role.ACCEPTED,
    "num_accepted_tokens_per_pos": Role.ACCEPTED_PER_POSITION,
}
# Witnesses: counters every such server has, drafting or not (see `Role`).
_VLLM_WITNESSES = {
    "vllm:generation_tokens": Role.GENERATION_TOKENS,
    "vllm:prompt_tokens": Role.PROMPT_TOKENS,
}
# vLLM's histograms (`vllm/v1/metrics/loggers.py`): one end-to-end latency per finished
# request (one series, where `request_success` has one per finish reason), one inter-token
# latency per request and step that gave it tokens (several with spec decoding), one first
# token per request, the tokens of each engine step. vLLMs before
# `inter_token_latency_seconds` give no latency.
_VLLM_WITNESS_SAMPLES = {
    "vllm:e2e_request_latency_seconds_count": Role.REQUESTS,
    "vllm:inter_token_latency_seconds_sum": Role.DECODE_SECONDS,
    "vllm:time_to_first_token_seconds_count": Role.FIRST_TOKENS,
    "vllm:iteration_tokens_total_count": Role.DECODE_CALLS,
}
# llama.cpp's own counters (`tools/server/server-task.cpp`, `to_metrics`), at request completion.
_LLAMACPP_WITNESSES = {
    "llamacpp:tokens_predicted": Role.GENERATION_TOKENS,
    "llamacpp:tokens_predicted_seconds": Role.DECODE_SECONDS,
    "llamacpp:prompt_tokens": Role.PROMPT_TOKENS,
    "llamacpp:n_decode": Role.DECODE_CALLS,
}

VLLM_V1 = CounterSchema(
    engine=ServingEngine.VLLM,
    prefix="vllm:spec_decode_",
    families={
        **_under(
            "vllm:spec_decode_",
            {
                **_VLLM_NAMES,
                "num_emitted_tokens": Role.EMITTED,
                # The DSpark fork (its exact name: a substring parser adds it to drafts).
                "num_drafts_by_draft_length": Role.DRAFTS_BY_LENGTH,
            },
        ),
        **_VLLM_WITNESSES,
    },
    position_label="position",
    index_labels=frozenset({"draft_length"}),  # DSpark's
    samples=_VLLM_WITNESS_SAMPLES,
    companions=frozenset({**_VLLM_WITNESSES, **_VLLM_WITNESS_SAMPLES}),
    gauges={
        "vllm:spec_decode_draft_acceptance_rate": Role.LIFETIME_ACCEPTANCE_RATE,
        "vllm:spec_decode_efficiency": Role.LIFETIME_EFFICIENCY,
    },
    result="vllm_result",
    turn_on="start vLLM with --speculative-config",
    summable=True,
)

LLAMACPP = CounterSchema(
    engine=ServingEngine.LLAMACPP,
    prefix="llamacpp:spec_decode_",
    families={**_under("llamacpp:spec_decode_", _VLLM_NAMES), **_LLAMACPP_WITNESSES},
    position_label="position",
    companions=frozenset(_LLAMACPP_WITNESSES),
    result="llamacpp_result",
    turn_on="start llama-server with a draft model (-md) or --spec-type (ngram-simple, for one)",
    summable=True,
)

TRTLLM = CounterSchema(
    engine=ServingEngine.TRTLLM,
    prefix="trtllm_spec_decode_",
    families=_under(
        "trtllm_spec_decode_",
        {
            "drafted_tokens": Role.DRAFTED_PER_POSITION,
            "num_draft_tokens": Role.DRAFT_TOKENS,
            "num_accepted_tokens": Role.ACCEPTED,
            "accepted_tokens": Role.ACCEPTED_PER_POSITION,
        },
    ),
    position_label="token_position",
    result="trtllm_result",
    intervals=None,  # its figures mix iteration and request counts
    appears_late=True,  # after its first speculative iteration
)

SGLANG = CounterSchema(
    engine=ServingEngine.SGLANG,
    prefix="sglang:",
    families={
        "sglang:spec_verify_calls": Role.VERIFY_CALLS,
        "sglang:generation_tokens": Role.GENERATION_TOKENS,
        "sglang:num_requests": Role.REQUESTS,
    },
    position_label="position",
    # SGLang 0.5.23: the draft tokens a verify call checks now (AutoSpec changes it).
    gauges={"sglang:spec_num_draft_tokens": Role.ACTIVE_DRAFT_TOKENS},
    companions=frozenset(
        {"sglang:generation_tokens", "sglang:num_requests", "sglang:spec_num_draft_tokens"}
    ),
    result="sglang_result",
    intervals="sglang_intervals",
    appears_late=True,  # spec_verify_calls, after the first speculative request
)

# LMDeploy >= 0.18 (`lmdeploy/metrics/loggers.py`, `PrometheusStatLogger`): vLLM's four
# counters under its own prefix, labels `model_name` and `engine` (the DP rank); the
# per-position series appear at a position's first observation. Its gauges are lifetime ratios.
_LMDEPLOY_WITNESSES = {
    "lmdeploy:generation_tokens": Role.GENERATION_TOKENS,
    "lmdeploy:prompt_tokens": Role.PROMPT_TOKENS,
}
LMDEPLOY = CounterSchema(
    engine=ServingEngine.LMDEPLOY,
    prefix="lmdeploy:spec_decode_",
    families={**_under("lmdeploy:spec_decode_", _VLLM_NAMES), **_LMDEPLOY_WITNESSES},
    position_label="position",
    companions=frozenset(_LMDEPLOY_WITNESSES),
    gauges={
        "lmdeploy:spec_decode_mean_accept_rate": Role.LIFETIME_ACCEPTANCE_RATE,
        "lmdeploy:spec_decode_mean_accept_length": Role.LIFETIME_ACCEPTANCE_LENGTH,
        "lmdeploy:spec_decode_per_position_accept_rate": Role.LIFETIME_POSITION_RATE,
    },
    turn_on="start LMDeploy with --speculative-algorithm",
)

# Modular MAX Serve (`max/python/max/serve/telemetry/metrics.py`, OpenTelemetry histograms
# exported to Prometheus): a batch's mean acceptance length, and each position's acceptance
# rate in percent, one observation per batch. The per-position histogram has unit `percent`,
# which the exporter may append to its name: both spellings are read.
_MAX_RATE = "maxserve_spec_decode_acceptance_rate_per_position"
MAX = CounterSchema(
    engine=ServingEngine.MAX,
    prefix="maxserve_spec_decode_",
    families={},
    position_label="position",
    samples={
        "maxserve_spec_decode_avg_acceptance_length_sum": Role.BATCH_LENGTH_SUM,
        "maxserve_spec_decode_avg_acceptance_length_count": Role.BATCH_LENGTH_COUNT,
        f"{_MAX_RATE}_sum": Role.BATCH_RATE_SUM,
        f"{_MAX_RATE}_count": Role.BATCH_RATE_COUNT,
        f"{_MAX_RATE}_percent_sum": Role.BATCH_RATE_SUM,
        f"{_MAX_RATE}_percent_count": Role.BATCH_RATE_COUNT,
    },
    result="max_result",
    intervals="max_intervals",
    appears_late=True,  # a histogram, at its first observation
)

# FastDeploy (`fastdeploy/metrics/metrics.py`, `_init_speculative_metrics`; counted in
# `fastdeploy/output/token_processor.py`, `_record_speculative_decoding_mertics`): for every
# step of a request, `accept_num` tokens emitted, of which `accept_num - 1` accepted drafts;
# with MTP, `num_speculative_tokens` draft tokens a step. Its gauges are lifetime ratios.
FASTDEPLOY = CounterSchema(
    engine=ServingEngine.FASTDEPLOY,
    prefix="fastdeploy:",
    families={
        "fastdeploy:spec_decode_num_accepted_tokens": Role.ACCEPTED,
        "fastdeploy:spec_decode_num_emitted_tokens": Role.EMITTED,
        "fastdeploy:spec_decode_num_draft_tokens": Role.DRAFT_TOKENS,
        "fastdeploy:generation_tokens": Role.GENERATION_TOKENS,
    },
    position_label="position",
    companions=frozenset({"fastdeploy:generation_tokens"}),
    gauges={
        "fastdeploy:spec_decode_draft_acceptance_rate": Role.LIFETIME_ACCEPTANCE_RATE,
        "fastdeploy:spec_decode_efficiency": Role.LIFETIME_EFFICIENCY,
    },
    named_positions={
        "fastdeploy:spec_decode_draft_single_head_acceptance_rate": Role.LIFETIME_POSITION_RATE,
    },
    result="fastdeploy_result",
    appears_late=True,  # its spec-decode metrics, made at the first step counted
)

# TGI (`router/src/infer/mod.rs`, `send_responses`: one observation per generation of a
# request, the tokens it gave beyond the first; buckets 0..speculate set in
# `router/src/server.rs`). The exporter writes a summary where no buckets are set: its
# `_sum` and `_count` are read alike.
TGI = CounterSchema(
    engine=ServingEngine.TGI,
    prefix="tgi_request_skipped_tokens",
    families={},
    position_label="le",
    samples={
        "tgi_request_skipped_tokens_count": Role.STEPS,
        "tgi_request_skipped_tokens_sum": Role.SKIPPED_TOKENS,
        "tgi_request_skipped_tokens_bucket": Role.STEPS_AT_MOST,
    },
    result="tgi_result",
    appears_late=True,
)

# Engines that write vLLM's names under a prefix of their own (`uniserve:`, a Rust server).
UNISERVE = CounterSchema(
    engine=ServingEngine.UNISERVE,
    prefix="uniserve:spec_decode_",
    families=_under("uniserve:spec_decode_", _VLLM_NAMES),
    position_label="position",
    summable=True,
)

# vLLM serving a diffusion LLM (`vllm/v1/spec_decode/metrics.py`, `is_diffusion`): the same
# counters' places hold denoising steps, canvas positions evaluated and tokens committed.
VLLM_DIFFUSION = CounterSchema(
    engine=ServingEngine.VLLM_DIFFUSION,
    prefix="vllm:diffusion_",
    families=_under(
        "vllm:diffusion_",
        {
            "num_denoising_steps": Role.DENOISING_STEPS,
            "num_canvas_positions": Role.CANVAS_POSITIONS,
            "num_committed_tokens": Role.COMMITTED_TOKENS,
        },
    ),
    position_label="position",
    result="diffusion_result",
    intervals=None,
)

#: Every engine the extraction reads.
SCHEMAS: tuple[CounterSchema, ...] = (
    VLLM_V1, LLAMACPP, TRTLLM, SGLANG, LMDEPLOY, MAX, FASTDEPLOY, TGI, UNISERVE, VLLM_DIFFUSION,
)  # fmt: skip

#: Each engine's schema; vLLM's V0 is read by V1's (`core.engine_figures.vllm_result` tells
#: them apart), a payload no schema reads has none.
SCHEMA_OF: dict[ServingEngine, CounterSchema] = {schema.engine: schema for schema in SCHEMAS}

#: The most positions read from gauges that carry theirs in their name.
MAX_NAMED_POSITIONS = 16


def escaped(name: str) -> str:
    """A family name as prometheus_client 0.23 and later writes its *samples* in OpenMetrics by
    default (`escaping=underscores`: every `:` becomes `_`, while `# TYPE` keeps the colon;
    prometheus/client_python#1177), and as a Prometheus 2 that scraped such a server stores it.
    SGLang and LMDeploy serve through it; each name is read in both spellings."""
    return name.replace(":", "_")


def spellings(name: str) -> tuple[str, ...]:
    """`name`, and its escaped spelling when that differs."""
    other = escaped(name)
    return (name,) if other == name else (name, other)


#: Counter family name (in both spellings) -> (engine, role), over every schema.
ROLE_OF_FAMILY: dict[str, tuple[ServingEngine, Role]] = {
    spelling: (schema.engine, role)
    for schema in SCHEMAS
    for family, role in schema.families.items()
    for spelling in spellings(family)
}

#: Gauge family name (in both spellings) -> (engine, role), over every schema; gauges with
#: their position in the name once per position.
ROLE_OF_GAUGE: dict[str, tuple[ServingEngine, Role]] = {
    spelling: (schema.engine, role)
    for schema in SCHEMAS
    for family, role in [
        *schema.gauges.items(),
        *(
            (f"{name}_{position}", role)
            for name, role in schema.named_positions.items()
            for position in range(MAX_NAMED_POSITIONS)
        ),
    ]
    for spelling in spellings(family)
}

#: Gauge sample name (both spellings) -> the position its name holds.
POSITION_IN_NAME: dict[str, str] = {
    spelling: str(position)
    for schema in SCHEMAS
    for name in schema.named_positions
    for position in range(MAX_NAMED_POSITIONS)
    for spelling in spellings(f"{name}_{position}")
}

#: Sample names read whole as counters (histogram parts, both spellings) -> (engine, role).
ROLE_OF_SAMPLE: dict[str, tuple[ServingEngine, Role]] = {
    spelling: (schema.engine, role)
    for schema in SCHEMAS
    for name, role in schema.samples.items()
    for spelling in spellings(name)
}

#: The labels that hold a position or another index, over every schema.
POSITION_LABELS: frozenset[str] = frozenset(
    label for schema in SCHEMAS for label in (schema.position_label, *schema.index_labels)
)


def role_of_sample(name: str) -> tuple[tuple[ServingEngine, Role] | None, bool]:
    """The (engine, role) of a sample name, None for one no schema reads, and whether it is
    a `_created` sample: a counter's `_total` and `_created`, a histogram's parts (its
    `_count`'s `_created` too), a gauge by its name. Every source reads names through this."""
    found = ROLE_OF_SAMPLE.get(name)
    if found is not None:
        return found, False
    if name.endswith("_total"):
        return ROLE_OF_FAMILY.get(name[: -len("_total")]), False
    if name.endswith("_created"):
        base = name[: -len("_created")]
        return ROLE_OF_FAMILY.get(base) or ROLE_OF_SAMPLE.get(base + "_count"), True
    return ROLE_OF_GAUGE.get(name), False


def _forms(name: str) -> set[str]:
    """The sample names a family, histogram part or gauge `name` may be written as."""
    forms = {
        form
        for spelling in spellings(name)
        for form in (spelling, spelling + "_total", spelling + "_created")
    }
    if name.endswith("_count"):  # a histogram's count, and its `_created`
        forms |= {spelling[: -len("_count")] + "_created" for spelling in spellings(name)}
    return forms


#: Every sample name some schema reads, both spellings (counters' `_total` and `_created`,
#: histograms' parts and a `_count`'s `_created`, gauges) -> what `role_of_sample` says of it.
READ_SAMPLES: dict[str, tuple[tuple[ServingEngine, Role], bool]] = {
    name: (found, is_created)
    for name in sorted(
        {
            form
            for names in (ROLE_OF_FAMILY, ROLE_OF_SAMPLE, ROLE_OF_GAUGE)
            for n in names
            for form in _forms(n)
        }
    )
    for found, is_created in (role_of_sample(name),)
    if found is not None
}
SAMPLE_NAMES: frozenset[str] = frozenset(READ_SAMPLES)

#: The sample names of the schemas' companions (`CounterSchema.companions`) -> (engine, role).
COMPANIONS: dict[str, tuple[ServingEngine, Role]] = {
    name: READ_SAMPLES[name][0]
    for schema in SCHEMAS
    for family in schema.companions
    for name in sorted(_forms(family) & SAMPLE_NAMES)
}
