"""Load on SQLite: 200 concurrent clients starting, reading and stopping windows for 30 s
against 20 real targets. Prints the request rate and p50/p99 latency per call, and checks
that no call failed with a 5xx and every window ended closed.
"""

import asyncio
import itertools
import statistics
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path

import httpx

from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.collector import run_collector

CLIENTS, SECONDS, TARGETS = 200, 30.0, 20


def measure() -> list[Figure]:
    latencies: dict[str, list[float]] = defaultdict(list)
    statuses: list[int] = []
    transport_errors: list[str] = []
    windows: list[str] = []
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        collector = stack.enter_context(
            run_collector(
                f"sqlite:///{Path(folder) / 'load.db'}",
                Path(folder),
                SPECDEC_MAX_OPEN_WINDOWS_PER_TEAM=str(CLIENTS),  # one open window per client
            )
        )
        targets = stack.enter_context(run_farm(TARGETS, "vllm_v1_dp1_k5.txt"))
        counter = itertools.count()

        async def client(http: httpx.AsyncClient) -> None:
            deadline = time.monotonic() + SECONDS
            while time.monotonic() < deadline:
                window_id = f"load-{next(counter)}"
                calls = [
                    (
                        "start",
                        "POST",
                        f"/windows/{window_id}/start",
                        {"targets": targets[: 1 + len(windows) % TARGETS]},
                    ),
                    ("read", "GET", f"/windows/{window_id}", None),
                    ("stop", "POST", f"/windows/{window_id}/stop", None),
                    ("report", "GET", f"/windows/{window_id}/report", None),
                ]
                for name, method, path, body in calls:
                    began = time.perf_counter()
                    for _ in range(3):  # every call is idempotent: a retry is safe
                        try:
                            answer = await http.request(method, path, json=body)
                            break
                        except httpx.TransportError:
                            transport_errors.append(name)
                    else:
                        statuses.append(0)
                        break
                    latencies[name].append(time.perf_counter() - began)
                    statuses.append(answer.status_code)
                windows.append(window_id)

        async def run() -> float:
            # Idle connections expire before uvicorn's 5 s keep-alive timeout closes them: a
            # request sent on a connection the server is closing fails (ReadError).
            limits = httpx.Limits(max_connections=CLIENTS, keepalive_expiry=2)
            async with httpx.AsyncClient(
                base_url=collector.base_url, timeout=120, limits=limits
            ) as http:
                began = time.monotonic()
                await asyncio.gather(*(client(http) for _ in range(CLIENTS)))
                return time.monotonic() - began

        elapsed = asyncio.run(run())
        with httpx.Client(base_url=collector.base_url, timeout=60) as api:
            states = [api.get(f"/windows/{w}").json() for w in windows]
            open_left = [state for state in states if state.get("state") != "closed"]
            if open_left:
                print("not closed:", open_left[:3])
    errors = [s for s in statuses if s >= 500]
    cuts = {name: statistics.quantiles(values, n=100) for name, values in latencies.items()}
    spread = ", ".join(f"{name} {cut[49]:.2f}/{cut[98]:.2f} s" for name, cut in cuts.items())
    return [
        Figure(
            f"load on SQLite: {CLIENTS} clients x {SECONDS:.0f} s starting, reading, stopping and "
            f"reporting windows of 1-{TARGETS} targets",
            f"{len(statuses) / elapsed:.0f} calls/s, {len(errors)} 5xx, {len(open_left)} of "
            f"{len(windows)} windows left open, {len(transport_errors)} connection errors "
            f"(retried; {statuses.count(0)} calls failed thrice); p50/p99 {spread}",
            "no 5xx, every window closed",
            not errors and not open_left and 0 not in statuses,
            "python -m tests.bench.bench_load",
        )
    ]


if __name__ == "__main__":
    show(measure())
