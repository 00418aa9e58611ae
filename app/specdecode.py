"""Pure spec-decode arithmetic: per-series increases with resets, sums, the result dict.

Nothing here does I/O. A phase of a window (the `before` or `after` scrape) is given either
as the extracted `Series` or as the error text of a scrape that failed.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.promtext import Series, SeriesKey, SeriesValue

NO_METRICS = "No spec decode metrics found on server"
NO_ACTIVITY = "No spec decode activity detected during benchmark window"

Phase = Series | str
"""A phase's outcome: the series read, or the error text of a failed scrape."""


@dataclass(slots=True)
class Totals:
    """Counters summed over series: absolute values, or increases over a window."""

    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)
    counter_resets: int = 0

    def add(self, key: SeriesKey, amount: float) -> None:
        """Add `amount` to the field of `key`'s family (per position for the per-pos family)."""
        if key.family == "num_drafts":
            self.num_drafts += amount
        elif key.family == "num_draft_tokens":
            self.num_draft_tokens += amount
        elif key.family == "num_accepted_tokens":
            self.num_accepted_tokens += amount
        else:
            position = _position(key)
            if position is not None:
                self.accepted_per_pos[position] = self.accepted_per_pos.get(position, 0.0) + amount

    def raw(self) -> dict[str, Any]:
        """The AISBench `raw.before` / `raw.after` shape."""
        return {
            "num_drafts": as_number(self.num_drafts),
            "num_draft_tokens": as_number(self.num_draft_tokens),
            "num_accepted_tokens": as_number(self.num_accepted_tokens),
            "accepted_per_pos": {
                str(pos): as_number(v) for pos, v in sorted(self.accepted_per_pos.items())
            },
        }


def _position(key: SeriesKey) -> int | None:
    for name, value in key.labels:
        if name == "position":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def as_number(value: float) -> int | float:
    """Counters are integers carried as floats; show them as integers when they are."""
    return int(value) if value.is_integer() else value


def absolute_totals(series: Series) -> Totals:
    """Sum each family's counters over all series of one snapshot."""
    totals = Totals()
    for key, sample in series.items():
        if sample.value is not None:
            totals.add(key, sample.value)
    return totals


def series_increase(earlier: SeriesValue | None, later: SeriesValue) -> tuple[float, bool]:
    """Increase of one series between two snapshots, and whether it was reset in between.

    Prometheus' rule: a series that fell, or whose `_created` time grew, was reset, and its
    increase is its new value. A series absent earlier starts from 0.
    """
    assert later.value is not None
    if earlier is None or earlier.value is None:
        return later.value, False
    reset = later.value < earlier.value or (
        earlier.created is not None
        and later.created is not None
        and later.created > earlier.created
    )
    return (later.value if reset else later.value - earlier.value), reset


def window_increase(chain: Sequence[Series]) -> Totals:
    """Sum of per-series increases between consecutive snapshots of `chain`.

    A series missing from one snapshot is compared, when it returns, with its last value seen,
    so a scrape that omitted it loses nothing.
    """
    totals = Totals()
    last: dict[SeriesKey, SeriesValue] = dict(chain[0]) if chain else {}
    for snapshot in chain[1:]:
        for key, sample in snapshot.items():
            amount, reset = series_increase(last.get(key), sample)
            totals.add(key, amount)
            totals.counter_resets += reset
            last[key] = sample
    return totals


def derived(totals: Totals) -> dict[str, Any]:
    """The AISBench `data` block of a window's increases (drafts must be positive)."""
    return {
        "num_drafts": as_number(totals.num_drafts),
        "draft_tokens": as_number(totals.num_draft_tokens),
        "accepted_tokens": as_number(totals.num_accepted_tokens),
        "acceptance_rate": round(totals.num_accepted_tokens / totals.num_draft_tokens * 100, 2),
        "acceptance_length": round(1 + totals.num_accepted_tokens / totals.num_drafts, 3),
        "per_position_acceptance_rates": {
            str(pos): round(accepted / totals.num_drafts, 4)
            for pos, accepted in sorted(totals.accepted_per_pos.items())
        },
    }


def _phase_error(phase: Phase) -> str | None:
    if isinstance(phase, str):
        return phase
    return NO_METRICS if not phase else None


def build_result(url: str, before: Phase, after: Phase) -> dict[str, Any]:
    """The AISBench `spec_decode_<host>_<port>.json` dict of one target over one window."""
    errors = {name: _phase_error(phase) for name, phase in (("before", before), ("after", after))}
    raw = {
        name: None if errors[name] or isinstance(phase, str) else absolute_totals(phase).raw()
        for name, phase in (("before", before), ("after", after))
    }
    result: dict[str, Any] = {"status": "na", "url": url, "error": None, "data": None, "raw": raw}
    failed = [f"[{name}] {error}" for name, error in errors.items() if error]
    if failed:
        result["error"] = "; ".join(failed)
        return result
    assert not isinstance(before, str) and not isinstance(after, str)
    totals = window_increase([before, after])
    result["counter_resets"] = totals.counter_resets
    if totals.num_draft_tokens <= 0 or totals.num_drafts <= 0:
        result["error"] = NO_ACTIVITY
        return result
    result["status"] = "ok"
    result["data"] = derived(totals)
    return result
