"""Which counters of which engine the arithmetic reads: one schema row per engine.

A schema names the sample families of one engine's `/metrics` that hold each role (drafts,
draft tokens, accepted tokens, accepted tokens per position), the label that holds the
position, and the prefix every one of its families starts with (the extraction's fast path
jumps from one line with that prefix to the next). Extraction keys each series by its role, and
the arithmetic works on roles only, so an engine is added here, as a row, with its tests.
"""

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    """What a counter counts. The values are the names stored with each series."""

    DRAFTS = "num_drafts"
    DRAFT_TOKENS = "num_draft_tokens"
    ACCEPTED = "num_accepted_tokens"
    ACCEPTED_PER_POSITION = "accepted_per_pos"


@dataclass(frozen=True, slots=True)
class CounterSchema:
    """The spec-decode counters of one engine."""

    engine: str
    prefix: str
    # Family name, without the `_total` / `_created` suffix -> the role of its samples.
    families: dict[str, Role]
    # The label whose value is the position, on the `ACCEPTED_PER_POSITION` family.
    position_label: str

    def __post_init__(self) -> None:
        stray = [name for name in self.families if not name.startswith(self.prefix)]
        if stray:
            raise ValueError(f"{self.engine}: families outside prefix {self.prefix!r}: {stray}")


VLLM_V1 = CounterSchema(
    engine="vllm",
    prefix="vllm:spec_decode_",
    families={
        "vllm:spec_decode_num_drafts": Role.DRAFTS,
        "vllm:spec_decode_num_draft_tokens": Role.DRAFT_TOKENS,
        "vllm:spec_decode_num_accepted_tokens": Role.ACCEPTED,
        "vllm:spec_decode_num_accepted_tokens_per_pos": Role.ACCEPTED_PER_POSITION,
    },
    position_label="position",
)

#: Every engine the extraction reads, in the order their prefixes are searched.
SCHEMAS: tuple[CounterSchema, ...] = (VLLM_V1,)

#: Family name -> role, over every schema.
ROLE_OF_FAMILY: dict[str, Role] = {
    family: role for schema in SCHEMAS for family, role in schema.families.items()
}

#: The labels that hold a position, over every schema.
POSITION_LABELS: frozenset[str] = frozenset(schema.position_label for schema in SCHEMAS)
