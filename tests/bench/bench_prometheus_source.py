"""Collector CPU per window of 64 targets: read from Prometheus, against scraping them.

64 targets (one-instance vLLM payloads) are served by a separate process and scraped every
second by a real Prometheus; the collector's CPU time (from /proc) is read over windows started
and stopped one after another, first scraping the targets itself, then reading Prometheus.
"""

import tempfile
import time
from pathlib import Path

import httpx

from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.support.collector import CollectorProcess, run_collector
from tests.support.prometheus_server import run_prometheus

TARGETS, WINDOWS = 64, 8


def _cpu_per_window(collector: CollectorProcess, targets: list[str], source: str) -> float:
    body = {"targets": targets, "source": source}
    with httpx.Client(base_url=collector.base_url, timeout=300) as api:
        api.post(f"/windows/{source}-warm/start", json=body)
        api.post(f"/windows/{source}-warm/stop")
        before = collector.cpu_seconds()
        for index in range(WINDOWS):
            assert api.post(f"/windows/{source}-{index}/start", json=body).status_code == 201
            time.sleep(1.2)  # a scrape of Prometheus' inside each window
            assert api.post(f"/windows/{source}-{index}/stop").status_code == 200
        return (collector.cpu_seconds() - before) / WINDOWS


def _scraped_by_prometheus(prometheus: str, count: int) -> bool:
    query = "count(vllm:spec_decode_num_drafts_total)"
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": query}).json()
    result = answer["data"]["result"]
    return bool(result) and int(float(result[0]["value"][1])) >= count


def measure() -> list[Figure]:
    with (
        tempfile.TemporaryDirectory() as folder,
        run_farm(TARGETS, "vllm_v1_dp1_k5.txt") as targets,
        run_prometheus(targets) as prometheus,
    ):
        deadline = time.monotonic() + 60
        while not _scraped_by_prometheus(prometheus, TARGETS):
            assert time.monotonic() < deadline, "Prometheus never scraped every target"
            time.sleep(0.5)
        env = {"SPECDEC_PROMETHEUS_URL": prometheus}
        with run_collector(f"sqlite:///{Path(folder) / 'p.db'}", Path(folder), **env) as collector:
            direct = _cpu_per_window(collector, targets, "scrape")
            through = _cpu_per_window(collector, targets, "prometheus")
    return [
        Figure(
            f"collector CPU per window of {TARGETS} targets (start + stop)",
            f"read from Prometheus {through * 1e3:.0f} ms vs scraping them {direct * 1e3:.0f} ms: "
            f"**{through / direct:.2f} x**",
            "≤ 0.5 x",
            through <= 0.5 * direct,
            "python -m tests.bench.bench_prometheus_source",
        )
    ]


if __name__ == "__main__":
    show(measure())
