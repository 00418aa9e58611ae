"""Pure spec-decode arithmetic: per-series increases with resets, sums and timelines.

Nothing here does I/O; `core.figures` turns the increases into each engine's result. Each scrape
of a window (`before`, samples, `after`) is given as its `Reading`: the extracted `Series`, or
the `Failure` of a reading that failed.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specdec_collector.core.counters import (
    GAUGES,
    POSITION_LABELS,
    WITNESSES,
    Role,
    ServingEngine,
)
from specdec_collector.core.exposition import Series, SeriesKey, SeriesValue
from specdec_collector.core.readings import Failure, Reading, SnapshotPhase
from specdec_collector.core.results import Counts, ResultData

NO_METRICS = "No spec decode metrics found on server"
NO_ACTIVITY = "No spec decode activity detected during benchmark window"
INVALID_COUNTERS = "Invalid counters: a figure of the window is not a finite number"


@dataclass(slots=True)
class Totals:
    """Counters summed over series: absolute values, or increases over a window."""

    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)
    drafted_per_pos: dict[int, float] = field(default_factory=dict)  # TensorRT-LLM
    verify_calls: float = 0.0  # SGLang
    generation_tokens: float = 0.0  # the witnesses (`counters.WITNESSES`)
    requests: float = 0.0
    prompt_tokens: float = 0.0
    decode_calls: float = 0.0
    decode_seconds: float = 0.0
    first_tokens: float = 0.0
    drafts_by_length: dict[int, float] = field(default_factory=dict)  # DSpark
    batch_length_sum: float = 0.0  # Modular MAX: its histograms' sums and counts
    batch_length_count: float = 0.0
    batch_rate_sum: dict[int, float] = field(default_factory=dict)
    batch_rate_count: dict[int, float] = field(default_factory=dict)
    steps_at_most: dict[int, float] = field(default_factory=dict)  # TGI: steps by accepted
    denoising_steps: float = 0.0  # vLLM's diffusion LLMs
    canvas_positions: float = 0.0
    committed_tokens: float = 0.0
    series_resets: int = 0  # series found reset
    restarts: int = 0  # engine instances found restarted: one per instance per interval

    def add(self, key: SeriesKey, amount: float) -> None:
        """Add `amount` to the fields of `key`'s role (per position for the per-position
        roles). An engine whose counters are not AISBench's adds each into the counters it
        stands for (`_ADDED_INTO`): FastDeploy's emitted tokens minus its accepted ones are
        its drafts, TGI's steps are drafts and the tokens they skipped accepted tokens."""
        role = key.role
        # Most series of a payload count accepted tokens at a position: that test comes first.
        if role is Role.ACCEPTED_PER_POSITION:
            _add_at(self.accepted_per_pos, key, amount)
            return
        by_position = _PER_POSITION_FIELD.get(role)
        if by_position is not None:
            _add_at(getattr(self, by_position), key, amount)
            return
        for name, factor in _ADDED_INTO.get((key.engine, role), ()):
            setattr(self, name, getattr(self, name) + factor * amount)

    def absorb(self, other: "Totals") -> None:
        """Add every counter of `other` to this one."""
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        _merge(self.accepted_per_pos, other.accepted_per_pos)
        _merge(self.drafted_per_pos, other.drafted_per_pos)
        self.verify_calls += other.verify_calls
        self.generation_tokens += other.generation_tokens
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.decode_calls += other.decode_calls
        self.decode_seconds += other.decode_seconds
        self.first_tokens += other.first_tokens
        _merge(self.drafts_by_length, other.drafts_by_length)
        self.batch_length_sum += other.batch_length_sum
        self.batch_length_count += other.batch_length_count
        _merge(self.batch_rate_sum, other.batch_rate_sum)
        _merge(self.batch_rate_count, other.batch_rate_count)
        _merge(self.steps_at_most, other.steps_at_most)
        self.denoising_steps += other.denoising_steps
        self.canvas_positions += other.canvas_positions
        self.committed_tokens += other.committed_tokens
        self.series_resets += other.series_resets
        self.restarts += other.restarts

    def raw(self) -> Counts:
        """The AISBench `raw.before` / `raw.after` shape."""
        return Counts(
            num_drafts=as_number(self.num_drafts),
            num_draft_tokens=as_number(self.num_draft_tokens),
            num_accepted_tokens=as_number(self.num_accepted_tokens),
            accepted_per_pos={
                str(pos): as_number(v) for pos, v in sorted(self.accepted_per_pos.items())
            },
        )


def _add_at(by_position: dict[int, float], key: SeriesKey, amount: float) -> None:
    position = _position(key.labels)
    if position is not None:
        by_position[position] = by_position.get(position, 0.0) + amount


def _merge(into: dict[int, float], more: dict[int, float]) -> None:
    """Add every per-position amount of `more` to `into`."""
    for position, amount in more.items():
        into[position] = into.get(position, 0.0) + amount


def _position(labels: tuple[tuple[str, str], ...]) -> int | None:
    """The position (or other index: a bucket's bound, a draft length) a series' labels
    hold; None for one that is not a whole number (`le="+Inf"`)."""
    for name, value in labels:
        if name in POSITION_LABELS:
            try:
                return int(value)
            except ValueError:
                try:  # a bucket bound written as a float: `le="2.0"`
                    number = float(value)
                except ValueError:
                    return None
                return int(number) if number.is_integer() else None
    return None


def as_number(value: float) -> int | float:
    """Counters are integers carried as floats; show them as integers when they are."""
    return int(value) if value.is_integer() else value


#: The role of each counter summed as one number -> its field of `Totals`.
_SUMMED_FIELD: dict[Role, str] = {
    Role.DRAFTS: "num_drafts",
    Role.DRAFT_TOKENS: "num_draft_tokens",
    Role.ACCEPTED: "num_accepted_tokens",
    Role.VERIFY_CALLS: "verify_calls",
    Role.GENERATION_TOKENS: "generation_tokens",
    Role.REQUESTS: "requests",
    Role.PROMPT_TOKENS: "prompt_tokens",
    Role.DECODE_CALLS: "decode_calls",
    Role.DECODE_SECONDS: "decode_seconds",
    Role.FIRST_TOKENS: "first_tokens",
    Role.BATCH_LENGTH_SUM: "batch_length_sum",
    Role.BATCH_LENGTH_COUNT: "batch_length_count",
    Role.DENOISING_STEPS: "denoising_steps",
    Role.CANVAS_POSITIONS: "canvas_positions",
    Role.COMMITTED_TOKENS: "committed_tokens",
}

#: The per-position roles -> their field of `Totals` (keyed by position, or other index).
_PER_POSITION_FIELD: dict[Role, str] = {
    Role.DRAFTED_PER_POSITION: "drafted_per_pos",
    Role.DRAFTS_BY_LENGTH: "drafts_by_length",
    Role.BATCH_RATE_SUM: "batch_rate_sum",
    Role.BATCH_RATE_COUNT: "batch_rate_count",
    Role.STEPS_AT_MOST: "steps_at_most",
}

#: (engine, role) -> the fields of `Totals` a series adds into, and with which factor. Every
#: engine's roles are in `_SUMMED_FIELD`'s field, but where its counters stand for others.
_ADDED_INTO: dict[tuple[ServingEngine, Role], tuple[tuple[str, float], ...]] = {
    **{
        (engine, role): ((name, 1.0),)
        for engine in ServingEngine
        for role, name in _SUMMED_FIELD.items()
    },
    # FastDeploy: each step emits its accepted tokens and one more, so steps (its drafts)
    # are emitted - accepted.
    (ServingEngine.FASTDEPLOY, Role.EMITTED): (("num_drafts", 1.0),),
    (ServingEngine.FASTDEPLOY, Role.ACCEPTED): (("num_accepted_tokens", 1.0), ("num_drafts", -1.0)),
    # TGI: every step verifies a draft; the tokens beyond its first are the accepted ones.
    (ServingEngine.TGI, Role.STEPS): (("num_drafts", 1.0),),
    (ServingEngine.TGI, Role.SKIPPED_TOKENS): (("num_accepted_tokens", 1.0),),
}


def absolute_totals(series: Series) -> Totals:
    """Sum each family's counters over all series of one snapshot."""
    totals = Totals()
    for key, sample in series.items():
        if sample.value is not None and key.role not in GAUGES:
            totals.add(key, sample.value)
    return totals


Instance = tuple[str, tuple[tuple[str, str], ...]]
"""One engine instance of a target: its engine and its labels but the position."""


def instance_of(key: SeriesKey) -> Instance:
    """The engine instance a series belongs to: its engine and every label but the position
    (every family and position of one instance share them, and reset together on a restart)."""
    return key.engine.value, tuple(pair for pair in key.labels if pair[0] not in POSITION_LABELS)


def was_reset(earlier: SeriesValue | None, later: SeriesValue) -> bool:
    """Whether a series was reset between two snapshots: Prometheus' rule, it fell or its
    `_created` time grew. A series absent earlier was not reset (it starts from 0)."""
    if earlier is None or earlier.value is None or later.value is None:
        return False
    return later.value < earlier.value or (
        earlier.created is not None
        and later.created is not None
        and later.created > earlier.created
    )


def interval_increases(chain: Sequence[Series]) -> list[Totals]:
    """The increase of each step of `chain`: element i is from snapshot i to snapshot i + 1.

    Resets are found per engine instance (`instance_of`): when any series of an instance was
    reset in a step, spec-decode counter or witness (its generated tokens, say), the instance
    restarted, and every one of its series counts its new value. So a restart whose new
    counts outgrew the old ones is still found where anything of it fell. A series missing
    from one snapshot is compared, when it returns, with its last value seen, so a scrape that
    omitted it loses nothing; unless its instance restarted in between.
    """
    steps: list[Totals] = []
    last: dict[SeriesKey, SeriesValue] = dict(chain[0]) if chain else {}
    for snapshot in chain[1:]:
        step = Totals()
        reset = [key for key, sample in snapshot.items() if was_reset(last.get(key), sample)]
        restarted: set[Instance] = {instance_of(key) for key in reset if key.role not in GAUGES}
        step.series_resets = len(reset)
        for key, sample in snapshot.items():
            if key.role in GAUGES:
                continue  # a gauge goes down and up: never a reset, never counted
            assert sample.value is not None
            earlier = last.get(key)
            if (
                earlier is None
                or earlier.value is None
                or (restarted and instance_of(key) in restarted)
            ):
                step.add(key, sample.value)
            else:
                step.add(key, sample.value - earlier.value)
            last[key] = sample
        if restarted:
            # A restarted engine shows some families only later (llama.cpp prints its
            # per-position family once its first speculative request completes): what was last
            # seen of them is from before the restart, so they come back from 0, not as a reset.
            for key in [k for k in last if k not in snapshot and instance_of(k) in restarted]:
                del last[key]
        step.restarts = len(restarted)
        steps.append(step)
    return steps


class TooManyChanges(ValueError):
    """More steps of a chain change its shape than the points it may keep."""

    def __init__(self, changes: int) -> None:
        super().__init__(f"{changes} steps change the chain's series")
        self.changes = changes


def _changes_shape(earlier: Series, later: Series) -> bool:
    """Whether the step from `earlier` to `later` is one the arithmetic must see: a series
    came or went, or a counter was reset (a gauge's ups and downs never matter)."""
    if earlier.keys() != later.keys():
        return True
    return any(
        key.role not in GAUGES and was_reset(earlier.get(key), value)
        for key, value in later.items()
    )


def needed_points(chain: Sequence[Series], max_points: int, strict: bool = True) -> list[int]:
    """The indexes of at most `max_points` snapshots of `chain` whose increases are those of
    all of it: the first and the last, both ends of every step where a series came, went or
    was reset, and evenly spaced others. Between two snapshots kept, every counter only grew
    and no series came or went, so their difference is the sum of the steps dropped.
    `TooManyChanges` if the ones needed are more than `max_points` (`strict`), else they are
    all kept."""
    if len(chain) <= max_points:
        return list(range(len(chain)))
    kept = {0, len(chain) - 1}
    for index in range(1, len(chain)):
        if _changes_shape(chain[index - 1], chain[index]):
            kept.update((index - 1, index))
    if len(kept) > max_points and strict:
        raise TooManyChanges(len(kept) // 2)
    _spread(kept, [index for index in range(len(chain)) if index not in kept], max_points)
    return sorted(kept)


def _spread(kept: set[int], others: Sequence[int], max_points: int) -> None:
    """Add evenly spaced ones of `others` to `kept`, up to `max_points` in all."""
    room = max(0, max_points - len(kept))
    if room and others:
        stride = len(others) / room
        kept.update(others[int(i * stride)] for i in range(min(room, len(others))))


def thin_timeline(
    points: Sequence[tuple[Any, str, Reading]], max_points: int
) -> tuple[list[tuple[Any, str, Reading]], bool]:
    """At most about `max_points` of a timeline's snapshots, and whether any were dropped:
    the good ones as `needed_points` keeps them (every restart kept, however many: the
    cumulative counts stay those of all of them), failed ones evenly spaced in what is left."""
    if len(points) <= max_points:
        return list(points), False
    good = [i for i, (_, _, reading) in enumerate(points) if not isinstance(reading, Failure)]
    failed = [i for i, (_, _, reading) in enumerate(points) if isinstance(reading, Failure)]
    chain = [points[i][2] for i in good]
    share = max(2, max_points * len(good) // len(points))
    kept = {good[i] for i in needed_points(chain, share, strict=False)}  # type: ignore[arg-type]
    kept.update((0, len(points) - 1))  # the ends, whatever they read
    _spread(kept, failed, max_points)
    return [points[i] for i in sorted(kept)], True


def window_increase(chain: Sequence[Series]) -> Totals:
    """Sum of per-series increases between consecutive snapshots of `chain`."""
    totals = Totals()
    for step in interval_increases(chain):
        totals.absorb(step)
    return totals


def derived(totals: Totals) -> ResultData:
    """The AISBench `data` block of a window's increases (drafts must be positive).

    Every figure is the full float, as the real AISBench writes its files (per-position rates
    too: `0.951417004048583`); only displays (the console block, the dashboard) round them.
    """
    return ResultData(
        num_drafts=as_number(totals.num_drafts),
        draft_tokens=as_number(totals.num_draft_tokens),
        accepted_tokens=as_number(totals.num_accepted_tokens),
        acceptance_rate=totals.num_accepted_tokens / totals.num_draft_tokens * 100,
        acceptance_length=1 + totals.num_accepted_tokens / totals.num_drafts,
        per_position_acceptance_rates={
            str(pos): accepted / totals.num_drafts
            for pos, accepted in sorted(totals.accepted_per_pos.items())
        },
    )


def has_spec_decoding(series: Series) -> bool:
    """Whether a reading holds a spec-decode series, not only the witnesses every server has."""
    return any(key.role not in WITNESSES for key in series)


def reading_error(phase: Reading) -> str | None:
    """The error of a reading: its failed scrape's text, or that it held no spec-decode series
    (a server without spec decoding shows its witnesses only)."""
    if isinstance(phase, Failure):
        return phase.text
    return None if has_spec_decoding(phase) else NO_METRICS


TIMELINE_FIELDS = (
    "taken_at",
    "phase",
    "status",
    "error",
    "num_drafts",
    "draft_tokens",
    "accepted_tokens",
    "acceptance_rate",
    "acceptance_length",
    "per_position_acceptance_rates",
    "restarts",
    "series_resets",
)


def timeline(points: Sequence[tuple[Any, str, Reading]]) -> list[dict[str, Any]]:
    """One row per snapshot of a target, in the order given (`before`, samples, `after`).

    `num_drafts`, `draft_tokens` and `accepted_tokens` are cumulative since `before` (null when
    `before` failed); the rates, the acceptance length, `restarts` and `series_resets` are those
    of the interval since the previous good snapshot (null where that interval has no drafts).
    A failed scrape is a row with its error and nulls: the gap shows as a gap.
    """
    rows: list[dict[str, Any]] = []
    for taken_at, phase, outcome in points:
        row: dict[str, Any] = dict.fromkeys(TIMELINE_FIELDS)
        error = reading_error(outcome)
        row.update(taken_at=taken_at, phase=phase, status="error" if error else "ok", error=error)
        rows.append(row)
    good = [
        (row, outcome)
        for row, (_, _, outcome) in zip(rows, points, strict=True)
        if row["status"] == "ok" and not isinstance(outcome, Failure)
    ]
    if not good:
        return rows
    # Totals count from `before` only; a chain whose `before` failed has none.
    cumulative = Totals() if good[0][0]["phase"] == SnapshotPhase.BEFORE else None
    steps = interval_increases([outcome for _, outcome in good])
    for (row, _), step in zip(good[1:], steps, strict=True):
        row["restarts"] = step.restarts
        row["series_resets"] = step.series_resets
        if step.num_drafts > 0 and step.num_draft_tokens > 0:
            rates = derived(step)
            row["acceptance_rate"] = rates.acceptance_rate
            row["acceptance_length"] = rates.acceptance_length
            row["per_position_acceptance_rates"] = rates.per_position_acceptance_rates
        if cumulative is not None:
            cumulative.absorb(step)
            _put_cumulative(row, cumulative)
    if cumulative is not None:
        _put_cumulative(good[0][0], Totals())
    return rows


def _put_cumulative(row: dict[str, Any], totals: Totals) -> None:
    row["num_drafts"] = as_number(totals.num_drafts)
    row["draft_tokens"] = as_number(totals.num_draft_tokens)
    row["accepted_tokens"] = as_number(totals.num_accepted_tokens)
