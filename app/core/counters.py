"""Which counters of which engine the arithmetic reads: one schema row per engine.

A schema names the sample families of one engine's `/metrics` that hold each role (drafts,
draft tokens, accepted tokens, accepted tokens per position, ...), the label that holds the
position, the prefix every one of its families starts with, and a marker: a substring of
their names that one pass over the payload finds (the extraction looks only at the lines that
hold a marker). Extraction keys each series by its engine,
role and labels; the arithmetic (`core.arithmetic`) works per engine on roles. What each engine
exposes, and where that is written down, is in docs/engines.md.
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


class Role(StrEnum):
    """What a series counts (or, for gauges, shows). The values are stored with each series."""

    DRAFTS = "num_drafts"
    DRAFT_TOKENS = "num_draft_tokens"
    ACCEPTED = "num_accepted_tokens"
    ACCEPTED_PER_POSITION = "accepted_per_pos"
    # TensorRT-LLM: drafted tokens at each position, of finished requests (position 0: drafts).
    DRAFTED_PER_POSITION = "drafted_per_pos"
    # SGLang: verify calls (one per draft), generated tokens and requests, at request completion.
    # Generated tokens are a witness of vLLM and llama.cpp too (below).
    VERIFY_CALLS = "verify_calls"
    GENERATION_TOKENS = "generation_tokens"
    REQUESTS = "num_requests"
    # Witnesses: counters that exist without speculative decoding, read beside a schema's
    # spec-decode families. A restart that none of those shows (llama.cpp has no `_created`)
    # shows in them where they fell; generated tokens also say what a server without
    # drafting did in a window.
    PROMPT_TOKENS = "prompt_tokens"
    DECODE_CALLS = "decode_calls"
    # vLLM V0 only: tells its counters from V1's, which have the same names.
    EMITTED = "num_emitted_tokens"
    # vLLM V0's lifetime ratios: gauges, shown as such, never counted.
    LIFETIME_ACCEPTANCE_RATE = "lifetime_acceptance_rate"
    LIFETIME_EFFICIENCY = "lifetime_efficiency"
    # LMDeploy's lifetime ratios beside its counters: gauges too, never a window's figures.
    LIFETIME_ACCEPTANCE_LENGTH = "lifetime_acceptance_length"
    LIFETIME_POSITION_RATE = "lifetime_position_rate"


#: Roles that are gauges: read from the family name itself, never treated as counters.
GAUGES: frozenset[Role] = frozenset(
    {
        Role.LIFETIME_ACCEPTANCE_RATE,
        Role.LIFETIME_EFFICIENCY,
        Role.LIFETIME_ACCEPTANCE_LENGTH,
        Role.LIFETIME_POSITION_RATE,
    }
)


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
    # A substring of the name of every family and gauge but the companions: the extraction
    # finds their lines by searching for it, in one pass shared by the schemas that share it.
    marker: str = "spec_decode_"
    # Families read only on a server that shows another family of the schema (SGLang's token
    # and request counters, the witnesses of vLLM and llama.cpp: they exist without
    # speculative decoding): found by name once one is. Their names may lie outside `prefix`.
    companions: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        names = [*self.families, *self.gauges]
        stray = [
            name
            for name in names
            if not name.startswith(self.prefix) and name not in self.companions
        ]
        if stray:
            raise ValueError(f"{self.engine}: families outside prefix {self.prefix!r}: {stray}")
        unmarked = [n for n in names if self.marker not in n and n not in self.companions]
        if unmarked or not self.companions <= self.families.keys():
            raise ValueError(f"{self.engine}: families without marker {self.marker!r}: {unmarked}")


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
# llama.cpp's own counters (`tools/server/server-task.cpp`, `to_metrics`).
_LLAMACPP_WITNESSES = {
    "llamacpp:tokens_predicted": Role.GENERATION_TOKENS,
    "llamacpp:prompt_tokens": Role.PROMPT_TOKENS,
    "llamacpp:n_decode": Role.DECODE_CALLS,
}

VLLM_V1 = CounterSchema(
    engine=ServingEngine.VLLM,
    prefix="vllm:spec_decode_",
    families={
        **_under("vllm:spec_decode_", {**_VLLM_NAMES, "num_emitted_tokens": Role.EMITTED}),
        **_VLLM_WITNESSES,
    },
    position_label="position",
    companions=frozenset(_VLLM_WITNESSES),
    gauges={
        "vllm:spec_decode_draft_acceptance_rate": Role.LIFETIME_ACCEPTANCE_RATE,
        "vllm:spec_decode_efficiency": Role.LIFETIME_EFFICIENCY,
    },
)

LLAMACPP = CounterSchema(
    engine=ServingEngine.LLAMACPP,
    prefix="llamacpp:spec_decode_",
    families={**_under("llamacpp:spec_decode_", _VLLM_NAMES), **_LLAMACPP_WITNESSES},
    position_label="position",
    companions=frozenset(_LLAMACPP_WITNESSES),
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
    # Without the colon: OpenMetrics from prometheus_client >= 0.23 writes `sglang_spec_...`.
    marker="spec_verify_calls",
    companions=frozenset({"sglang:generation_tokens", "sglang:num_requests"}),
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
)

#: Every engine the extraction reads.
SCHEMAS: tuple[CounterSchema, ...] = (VLLM_V1, LLAMACPP, TRTLLM, SGLANG, LMDEPLOY)


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

#: Gauge family name (in both spellings) -> (engine, role), over every schema.
ROLE_OF_GAUGE: dict[str, tuple[ServingEngine, Role]] = {
    spelling: (schema.engine, role)
    for schema in SCHEMAS
    for family, role in schema.gauges.items()
    for spelling in spellings(family)
}

#: The labels that hold a position, over every schema.
POSITION_LABELS: frozenset[str] = frozenset(schema.position_label for schema in SCHEMAS)
