"""CPU the collector spends per target scrape (HTTP, extraction, storage), against the CPU
prometheus_client takes merely to parse the same eight-instance payload, in one run.

The collector's CPU time is read from /proc for its process while windows of 16 eight-instance
targets (served by a separate process) are started and stopped one after another: each
window scrapes every target twice and stores both snapshots and the results. After each
window this process parses the payload with prometheus_client once: both sides are CPU time,
summed over the same minutes, so a moment when the shared machine runs slow weighs on both.
(Timed apart, before and after, the yardstick moved by up to 40 % between runs, by itself.)
"""

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.support.collector import CollectorProcess, run_collector
from tests.support.payloads import fixture

TARGETS, WINDOWS = 16, 40


def parse_cpu_seconds(payload: str) -> float:
    """prometheus_client's CPU time to parse `payload` into families, once."""
    began = time.process_time()
    list(text_string_to_metric_families(payload))
    return time.process_time() - began


@dataclass(frozen=True, slots=True)
class Rounds:
    starts: list[float]  # each window's start, wall seconds
    collector_cpu: float  # the collector's CPU over all windows
    scrapes: int
    parse_cpu: list[float]  # one parse of the payload after each window

    @property
    def per_scrape(self) -> float:
        return self.collector_cpu / self.scrapes

    @property
    def parse(self) -> float:
        return statistics.fmean(self.parse_cpu)


def run_windows(
    collector: CollectorProcess, targets: list[str], rounds: int, label: str, payload: str = ""
) -> Rounds:
    """`rounds` start/stop pairs of windows of `targets`, each followed by a parse of `payload`
    (none if empty) by prometheus_client in this process.

    Each window scrapes every target twice and stores both snapshots and the results.
    """
    starts, parses = [], []
    with httpx.Client(base_url=collector.base_url, timeout=120) as api:
        api.post(f"/windows/{label}-warm/start", json={"targets": targets})  # caches, connections
        api.post(f"/windows/{label}-warm/stop")
        # Read once around all rounds (the collector idles while this process parses): /proc
        # counts in 10 ms ticks, too coarse for one window.
        before = collector.cpu_seconds()
        for index in range(rounds):
            began = time.perf_counter()
            answer = api.post(f"/windows/{label}-{index}/start", json={"targets": targets})
            starts.append(time.perf_counter() - began)
            assert answer.status_code == 201, answer.text
            assert api.post(f"/windows/{label}-{index}/stop").status_code == 200
            if payload:
                time.sleep(0.05)
                parses.append(parse_cpu_seconds(payload))
        used = collector.cpu_seconds() - before
    return Rounds(starts, used, rounds * len(targets) * 2, parses)


def measure() -> list[Figure]:
    name = "vllm_v1_dp8_k5.txt"
    payload = fixture(name)
    with (
        tempfile.TemporaryDirectory() as folder,
        run_collector(f"sqlite:///{Path(folder) / 'cost.db'}", Path(folder)) as collector,
        run_farm(TARGETS, name) as targets,
    ):
        large = run_windows(collector, targets, WINDOWS, "w", payload)
        # Windows of 4 targets: 8 scrapes and 2 calls each, the calls' own cost included.
        small = run_windows(collector, targets[:4], WINDOWS, "small", payload)
    per_window = small.collector_cpu / WINDOWS
    yardstick = (
        "prometheus_client's parse of the payload {ms:.1f} ms CPU (mean of {n}, one after each "
        "window)"
    )
    return [
        Figure(
            "collector CPU per target scrape (HTTP, extraction, storage), eight-instance payload",
            f"{large.per_scrape * 1e3:.2f} ms vs "
            + yardstick.format(ms=large.parse * 1e3, n=len(large.parse_cpu))
            + f": **{large.per_scrape / large.parse:.3f} x**",
            "≤ 0.03 x",
            large.per_scrape / large.parse <= 0.03,
            "python -m tests.bench.bench_scrape_cost",
        ),
        Figure(
            "collector CPU per window of 4 eight-instance targets (start + stop: 8 scrapes, 2 calls)",
            f"{per_window * 1e3:.1f} ms vs 8 x "
            + yardstick.format(ms=small.parse * 1e3, n=len(small.parse_cpu))
            + f": **{per_window / (8 * small.parse):.3f} x**",
            "≤ 0.04 x",
            per_window / (8 * small.parse) <= 0.04,
            "python -m tests.bench.bench_scrape_cost",
        ),
    ]


if __name__ == "__main__":
    show(measure())
