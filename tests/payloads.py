"""vLLM-shaped payloads with counters a test chooses.

`vllm_payload` writes the spec-decode families the way a vLLM V1 server does (text format
0.0.4 from prometheus_client: a `_total` counter family and a `_created` gauge family),
surrounded by the non-spec families of the shipped fixture `vllm_v1_dp1_nospec.txt`.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@dataclass
class EngineCounters:
    """The spec-decode counters of one (engine, model) series set."""

    drafts: int
    draft_tokens: int
    accepted_per_pos: list[int]
    engine: str = "0"
    model: str = MODEL
    created: float | None = 1_796_032_661.25  # None: no `_created` (vLLM with several API servers)
    accepted: int | None = None  # default: the sum over positions
    extra_labels: dict[str, str] = field(default_factory=dict)

    def labels(self, **more: str) -> str:
        pairs = {"engine": self.engine, "model_name": self.model, **self.extra_labels, **more}
        return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def spec_block(series: list[EngineCounters]) -> str:
    """The four spec-decode families with their `_created` siblings."""
    lines: list[str] = []
    families: list[tuple[str, Callable[[EngineCounters], int]]] = [
        ("vllm:spec_decode_num_drafts", lambda s: s.drafts),
        ("vllm:spec_decode_num_draft_tokens", lambda s: s.draft_tokens),
        (
            "vllm:spec_decode_num_accepted_tokens",
            lambda s: s.accepted if s.accepted is not None else sum(s.accepted_per_pos),
        ),
    ]
    for name, value in families:
        lines += [f"# HELP {name}_total x", f"# TYPE {name}_total counter"]
        lines += [f"{name}_total{{{s.labels()}}} {float(value(s))}" for s in series]
        lines += [f"# HELP {name}_created x", f"# TYPE {name}_created gauge"]
        lines += [f"{name}_created{{{s.labels()}}} {s.created}" for s in series if s.created]
    name = "vllm:spec_decode_num_accepted_tokens_per_pos"
    lines += [f"# HELP {name}_total x", f"# TYPE {name}_total counter"]
    for s in series:
        for pos, count in enumerate(s.accepted_per_pos):
            lines.append(f"{name}_total{{{s.labels(position=str(pos))}}} {float(count)}")
    lines += [f"# HELP {name}_created x", f"# TYPE {name}_created gauge"]
    for s in series:
        for pos in range(len(s.accepted_per_pos)):
            if s.created:
                lines.append(f"{name}_created{{{s.labels(position=str(pos))}}} {s.created}")
    return "\n".join(lines) + "\n"


def vllm_payload(series: list[EngineCounters]) -> str:
    """A full vLLM-shaped payload: the non-spec fixture with the spec families in it."""
    return fixture("vllm_v1_dp1_nospec.txt") + spec_block(series)


def drafts_payload(drafts: int) -> bytes:
    """A one-engine, k=3 payload whose counts all follow `drafts` (0.5/0.25/0.125 accepted)."""
    per_pos = [drafts // 2, drafts // 4, drafts // 8]
    engine = EngineCounters(drafts=drafts, draft_tokens=3 * drafts, accepted_per_pos=per_pos)
    return vllm_payload([engine]).encode()
