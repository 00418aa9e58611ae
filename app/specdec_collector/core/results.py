"""The result of one target over one window, typed: what the arithmetic returns, storage keeps,
the API serves and the report renders.

Its JSON is AISBench's `spec_decode_<host>_<port>.json`, keys in AISBench's order (`status`,
`url`, `error`, `data`, `raw`), then what the collector adds (`samples`, `restarts`,
`series_resets`, `overlaps`). `restarts` counts engine restarts seen in the window (one per
engine per interval, whatever number of its series were reset); `series_resets` the series
found reset (one restart of an engine resets every family and position of it). Both are left
out when a scrape failed (nothing was compared); a result stored before `restarts` existed
carries only `series_resets` (then called `counter_resets`). `overlaps` is left out until a
window's overlaps are known, as the service has always answered.
"""

import math
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from typing_extensions import TypedDict  # pydantic reads only this one's on Python < 3.12

UNREADABLE_RESULT = "The stored result of this target cannot be read (invalid figures)"
OVERLAPS_FLAG = (
    "{n} other window(s) ran on this server during the window: their benchmarks' drafts are in "
    "these counters (see overlaps)"
)

Count = int | float
"""A counter: an integer, or a float where a server exposed a fractional value."""


class Counts(BaseModel):
    """Counters summed over the series of one scrape (`raw.before`, `raw.after`)."""

    model_config = ConfigDict(extra="forbid")

    num_drafts: Count
    num_draft_tokens: Count
    num_accepted_tokens: Count
    accepted_per_pos: dict[str, Count]


class Raw(BaseModel):
    """The counters at the window's two ends; null where that scrape failed."""

    before: Counts | None
    after: Counts | None


class ResultData(BaseModel):
    """AISBench's `data`: the window's increases and what follows from them. A figure the
    engine's counters cannot give (early vLLM V1 has no drafts counter) is null, never guessed."""

    num_drafts: Count | None
    draft_tokens: Count | None
    # Null only for an engine that counts no tokens (Modular MAX's batch histograms).
    accepted_tokens: Count | None
    acceptance_rate: float | None = Field(description="accepted / draft tokens x 100, full float")
    acceptance_length: float | None = Field(description="1 + accepted / drafts, full float")
    per_position_acceptance_rates: dict[str, float] | None = Field(
        description="accepted at position N / drafts, full float, keys in numeric order"
    )

    def is_finite(self) -> bool:
        """Whether every figure is a finite number (JSON and the stores hold no others)."""
        figures = [
            self.num_drafts,
            self.draft_tokens,
            self.accepted_tokens,
            self.acceptance_rate,
            self.acceptance_length,
            *(self.per_position_acceptance_rates or {}).values(),
        ]
        return all(math.isfinite(figure) for figure in figures if figure is not None)


class DiffusionFigures(BaseModel):
    """A diffusion LLM's window (vLLM's `diffusion_*` counters): no drafts, but how many
    tokens each denoising step committed, of the canvas positions it evaluated."""

    denoising_steps: Count
    canvas_positions: Count
    committed_tokens: Count
    tokens_per_step: float = Field(description="committed tokens / denoising steps")
    committed_share: float | None = Field(
        description="committed tokens / canvas positions evaluated x 100"
    )


class Throughput(BaseModel):
    """What the server did in the window besides drafting, from the same scrapes' witnesses
    (`core.throughput`): every request the server served, not only the benchmark's. A figure
    the engine's counters cannot give is null."""

    # Null defaults: a stored result leaves them out (`TargetResult.as_stored`).
    seconds: float | None = Field(
        default=None, description="between the two scrapes the window's counts span"
    )
    generated_tokens: Count = Field(description="output tokens, each request's first included")
    prompt_tokens: Count | None = None
    finished_requests: Count | None = None
    generated_tokens_per_second: float | None = None
    inter_token_latency_ms: float | None = Field(
        default=None,
        description="decode seconds / tokens decoded after each request's first, x 1000: the "
        "mean gap between two tokens of a request, token-weighted",
    )
    generated_tokens_per_step: float | None = Field(
        default=None,
        description="generated tokens / forward passes of the whole batch (vLLM engine steps, "
        "llama.cpp decode calls)",
    )
    accepted_token_share: float | None = Field(
        default=None,
        description="accepted draft tokens / generated tokens x 100: the output drafting gave",
    )


class LifetimeRatios(BaseModel):
    """An engine's lifetime gauges of one label set (vLLM V0's, LMDeploy's): ratios since the
    server started, shown as such (never a window's figures)."""

    labels: dict[str, str]
    draft_acceptance_rate: float | None = None
    efficiency: float | None = None
    acceptance_length: float | None = None  # LMDeploy's mean, the bonus token included
    position_acceptance_rate: float | None = None  # LMDeploy's, of the label set's position


class FigureInterval(BaseModel):
    """A figure's 95 % confidence interval."""

    low: float
    high: float


class Confidence(BaseModel):
    """How sure a sampled window's figures are (`core.uncertainty`): each one's 95 % interval
    from the variation between sample intervals; none, with the reason, where too few."""

    level: float = 0.95
    method: str
    intervals: int = Field(description="sample intervals of the window")
    batches: int = Field(description="batches of consecutive intervals the estimate used")
    acceptance_rate: FigureInterval | None = None
    acceptance_length: FigureInterval | None = None
    per_position_acceptance_rates: dict[str, FigureInterval] | None = None
    reason: str | None = Field(default=None, exclude_if=lambda value: value is None)


class FlagKind(StrEnum):
    """What makes a figure suspicious (`Flag`)."""

    NEAR_ZERO = "near_zero"  # acceptance near 0 % over many drafts
    RISING_POSITIONS = "rising_positions"  # a later position accepted more often
    LENGTH_VARIED = "length_varied"  # the draft length changed inside the window
    FEW_DRAFTS = "few_drafts"  # too few drafts for the figures to mean much
    OVERLAPS = "overlaps"  # other benchmarks' traffic is in the counters


class Flag(BaseModel):
    """A reason to doubt a result's figures, said in a sentence."""

    kind: FlagKind
    reason: str


#: Beside AISBench's `data`, where an engine's counters give them (a result's and a dataset's).
PerDraftedRates = Annotated[
    dict[str, float] | None,
    Field(
        description="accepted at position N / drafts that reached position N (DSpark's drafts "
        "by length), full float",
        exclude_if=lambda value: value is None,
    ),
]
AcceptedDistribution = Annotated[
    dict[str, Count] | None,
    Field(
        description="drafts that had exactly N tokens accepted, N = 0..k (from cumulative "
        "per-position counts where every draft was k long; TGI's buckets)",
        exclude_if=lambda value: value is None,
    ),
]


class EngineResult(BaseModel):
    """One engine's result within a target that serves several (a proxy, a Dynamo worker)."""

    engine: str
    status: Literal["ok", "na"]
    error: str | None = None
    data: ResultData | None = None
    exact: bool
    notes: list[str] = Field(default_factory=list)
    diffusion: DiffusionFigures | None = Field(default=None, exclude_if=lambda v: v is None)
    confidence: Confidence | None = Field(default=None, exclude_if=lambda v: v is None)
    flags: list[Flag] | None = Field(default=None, exclude_if=lambda v: not v)
    throughput: Throughput | None = Field(default=None, exclude_if=lambda v: v is None)
    # Beside AISBench's `data`, where an engine's counters give them.
    per_drafted_position_acceptance_rates: PerDraftedRates = None
    accepted_distribution: AcceptedDistribution = None


class SampleCount(BaseModel):
    """Background samples taken between the window's two ends, and how many failed."""

    taken: int = 0
    failed: int = 0


# A typed dict, not a model: a stop beside hundreds of windows of its team builds one for
# each, and a model would validate each one.
class OverlappingWindow(TypedDict):
    """A window of the same team open on the same target at the same time."""

    id: str
    seconds: float


class CountedWindows(BaseModel):
    """Windows on the same target at the same time, counted, with the seconds they were open
    during this one (summed)."""

    windows: int = 0
    seconds: float = 0.0


#: The most windows of the caller's team an overlap names per target; any more are counted
#: in `more_windows`. A stop beside hundreds of windows of its team on the same servers would
#: otherwise name each on each target: thousands of entries per stop, costly to store, send
#: and read back, and a list nobody reads.
MAX_NAMED_OVERLAPS = 16


class Overlaps(BaseModel):
    """Benchmarks of other windows whose traffic is in this window's counters."""

    windows: list[OverlappingWindow] = Field(
        default_factory=list,
        description=f"the caller's team's windows, the {MAX_NAMED_OVERLAPS} longest overlaps at "
        "most, in the order they started",
    )
    more_windows: CountedWindows = Field(
        default_factory=CountedWindows,
        description="the caller's team's windows past those named: counted",
    )
    other_teams: CountedWindows = Field(
        default_factory=CountedWindows, description="other teams' windows: counted, never named"
    )

    @property
    def count(self) -> int:
        """Every overlapping window, named or counted."""
        return len(self.windows) + self.more_windows.windows + self.other_teams.windows


class Bounds(BaseModel):
    """The part of a window a result covers, when it is not the whole window: the phase asked
    for (a benchmark's inference phase) and the snapshots that enclose it."""

    requested_start: datetime
    requested_end: datetime
    start: datetime = Field(description="the last snapshot at or before requested_start")
    start_phase: str
    end: datetime = Field(description="the first snapshot at or after requested_end")
    end_phase: str


class DatasetResult(BaseModel):
    """A target's figures over one dataset of an AISBench run that held several one after
    another: the snapshots that enclose its first request sent and its last answer (`bounds`),
    from AISBench's own request records."""

    requests: int = Field(description="AISBench's request records of the dataset")
    status: Literal["ok", "na"]
    error: str | None = None
    data: ResultData | None = None
    bounds: Bounds | None = None
    throughput: Throughput | None = Field(default=None, exclude_if=lambda v: v is None)


class TargetResult(BaseModel):
    """One target's result over one window (see the module docstring)."""

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True)

    status: Literal["ok", "na"]
    url: str
    error: str | None = None
    data: ResultData | None = None
    raw: Raw = Field(default_factory=lambda: Raw(before=None, after=None))
    # Which engine's counters these are, whether every figure follows exactly from counters,
    # and why not (docs/engines.md). Left out of results stored before engines were told apart.
    engine: str | None = Field(default=None, exclude_if=lambda value: value is None)
    exact: bool | None = Field(default=None, exclude_if=lambda value: value is None)
    notes: list[str] | None = Field(default=None, exclude_if=lambda value: value is None)
    samples: SampleCount = Field(default_factory=SampleCount)
    # Left out of the JSON while unknown (see the module docstring).
    restarts: int | None = Field(default=None, exclude_if=lambda value: value is None)
    series_resets: int | None = Field(
        default=None,
        # Results stored before the rename say `counter_resets`.
        validation_alias=AliasChoices("series_resets", "counter_resets"),
        exclude_if=lambda value: value is None,
    )
    overlaps: Overlaps | None = Field(default=None, exclude_if=lambda value: value is None)
    bounds: Bounds | None = Field(default=None, exclude_if=lambda value: value is None)
    # `specdec run` around an AISBench perf run: `data` covers its inference phase, and these
    # are the figures of the whole command (AISBench's own block counts its warm-up too).
    whole_command: ResultData | None = Field(default=None, exclude_if=lambda value: value is None)
    # A target serving several engines: each one's result (`data` is their sum or the first's).
    engines: list[EngineResult] | None = Field(default=None, exclude_if=lambda value: value is None)
    lifetime: list[LifetimeRatios] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    diffusion: DiffusionFigures | None = Field(default=None, exclude_if=lambda v: v is None)
    # The models the server's series name (their `model_name` label), for comparisons.
    models: list[str] | None = Field(default=None, exclude_if=lambda v: not v)
    # How the server verified drafts, where the start body said (`core.targets.VERIFICATIONS`).
    verification: str | None = Field(default=None, exclude_if=lambda v: v is None)
    # A sampled window's 95 % intervals (beside AISBench's keys, never in them).
    confidence: Confidence | None = Field(default=None, exclude_if=lambda v: v is None)
    # Reasons to doubt the figures (beside AISBench's keys); left out where there are none.
    flags: list[Flag] | None = Field(default=None, exclude_if=lambda v: not v)
    # Throughput and latency beside acceptance, where the engine counts them; also on an `na`
    # result of a server without spec decoding, the other side of a speedup.
    throughput: Throughput | None = Field(default=None, exclude_if=lambda v: v is None)
    # Beside AISBench's `data`, where an engine's counters give them.
    per_drafted_position_acceptance_rates: PerDraftedRates = None
    accepted_distribution: AcceptedDistribution = None
    # `specdec run` around an AISBench run of several datasets: each one's figures, by its
    # abbreviation, beside the whole run's.
    datasets: dict[str, DatasetResult] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.data is not None

    def with_overlaps(self, overlaps: Overlaps) -> "TargetResult":
        """This result with `overlaps` (a stop stores them; reads of older results add them),
        flagged where other benchmarks ran on the server meanwhile."""
        flags = [flag for flag in self.flags or [] if flag.kind is not FlagKind.OVERLAPS]
        others = overlaps.count
        if others and self.ok:
            flags.append(Flag(kind=FlagKind.OVERLAPS, reason=OVERLAPS_FLAG.format(n=others)))
        return self.model_copy(update={"overlaps": overlaps, "flags": flags or None})

    @classmethod
    def from_stored(cls, stored: Any, url: str) -> "TargetResult":
        """The result stored for a target; one that does not read as a result (stored by an
        older version with figures JSON could not hold, say) is `na` saying so: a read of the
        window never fails for it."""
        try:
            return cls.model_validate({"url": url, **stored})
        except (ValidationError, TypeError):
            return cls(status="na", url=url, error=UNREADABLE_RESULT)

    def as_json(self) -> dict[str, Any]:
        """The JSON object, as served."""
        return self.model_dump(mode="json")

    def as_stored(self) -> str:
        """The JSON text as stored: without its defaults and its URL (the row holds it),
        which `from_stored` puts back, so a stopped window's rows do not carry them."""
        return self.model_dump_json(exclude_defaults=True, exclude={"url"})
