"""Windows per second with one replica and with two on the same PostgreSQL, in one run; then
how long the windows' sampling pauses when the replica that samples them is killed.

Each window is a start and a stop against 4 real `/metrics` servers (one-instance payloads).
32 concurrent clients run for 15 s against replica A alone, then spread over A and B.
On SPECDEC_TEST_POSTGRES_URL, else on the suite's throwaway PostgreSQL.
"""

import asyncio
import itertools
import tempfile
import time
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

import httpx

from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.support.collector import CollectorProcess, run_collector
from tests.support.postgres import fresh_schema, postgres_server

CLIENTS, SECONDS, TARGETS = 32, 15.0, 4
# Takeover: this many windows sampled at this interval by replica a, which is then killed.
TAKEOVER_WINDOWS, TAKEOVER_INTERVAL_S = 3, 0.5


async def load(base_urls: list[str], targets: list[str], label: str) -> float:
    counter = itertools.count()
    done = 0
    deadline = time.monotonic() + SECONDS

    async def client(index: int) -> None:
        nonlocal done
        async with httpx.AsyncClient(timeout=60) as http:
            while time.monotonic() < deadline:
                window_id = f"{label}-{next(counter)}"
                base = base_urls[index % len(base_urls)]
                started = await http.post(
                    f"{base}/windows/{window_id}/start", json={"targets": targets}
                )
                stopped = await http.post(f"{base}/windows/{window_id}/stop")
                assert started.status_code == 201 and stopped.status_code == 200, (
                    started.text,
                    stopped.text,
                )
                done += 1

    began = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(CLIENTS)))
    return done / (time.monotonic() - began)


def _samples(base_url: str, window_id: str) -> list[float]:
    answer = httpx.get(f"{base_url}/windows/{window_id}/samples", timeout=30).json()
    return [
        datetime.fromisoformat(point["taken_at"]).timestamp()
        for point in answer["series"][0]["points"]
        if point["phase"] == "sample"
    ]


def takeover_gap(a: CollectorProcess, b: CollectorProcess, target: str) -> float:
    """The longest pause in any window's samples across the kill of `a`, which sampled them,
    until `b` took them over (b's lease scan and the lease's length decide it)."""
    windows = [f"takeover-{index}" for index in range(TAKEOVER_WINDOWS)]
    body = {"targets": [target], "sample_interval_s": TAKEOVER_INTERVAL_S}
    for window_id in windows:
        assert httpx.post(f"{a.base_url}/windows/{window_id}/start", json=body).status_code == 201
    time.sleep(5 * TAKEOVER_INTERVAL_S)
    a.kill()
    killed_at = time.time()
    while not all(
        any(t > killed_at for t in _samples(b.base_url, w)) for w in windows
    ):  # fmt: skip
        time.sleep(TAKEOVER_INTERVAL_S)
    gaps = []
    for window_id in windows:
        samples = _samples(b.base_url, window_id)
        before = max(t for t in samples if t < killed_at)
        gaps.append(min(t for t in samples if t > killed_at) - before)
        httpx.post(f"{b.base_url}/windows/{window_id}/stop", timeout=30)
    return max(gaps)


def measure() -> list[Figure]:
    with (
        postgres_server() as server,
        fresh_schema(server) as database_url,
        tempfile.TemporaryDirectory() as folder,
        ExitStack() as stack,
    ):
        logs = [Path(folder) / name for name in ("a", "b")]
        for log in logs:
            log.mkdir()
        # The service's capacity, not the team's budget: one team, one address (two replicas
        # read more than its default 500 targets a second on an idle machine).
        unbudgeted = {"SPECDEC_MAX_TARGET_READS_PER_SECOND_PER_TEAM": "1e9"}
        a = stack.enter_context(
            run_collector(database_url, logs[0], SPECDEC_REPLICA_ID="a", **unbudgeted)
        )
        b = stack.enter_context(
            run_collector(database_url, logs[1], SPECDEC_REPLICA_ID="b", **unbudgeted)
        )
        targets = stack.enter_context(run_farm(TARGETS, "vllm_v1_dp1_k5.txt"))
        one = asyncio.run(load([a.base_url], targets, "one"))
        two = asyncio.run(load([a.base_url, b.base_url], targets, "two"))
        gap = takeover_gap(a, b, targets[0])
    limit = 2 * TAKEOVER_INTERVAL_S + 0.5
    return [
        Figure(
            f"windows/s (start + stop, {TARGETS} targets, {CLIENTS} clients, {SECONDS:.0f} s) "
            "on one PostgreSQL, 1 replica then 2",
            f"{one:.1f} then {two:.1f}: **{two / one:.2f} x** (each replica is one process)",
            "",
            None,
            "python -m tests.bench.bench_replicas",
        ),
        Figure(
            f"sampling's pause when its replica is killed ({TAKEOVER_WINDOWS} windows at "
            f"{TAKEOVER_INTERVAL_S:g} s; the other replica takes them over)",
            f"{gap:.2f} s",
            f"≤ {limit:g} s (two intervals and the lease scan's step)",
            gap <= limit,
            "python -m tests.bench.bench_replicas",
        ),
    ]


if __name__ == "__main__":
    show(measure())
