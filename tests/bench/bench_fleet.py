"""A direct window over a fleet: 1,024 targets that each answer after 200 ms.

The real `specdec serve` (SQLite, windows of up to 1,024 targets allowed, no team read budget)
and 1,024 `/metrics` servers in a separate process (one-instance payloads). Each round starts
a 1,024-target window (timed, with the collector's CPU over it), then stops it (untimed). The
memory figure is the collector's resident memory grown by opening windows of the fleet and
keeping them open, per window.

The yardstick, in the same rounds: a bare aiohttp client on uvloop (the collector's HTTP client
and event loop) that GETs the same 1,024 answers on kept-alive connections and reads their
bodies, with nothing else; and the same with the collector's extraction of each answer. Its
time is the least any reading of the fleet by this client on this machine can take.
"""

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
import uvloop

from specdec_collector.core.exposition import ExtractionLimits
from specdec_collector.sources.scrape.caches import EndpointCaches
from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.support.collector import run_collector

TARGETS, DELAY_S, ROUNDS, KEPT_OPEN = 1024, 0.2, 5, 4
COMMAND = "python -m tests.bench.bench_fleet"
LIMITS = ExtractionLimits()


class BareClient:
    """The yardstick: a bare aiohttp client on uvloop reading every answer of the fleet (and
    extracting each with its endpoint's cache, as the collector does)."""

    def __init__(self, targets: list[str]) -> None:
        self._urls = [f"http://{target}/metrics" for target in targets]
        self._caches = EndpointCaches()
        self._runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
        self._session: aiohttp.ClientSession | None = None

    async def _read_all(self, extract: bool) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        session = self._session

        async def read(url: str) -> None:
            async with session.get(url) as answer:
                body = await answer.read()
            if extract:
                self._caches.extract(url, body.decode(), LIMITS)

        await asyncio.gather(*(read(url) for url in self._urls))

    def seconds(self, extract: bool) -> float:
        """Seconds one reading of every answer took (each extracted, if `extract`)."""
        began = time.perf_counter()
        self._runner.run(self._read_all(extract))
        return time.perf_counter() - began

    def close(self) -> None:
        if self._session is not None:
            self._runner.run(self._session.close())
        self._runner.close()


def measure() -> list[Figure]:
    starts, cpus, bare, extracted = [], [], [], []
    with (
        tempfile.TemporaryDirectory() as folder,
        run_farm(TARGETS, "vllm_v1_dp1_k5.txt", DELAY_S) as targets,
        run_collector(
            f"sqlite:///{Path(folder) / 'fleet.db'}",
            Path(folder),
            SPECDEC_MAX_TARGETS_PER_WINDOW=str(TARGETS),
            SPECDEC_MAX_TARGET_READS_PER_SECOND_PER_TEAM="1e9",
        ) as collector,
        httpx.Client(base_url=collector.base_url, timeout=120) as api,
    ):
        body = {"targets": targets}
        yardstick = BareClient(targets)
        for index in range(ROUNDS + 1):  # the first warms the connections and the catalogue
            cpu = collector.cpu_seconds()
            began = time.perf_counter()
            answer = api.post(f"/windows/fleet-{index}/start", json=body)
            took = time.perf_counter() - began
            used = collector.cpu_seconds() - cpu
            assert answer.status_code == 201, answer.text
            assert api.post(f"/windows/fleet-{index}/stop").status_code == 200
            # Side by side: the yardstick's reading after each start (its first opens its
            # connections, as the collector's first start does).
            bare_s, extracted_s = yardstick.seconds(False), yardstick.seconds(True)
            if index:
                starts.append(took)
                cpus.append(used)
                bare.append(bare_s)
                extracted.append(extracted_s)
        yardstick.close()
        time.sleep(1)
        before = collector.resident_bytes()
        for index in range(KEPT_OPEN):
            assert api.post(f"/windows/open-{index}/start", json=body).status_code == 201
        time.sleep(1)
        grown = (collector.resident_bytes() - before) / KEPT_OPEN
    start, cpu = statistics.median(starts), statistics.median(cpus) / TARGETS
    floor, floor_read = statistics.median(bare), statistics.median(extracted)
    return [
        Figure(
            f"window start, {TARGETS} targets that each answer after {DELAY_S * 1000:.0f} ms",
            f"median {start:.3f} s = **{start / DELAY_S:.2f} x {DELAY_S * 1000:.0f} ms**, "
            f"collector CPU {cpu * 1e3:.2f} ms per target (median of {ROUNDS}, known servers)",
            f"≤ 1.5 x {DELAY_S * 1000:.0f} ms at ≤ 0.7 ms CPU per target",
            start <= 1.5 * DELAY_S and cpu <= 0.7e-3,
            COMMAND,
        ),
        Figure(
            f"yardstick: a bare aiohttp client reading the same {TARGETS} answers",
            f"median {floor:.3f} s = **{floor / DELAY_S:.2f} x {DELAY_S * 1000:.0f} ms**; "
            f"extracting each too: {floor_read:.3f} s = {floor_read / DELAY_S:.2f} x "
            f"(the collector's start: {start / floor:.2f} x the bare client's)",
            "",
            None,
            COMMAND,
        ),
        Figure(
            f"memory per open {TARGETS}-target window (collector's resident memory)",
            f"**{grown / 2**20:.1f} MiB** (grown over {KEPT_OPEN} windows kept open)"
            if grown >= 0
            # The allocator gave back more than the windows took: no figure, only the noise.
            else f"**below the noise**: resident memory fell by {-grown / 2**20:.1f} MiB a "
            f"window over {KEPT_OPEN} windows kept open (what the allocator gave back)",
            "",
            None,
            COMMAND,
        ),
    ]


if __name__ == "__main__":
    show(measure())
