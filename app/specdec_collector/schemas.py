"""The API's models: what the routes take and answer, and what the client reads back.

Plain pydantic, so that the client imports them without the server's stack (no SQLAlchemy,
SQLModel or FastAPI). The tables are `store.tables`.
"""

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, Field, field_validator, model_validator

from specdec_collector.core.readings import SnapshotPhase
from specdec_collector.core.results import Counts, TargetResult, Throughput
from specdec_collector.core.targets import WINDOW_ID_PATTERN, Target, parse_target


class WindowState(StrEnum):
    """A window is open from its start until its stop (or a forced close)."""

    OPEN = "open"
    CLOSED = "closed"


TEAM_MAX_CHARS = 64
TEAM_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{TEAM_MAX_CHARS - 1}}}$"


class KeyRole(StrEnum):
    """What a key may do: read; read, start and stop; all that for any team; or only read
    `/metrics`, every team's results there (for Prometheus: it can neither read nor touch a
    window)."""

    READ = "read"
    WRITE = "write"
    ADMIN = "admin"
    METRICS = "metrics"


class KeyAction(StrEnum):
    """A change to the keys, as the audit trail (`GET /keys/events`) records it."""

    CREATED = "created"
    REVOKED = "revoked"


class KeyCreate(BaseModel):
    """A key to make (`POST /keys`): its team and role."""

    team: str = Field(max_length=TEAM_MAX_CHARS, pattern=TEAM_PATTERN)
    role: KeyRole


class KeyView(BaseModel):
    """A stored key as listed: never the key, only its first characters (`prefix`)."""

    id: int
    team: str
    role: KeyRole
    prefix: str
    created_at: AwareDatetime
    revoked_at: AwareDatetime | None = None


class NewKey(KeyView):
    """A key just made: `key` is shown in this answer only, and stored as its SHA-256."""

    key: str


class KeyEventView(BaseModel):
    """One change to the keys: when, which (`action`), the key, and who made it (`actor`: an
    admin key's label, `env:N` or `key:ID`, or `cli:<user>` for `specdec keys`)."""

    at: AwareDatetime
    action: KeyAction
    key_id: int
    team: str
    role: KeyRole
    actor: str


class Source(StrEnum):
    """Where a window's counters come from: the collector scrapes each target, or reads the
    deployment's Prometheus (SPECDEC_PROMETHEUS_URL) at the stop."""

    SCRAPE = "scrape"
    PROMETHEUS = "prometheus"


class WindowOptions(BaseModel):
    """What a window is given at its start, and shows in every view of it."""

    labels: dict[str, str] = Field(default_factory=dict)
    sample_interval_s: float | None = Field(default=None, ge=0.25, le=3600)


class _ParsedTargets(list[str | dict[str, Any]]):
    """A body's target list as given (what it dumps as), with the targets it parsed to."""

    def __init__(self, given: list[str | dict[str, Any]], parsed: list[Target]) -> None:
        super().__init__(given)
        self.parsed = parsed


class WindowCreate(WindowOptions):
    """Body of `POST /windows/{id}/start`; `models` is accepted in place of `targets`.

    `source` says where the counters come from: `scrape` (the collector scrapes each target),
    or `prometheus` (read from the deployment's Prometheus at the stop; targets are `host:port`
    matched to `instance`, or `{"selector": "{...}"}`); `at` starts such a window in the past.
    """

    targets: list[str | dict[str, Any]]
    source: Source = Source.SCRAPE
    at: AwareDatetime | None = None

    @model_validator(mode="before")
    @classmethod
    def _models_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "targets" not in data:
            # A missing list gets the same message as an empty one.
            data = {**data, "targets": data.get("models", [])}
        return data

    @field_validator("targets")
    @classmethod
    def _check_targets(cls, targets: list[str | dict[str, Any]]) -> list[str | dict[str, Any]]:
        """The targets as given, holding their parsed form (parsed once, here)."""
        if not targets:
            raise ValueError("at least one target is required")
        parsed: dict[str, Target] = {}
        for index, value in enumerate(targets):
            try:
                target = parse_target(value)
            except ValueError as exc:
                raise ValueError(f"target {index}: {exc}") from None
            known = parsed.get(target.name)
            if known is not None and known.url != target.url:
                raise ValueError(
                    f"target {index}: {target.name} is given twice with different URLs "
                    f"({known.url}, {target.url})"
                )
            parsed.setdefault(target.name, target)
        return _ParsedTargets(targets, list(parsed.values()))

    def parsed_targets(self) -> list[Target]:
        """The targets, parsed and unique by `host:port`, in the order first given."""
        if isinstance(self.targets, _ParsedTargets):
            return list(self.targets.parsed)
        unique: dict[str, Target] = {}  # a body made without validation
        for value in self.targets:
            target = parse_target(value)
            unique.setdefault(target.name, target)
        return list(unique.values())


class WindowStop(BaseModel):
    """Body of `POST /windows/{id}/stop` (optional): `at` stops a window read from Prometheus
    at a past time."""

    at: AwareDatetime | None = None


class TargetPublic(BaseModel):
    target: str
    url: str
    header_names: list[str] = Field(default_factory=list)
    before: Counts | None = None
    before_error: str | None = None
    result: TargetResult | None = None


class BoundedTargetResult(BaseModel):
    target: str
    result: TargetResult


class BoundedResults(BaseModel):
    """Every target's result over part of a window (`GET /windows/{id}/results?start=&end=`)."""

    targets: list[BoundedTargetResult]


class WindowView(WindowOptions):
    """A window as its calls answer it: its targets with their baselines and, once closed,
    their results."""

    id: str = Field(pattern=WINDOW_ID_PATTERN)
    team: str
    state: WindowState
    started_by: str
    stopped_by: str | None
    started_at: datetime
    stopped_at: datetime | None
    targets: list[TargetPublic]


class TargetSummary(BaseModel):
    target: str
    status: str | None = None
    engine: str | None = None
    exact: bool | None = None
    restarts: int | None = None
    acceptance_rate: float | None = None
    acceptance_length: float | None = None
    num_drafts: int | float | None = None


class WindowHeader(WindowOptions):
    """A window as a list or a comparison names it: id, team, state, labels, times."""

    id: str
    team: str
    state: WindowState
    started_at: datetime
    stopped_at: datetime | None


class WindowSummary(WindowHeader):
    """A window as `GET /windows` lists it: each target summarised."""

    targets: list[TargetSummary]


class WindowPage(BaseModel):
    windows: list[WindowSummary]
    next_cursor: str | None = None


class ComparedResult(BaseModel):
    """One window's result for a target, as `/compare` sets it beside the others'."""

    window: str
    status: str  # `ok`, `na`, or `open` while the window is
    error: str | None
    engine: str | None
    exact: bool | None
    restarts: int | None
    notes: list[str] | None
    acceptance_rate: float | None
    acceptance_length: float | None
    num_drafts: int | float | None
    per_position_acceptance_rates: dict[str, float] | None
    throughput: Throughput | None = None


class Speedup(BaseModel):
    """A window with spec decoding against one of the same server without (`versus`): how many
    times its generated tokens per second and its inter-token latency improved (above 1:
    faster), beside the acceptance length that should explain it."""

    window: str
    versus: str
    generated_tokens_per_second: float | None
    inter_token_latency: float | None = Field(description="versus's latency / window's")
    acceptance_length: float | None
    note: str


class FigureVerdict(BaseModel):
    """One figure's difference between two windows, judged on its 95 % interval (both windows
    sampled): better (the interval above 0), worse (below), or no significant difference; and
    the smallest difference this pair of windows could have detected (80 % power). Without
    intervals, only the difference, and `reason` says why there is no verdict."""

    difference: float | None
    low: float | None
    high: float | None
    detectable: float | None
    verdict: Literal["better", "worse", "no significant difference"] | None
    reason: str | None


class ResultDifference(BaseModel):
    """How a window's result differs from the first window's with an `ok` result (`versus`):
    acceptance rate in points, acceptance length, and the rate at each position both have;
    each judged (`verdicts`, `per_position_verdicts`); settings that differ where a comparison
    needs them equal (engine, draft positions, verification) in `mismatches`."""

    window: str
    versus: str
    acceptance_rate: float | None
    acceptance_length: float | None
    per_position_acceptance_rates: dict[str, float]
    verdicts: dict[str, FigureVerdict]
    per_position_verdicts: dict[str, FigureVerdict]
    mismatches: list[str]


class ComparedTarget(BaseModel):
    """One target across the windows: a result per window (null where a window lacks the
    target) and the differences from the first."""

    target: str
    results: list[ComparedResult | None]
    differences: list[ResultDifference]
    speedups: list[Speedup] = Field(default_factory=list)


class Comparison(BaseModel):
    """`GET /compare`: the windows, and each target across them."""

    windows: list[WindowHeader]
    targets: list[ComparedTarget]


class SamplePoint(BaseModel):
    """One snapshot of a target in a window's timeline. Drafts and tokens are cumulative
    since `before` (null when it failed); the rates, the length, `restarts` and
    `series_resets` are the interval's since the previous good snapshot (null without drafts)."""

    taken_at: datetime
    phase: SnapshotPhase
    status: str  # `ok` or `error`
    error: str | None
    num_drafts: int | float | None
    draft_tokens: int | float | None
    accepted_tokens: int | float | None
    acceptance_rate: float | None
    acceptance_length: float | None
    per_position_acceptance_rates: dict[str, float] | None
    restarts: int | None
    series_resets: int | None


class TargetSamples(BaseModel):
    target: str
    points: list[SamplePoint]
    thinned: bool = Field(
        default=False,
        description="more snapshots than `max_points`: these are both ends, every restart and "
        "evenly spaced others (each row's rates are of the interval before it)",
    )


class WindowSamples(BaseModel):
    """`GET /windows/{id}/samples`: every target's snapshots over time."""

    id: str
    series: list[TargetSamples]
