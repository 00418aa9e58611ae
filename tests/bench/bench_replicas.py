"""Windows per second with one replica and with two on the same PostgreSQL, in one run.

Each window is a start and a stop against 4 real `/metrics` servers (one-instance payloads).
32 concurrent clients run for 15 s against replica A alone, then spread over A and B.
On SPECDEC_TEST_POSTGRES_URL, else on the suite's throwaway PostgreSQL.
"""

import asyncio
import itertools
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.support.collector import run_collector
from tests.support.postgres import fresh_schema, postgres_server

CLIENTS, SECONDS, TARGETS = 32, 15.0, 4


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
    return [
        Figure(
            f"windows/s (start + stop, {TARGETS} targets, {CLIENTS} clients, {SECONDS:.0f} s) "
            "on one PostgreSQL, 1 replica then 2",
            f"{one:.1f} then {two:.1f}: **{two / one:.2f} x** (each replica is one process)",
            "",
            None,
            "python -m tests.bench.bench_replicas",
        )
    ]


if __name__ == "__main__":
    show(measure())
