"""vLLM-shaped payloads with counters a test chooses.

`vllm_payload` writes the spec-decode families the way a vLLM V1 server does (text format
0.0.4 from prometheus_client: a `_total` counter family and a `_created` gauge family),
surrounded by the non-spec families of the shipped fixture `vllm_v1_dp1_nospec.txt`.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter

FIXTURES = Path(__file__).parents[1] / "fixtures"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@dataclass
class InstanceCounters:
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


def spec_block(series: list[InstanceCounters]) -> str:
    """The four spec-decode families with their `_created` siblings."""
    lines: list[str] = []
    families: list[tuple[str, Callable[[InstanceCounters], int]]] = [
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


def vllm_payload(series: list[InstanceCounters]) -> str:
    """A full vLLM-shaped payload: the non-spec fixture with the spec families in it."""
    return fixture("vllm_v1_dp1_nospec.txt") + spec_block(series)


def drafts_payload(drafts: int) -> bytes:
    """A one-instance, k=3 payload whose counts all follow `drafts` (0.5/0.25/0.125 accepted)."""
    per_pos = [drafts // 2, drafts // 4, drafts // 8]
    engine = InstanceCounters(drafts=drafts, draft_tokens=3 * drafts, accepted_per_pos=per_pos)
    return vllm_payload([engine]).encode()


@dataclass
class LlamaCppCounters:
    """What llama-server counts (`server_task_result_metrics::to_metrics` in llama.cpp's
    `tools/server/server-task.cpp`): no labels, no `_created`, values printed with `%g`."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)  # empty: the family is absent
    predicted: int = 0  # tokens_predicted_total
    prompt: int = 0  # prompt_tokens_total
    decodes: int = 0  # n_decode_total


def _g(value: float) -> str:
    """C++'s default stream formatting of a double (`%g`, six significant digits)."""
    return f"{value:g}"


def llamacpp_payload(c: LlamaCppCounters) -> str:
    """A llama-server `/metrics` answer, counters and gauges in its order."""
    counters = [
        ("prompt_tokens_total", c.prompt), ("prompt_tokens_cached_total", 0),
        ("prompt_seconds_total", c.prompt / 1000), ("tokens_predicted_total", c.predicted),
        ("tokens_predicted_seconds_total", c.predicted / 50), ("n_decode_total", c.decodes),
        ("n_tokens_max", c.prompt + c.predicted),
        ("spec_decode_num_draft_tokens_total", c.draft_tokens),
        ("spec_decode_num_accepted_tokens_total", sum(c.accepted_per_pos)),
        ("spec_decode_num_drafts_total", c.drafts),
    ]  # fmt: skip
    gauges = [
        ("prompt_tokens_seconds", 0.0), ("predicted_tokens_seconds", 48.5),
        ("requests_processing", 0), ("requests_deferred", 0), ("n_busy_slots_per_decode", 1),
    ]  # fmt: skip
    lines: list[str] = []
    for kind, items in (("counter", counters), ("gauge", gauges)):
        for name, value in items:
            lines += [f"# HELP llamacpp:{name} x", f"# TYPE llamacpp:{name} {kind}"]
            lines.append(f"llamacpp:{name} {_g(value)}")
    if c.accepted_per_pos:
        name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
        lines += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
        lines += [f'{name}{{position="{i}"}} {n}' for i, n in enumerate(c.accepted_per_pos)]
    return "\n".join(lines) + "\n"


def vllm_rust_payload(
    engines: list[InstanceCounters], spec_steps_seen: bool = True, generated: int = 0
) -> str:
    """vLLM's Rust frontend (`VLLM_USE_RUST_FRONTEND=1`, the 0.33 wheel; `rust/src/metrics/src/
    scheduler.rs`, as ENGINES.md records it): always OpenMetrics with a final `# EOF`, integer
    values, no `_created`, the three counters present at 0 for every engine even with spec
    decode off, the per-position family only once a speculative step has run."""
    lines: list[str] = []

    def family(name: str, values: list[tuple[str, int]]) -> None:
        lines.extend([f"# TYPE {name} counter", f"# HELP {name} x"])
        lines.extend(f"{name}_total{{{labels}}} {value}" for labels, value in values)

    family("vllm:generation_tokens", [(e.labels(), generated) for e in engines])
    family("vllm:spec_decode_num_drafts", [(e.labels(), e.drafts) for e in engines])
    family("vllm:spec_decode_num_draft_tokens", [(e.labels(), e.draft_tokens) for e in engines])
    family(
        "vllm:spec_decode_num_accepted_tokens",
        [(e.labels(), sum(e.accepted_per_pos)) for e in engines],
    )
    if spec_steps_seen:
        family(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            [
                (e.labels(position=str(p)), n)
                for e in engines
                for p, n in enumerate(e.accepted_per_pos)
            ],
        )
    return "\n".join([*lines, "# EOF"]) + "\n"


def prometheus_client_registry() -> CollectorRegistry:
    """The spec-decode counters SGLang and LMDeploy register with prometheus_client (their
    names and labels from `sglang/srt/metrics/collector.py` and `lmdeploy/metrics/loggers.py`)."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    for name in ("sglang:spec_verify_calls", "sglang:generation_tokens", "sglang:num_requests"):
        Counter(name, name, labels, registry=registry).labels("m", "0").inc(40)
    for role in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        name = f"lmdeploy:spec_decode_{role}"
        Counter(name, name, labels, registry=registry).labels("m", "0").inc(12)
    per_pos = Counter(
        "lmdeploy:spec_decode_num_accepted_tokens_per_pos", "x", [*labels, "position"],
        registry=registry,
    )  # fmt: skip
    per_pos.labels("m", "0", "0").inc(9)
    return registry
