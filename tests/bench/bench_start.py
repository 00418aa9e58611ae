"""Window start latency with 64 targets that each answer after 200 ms.

The real `specdec serve` (SQLite) and 64 `/metrics` servers in a separate process (one-instance
payloads, 200 ms before each answer). Each round times `POST .../start` of a one-target window
and of a 64-target window, side by side, then stops both (untimed). The figure is the median
64-target start over the 200 ms one scrape takes: the fan-out's cost over a single scrape. The
first start of a fresh collector (new database, no connection, nothing compiled or cached) is
timed on five collectors started one after another, and their median is its figure.
"""

import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.support.collector import CollectorProcess, run_collector

TARGETS, DELAY_S, ROUNDS = 64, 0.2, 15
# Each one's first start; their median is the figure (one, or three, is too noisy).
FRESH_COLLECTORS = 5


def timed_start(
    collector: CollectorProcess, targets: list[str], window_id: str
) -> tuple[float, float]:
    """Seconds a start of a window of `targets` took, and the collector's CPU seconds in it.

    The window is stopped afterwards (untimed).
    """
    with httpx.Client(base_url=collector.base_url, timeout=60) as api:
        cpu = collector.cpu_seconds()
        began = time.perf_counter()
        answer = api.post(f"/windows/{window_id}/start", json={"targets": targets})
        took = time.perf_counter() - began
        cpu = collector.cpu_seconds() - cpu
        assert answer.status_code == 201, answer.text
        assert api.post(f"/windows/{window_id}/stop").status_code == 200
    return took, cpu


def first_start(targets: list[str]) -> float:
    """Seconds the first start of a fresh collector (its own new database) took: imports,
    caches and connections all cold."""
    with (
        tempfile.TemporaryDirectory() as folder,
        run_collector(f"sqlite:///{Path(folder) / 'bench.db'}", Path(folder)) as collector,
    ):
        return timed_start(collector, targets, "first")[0]


def measure() -> list[Figure]:
    with run_farm(TARGETS, "vllm_v1_dp1_k5.txt", DELAY_S) as targets:
        firsts = [first_start(targets) for _ in range(FRESH_COLLECTORS)]
        with (
            tempfile.TemporaryDirectory() as folder,
            run_collector(f"sqlite:///{Path(folder) / 'bench.db'}", Path(folder)) as collector,
        ):
            timed_start(collector, targets, "warm-up")  # its first start, counted above
            single, wide, cpu = [], [], 0.0
            for index in range(ROUNDS):
                single.append(timed_start(collector, targets[:1], f"one-{index}")[0])
                took, used = timed_start(collector, targets, f"wide-{index}")
                wide.append(took)
                cpu += used
    one, many, first = statistics.median(single), statistics.median(wide), statistics.median(firsts)
    return [
        Figure(
            f"window start, {TARGETS} targets that each answer after {DELAY_S * 1000:.0f} ms",
            f"median {many:.3f} s = **{many / DELAY_S:.2f} x {DELAY_S * 1000:.0f} ms** "
            f"(1 target: {one:.3f} s = {one / DELAY_S:.2f} x; one after another ≥ "
            f"{TARGETS * DELAY_S:.1f} s); collector CPU per {TARGETS}-target start "
            f"{cpu / ROUNDS * 1e3:.0f} ms",
            "≤ 1.25 x 200 ms",
            many <= 1.25 * DELAY_S,
            "python -m tests.bench.bench_start",
        ),
        Figure(
            f"first window start of a fresh collector, {TARGETS} targets as above",
            f"median of {FRESH_COLLECTORS} fresh collectors {first:.3f} s = "
            f"**{first / DELAY_S:.2f} x {DELAY_S * 1000:.0f} ms** "
            f"({', '.join(f'{took:.3f}' for took in firsts)} s)",
            "≤ 1.25 x 200 ms",
            first <= 1.25 * DELAY_S,
            "python -m tests.bench.bench_start",
        ),
    ]


if __name__ == "__main__":
    show(measure())
