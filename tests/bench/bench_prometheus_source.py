"""Windows read from a real Prometheus: the collector's CPU against scraping, and a fleet's.

64 targets (one-instance vLLM payloads) are served by a separate process and scraped every
second by a real Prometheus; the collector's CPU time (from /proc) is read over windows started
and stopped one after another, in rounds of two: one scraping the targets itself, one reading
Prometheus, the order turning each round. The figure is the median of the rounds' ratios.

Then 1,024 servers (their spec-decode series and the companions the collector reads: the
rest of a vLLM `/metrics` would hold Prometheus' memory, not the collector's time) scraped
every 5 s: a window over all of them, started and stopped at moments Prometheus has scraped
already (the stop waits for no scrape), each stop timed as its caller waits for it.
"""

import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.bench.farm import GROWING, run_farm
from tests.bench.figures import Figure, show
from tests.support.collector import CollectorProcess, run_collector
from tests.support.prometheus_server import run_prometheus

TARGETS, ROUNDS = 64, 10
FLEET, FLEET_INTERVAL_S, FLEET_ROUNDS = 1024, 5.0, 3
COMMAND = "python -m tests.bench.bench_prometheus_source"


def _window_cpu(
    api: httpx.Client, collector: CollectorProcess, body: dict[str, Any], name: str
) -> float:
    """The collector's CPU seconds over one window of `body`, started and stopped as
    `name`."""
    before = collector.cpu_seconds()
    assert api.post(f"/windows/{name}/start", json=body).status_code == 201
    time.sleep(1.2)  # a scrape of Prometheus' inside each window
    assert api.post(f"/windows/{name}/stop").status_code == 200
    return collector.cpu_seconds() - before


def _cpu_by_round(collector: CollectorProcess, targets: list[str]) -> list[tuple[float, float]]:
    """Per round, the collector's CPU seconds over a window scraping `targets` and over one
    reading them from Prometheus: side by side, the order turning each round (a slow moment
    of the machine falls on both, or on each in turn)."""
    sources = ["scrape", "prometheus"]
    rounds = []
    with httpx.Client(base_url=collector.base_url, timeout=300) as api:
        for source in sources:  # warm: connections, statements, the catalogue
            _window_cpu(api, collector, {"targets": targets, "source": source}, f"{source}-warm")
        for index in range(ROUNDS):
            cpu = {}
            for source in sources if index % 2 == 0 else sources[::-1]:
                body = {"targets": targets, "source": source}
                cpu[source] = _window_cpu(api, collector, body, f"{source}-{index}")
            rounds.append((cpu["scrape"], cpu["prometheus"]))
    return rounds


def _scraped_by_prometheus(prometheus: str, count: int) -> bool:
    query = "count(vllm:spec_decode_num_drafts_total)"
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": query}).json()
    result = answer["data"]["result"]
    return bool(result) and int(float(result[0]["value"][1])) >= count


def _fleet_stop_seconds(folder: Path) -> tuple[float, float, int]:
    """The median seconds and collector CPU of a stop over FLEET servers, and the fewest of
    their results that were ok in a stop."""
    walls, cpus, oks = [], [], []
    with (
        run_farm(FLEET, GROWING) as targets,
        run_prometheus(targets, interval_s=FLEET_INTERVAL_S) as prometheus,
    ):
        deadline = time.monotonic() + 120
        while not _scraped_by_prometheus(prometheus, FLEET):
            assert time.monotonic() < deadline, "Prometheus never scraped the whole fleet"
            time.sleep(1)
        began = datetime.now(UTC)
        time.sleep(2 * FLEET_INTERVAL_S + 1)  # two scrapes of each after the window's start
        env = {
            "SPECDEC_PROMETHEUS_URL": prometheus,
            "SPECDEC_MAX_TARGETS_PER_WINDOW": str(FLEET),
            "SPECDEC_MAX_TARGET_READS_PER_SECOND_PER_TEAM": "1e9",
        }
        database = f"sqlite:///{Path(folder) / 'fleet.db'}"
        with (
            run_collector(database, Path(folder), **env) as collector,
            httpx.Client(base_url=collector.base_url, timeout=120) as api,
        ):
            for index in range(FLEET_ROUNDS + 1):  # the first warms the catalogue
                body = {"targets": targets, "source": "prometheus", "at": began.isoformat()}
                assert api.post(f"/windows/f{index}/start", json=body).status_code == 201
                ended = datetime.now(UTC) - timedelta(seconds=FLEET_INTERVAL_S + 1)
                cpu, clock = collector.cpu_seconds(), time.perf_counter()
                stop = api.post(f"/windows/f{index}/stop", json={"at": ended.isoformat()})
                wall = time.perf_counter() - clock
                assert stop.status_code == 200, stop.text
                if index:
                    walls.append(wall)
                    cpus.append(collector.cpu_seconds() - cpu)
                    results = [target["result"] for target in stop.json()["targets"]]
                    oks.append(sum(result["status"] == "ok" for result in results))
    return statistics.median(walls), statistics.median(cpus), min(oks)


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
            rounds = _cpu_by_round(collector, targets)
    direct = statistics.median(scraped for scraped, _ in rounds)
    through = statistics.median(read for _, read in rounds)
    ratios = [read / scraped for scraped, read in rounds]
    ratio = statistics.median(ratios)
    figures = [
        Figure(
            f"collector CPU per window of {TARGETS} targets (start + stop; {ROUNDS} rounds, "
            "one window each way, the order turning)",
            f"read from Prometheus {through * 1e3:.0f} ms vs scraping them {direct * 1e3:.0f} ms "
            f"(medians): **{ratio:.2f} x** (median of the rounds' ratios; rounds "
            f"{min(ratios):.2f}-{max(ratios):.2f})",
            "≤ 0.5 x",
            ratio <= 0.5,
            COMMAND,
        )
    ]
    with tempfile.TemporaryDirectory() as folder:
        wall, cpu, ok = _fleet_stop_seconds(Path(folder))
    figures.append(
        Figure(
            f"a window over {FLEET:,} servers read from Prometheus (the stop)",
            f"**{wall * 1e3:.0f} ms** ({cpu * 1e3:.0f} ms of collector CPU), "
            f"{ok} of {FLEET} results ok",
            "≤ 1 s",
            wall <= 1.0 and ok == FLEET,
            COMMAND,
        )
    )
    return figures


if __name__ == "__main__":
    show(measure())
