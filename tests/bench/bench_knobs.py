"""What each part of the collector that exists for speed buys, with the setting that turns
it off: the load of `bench_load` (one worker, the default) run with the part on and off,
alternating (on, off, off, on, ...), on the database where the part works.

A part earns its place by at least 20 % more windows a second, or 20 % less of the
collector's CPU per window (docs/performance.md, "The knobs").
"""

import os
import statistics
import sys
from dataclasses import dataclass

from tests.bench.bench_load import load_run
from tests.bench.figures import Figure, show

COMMAND = "python -m tests.bench.bench_knobs"
ROUNDS = int(os.environ.get("BENCH_KNOBS_ROUNDS", "2"))
TARGET = "≥ 1.2 x windows/s, or ≤ 0.83 x CPU a window"


@dataclass(frozen=True, slots=True)
class Knob:
    what: str
    setting: str
    off: str
    on_postgres: bool = False
    away_s: float = 0.0  # the round trip a forwarder adds to PostgreSQL's (`bench_load`)


KNOBS = [
    Knob("group commit", "SPECDEC_DB_WRITES_TOGETHER", "1"),
    Knob("group commit", "SPECDEC_DB_WRITES_TOGETHER", "1", True, 0.003),
    Knob("lookups on the event loop", "SPECDEC_DB_LOOKUPS_ON_LOOP", "false"),
    Knob("small stops computed on the event loop", "SPECDEC_STOP_ON_LOOP_READINGS", "0"),
    # Made for a database a few milliseconds away, where each statement is a round trip.
    Knob("a stop written in one statement", "SPECDEC_STOP_WRITE_AT_ONCE", "false", True, 0.003),
]


def _runs(knob: Knob) -> tuple[list[float], list[float], list[float], list[float]]:
    """Windows/s and CPU seconds a window, with the part on and off, ROUNDS runs each."""
    on_rate: list[float] = []
    on_cpu: list[float] = []
    off_rate: list[float] = []
    off_cpu: list[float] = []
    for index in range(2 * ROUNDS):
        off = index % 4 in (1, 2)  # on, off, off, on, ...
        settings = {knob.setting: knob.off} if off else {}
        run = load_run(1, knob.on_postgres, knob.away_s, settings)
        rates, cpus = (off_rate, off_cpu) if off else (on_rate, on_cpu)
        rates.append(run.windows_per_s)
        cpus.append(run.cores / run.windows_per_s)
    return on_rate, on_cpu, off_rate, off_cpu


def _figure(knob: Knob) -> Figure:
    on_rate, on_cpu, off_rate, off_cpu = (statistics.median(v) for v in _runs(knob))
    faster, cheaper = on_rate / off_rate, on_cpu / off_cpu
    database = "PostgreSQL" if knob.on_postgres else "SQLite"
    if knob.away_s:
        database += f" {knob.away_s * 1000:g} ms away"
    return Figure(
        f"{knob.what} ({database}, 1 worker): on vs `{knob.setting}={knob.off}`",
        f"{on_rate:.1f} vs {off_rate:.1f} windows/s: **{faster:.2f} x**; "
        f"{on_cpu * 1000:.1f} vs {off_cpu * 1000:.1f} ms of CPU a window: **{cheaper:.2f} x**",
        TARGET,
        faster >= 1.2 or cheaper <= 0.83,
        COMMAND,
    )


def measure(chosen: list[str] | None = None) -> list[Figure]:
    """Each knob's figure (of those whose setting is `chosen`, if given; `SETTING@pg`, only
    its PostgreSQL run)."""
    return [_figure(knob) for knob in KNOBS if not chosen or _name(knob) in chosen]


def _name(knob: Knob) -> str:
    return knob.setting + ("@pg" if knob.on_postgres else "")


if __name__ == "__main__":  # python -m tests.bench.bench_knobs [SPECDEC_SETTING[@pg] ...]
    show(measure(sys.argv[1:]))
