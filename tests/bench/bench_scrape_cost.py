"""CPU the collector spends per target scrape (HTTP, extraction, storage), against the time
prometheus_client takes merely to parse the same eight-engine payload, in one run.

The collector's CPU time is read from /proc for its process while windows of 16 eight-engine
targets (served by a separate process) are started and stopped one after another: each
window scrapes every target twice and stores both snapshots and the results.
"""

import os
import tempfile
import timeit
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.collector import run_collector
from tests.payloads import fixture

TARGETS, WINDOWS = 16, 40


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_seconds(payload: str) -> float:
    """prometheus_client's time to parse `payload` into families (best of 5 x 5)."""
    runs = timeit.repeat(lambda: list(text_string_to_metric_families(payload)), number=5, repeat=5)
    return min(runs) / 5


def cpu_per_scrape(base_url: str, pid: int, targets: list[str], windows: int) -> float:
    """The collector's CPU seconds per target scrape over `windows` start/stop pairs."""
    with httpx.Client(base_url=base_url, timeout=60) as api:
        api.post("/windows/warm/start", json={"targets": targets})  # imports, caches, connections
        api.post("/windows/warm/stop")
        before = cpu_seconds(pid)
        for index in range(windows):
            answer = api.post(f"/windows/w{index}/start", json={"targets": targets})
            assert answer.status_code == 201, answer.text
            assert api.post(f"/windows/w{index}/stop").status_code == 200
        used = cpu_seconds(pid) - before
    return used / (windows * len(targets) * 2)


def measure() -> list[Figure]:
    name = "vllm_v1_dp8_k5.txt"
    parse = parse_seconds(fixture(name))
    with (
        tempfile.TemporaryDirectory() as folder,
        run_collector(f"sqlite:///{Path(folder) / 'cost.db'}", Path(folder)) as collector,
        run_farm(TARGETS, name) as targets,
    ):
        assert collector.process is not None
        per_scrape = cpu_per_scrape(collector.base_url, collector.process.pid, targets, WINDOWS)
    return [
        Figure(
            "collector CPU per target scrape (HTTP, extraction, storage), eight-engine payload",
            f"{per_scrape * 1e3:.2f} ms vs prometheus_client's parse {parse * 1e3:.1f} ms: "
            f"**{per_scrape / parse:.3f} x**",
            "≤ 0.1 x",
            per_scrape / parse <= 0.1,
            "python -m tests.bench.bench_scrape_cost",
        )
    ]


if __name__ == "__main__":
    show(measure())
