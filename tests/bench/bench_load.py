"""Load: 200 clients start, read, stop and report windows of 1-20 real targets for 30 s, with
the collector on SQLite serving in one process and then in two (`--workers 2`), then in one
process on PostgreSQL (SPECDEC_TEST_POSTGRES_URL, else the suite's throwaway server).

The client runs in a process of its own (`tests.bench.load_client`), so the collector's CPU
(read from /proc for it and its workers) is its own. Per run: calls/s, windows/s, p50/p99 of
each call, the cores the collector used, 5xx answers, and a check in the database that every
window the clients started was closed with a result for each target.

`python -m tests.bench.bench_load --postgres-away-ms 3`: only the PostgreSQL run, through a
forwarder that adds 3 ms to each round trip to it (a database on another host).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.support.collector import run_collector
from tests.support.delay_proxy import postgres_farther
from tests.support.postgres import fresh_schema, postgres_server

CLIENTS, SECONDS, TARGETS = 200, 30.0, 20
COMMAND = "python -m tests.bench.bench_load"
TARGET = "p99 stop ≤ 1.5 x p99 start, both ≤ 2 s; no 5xx, every window closed with its results"


@dataclass(frozen=True)
class LoadRun:
    workers: int
    database: str  # sqlite, postgresql
    seconds: float
    calls: int
    windows: int
    latencies: dict[str, list[float]]
    server_errors: int
    failed_calls: int
    cores: float  # collector CPU seconds per second of the run
    client_cores: float
    machine_cores: float  # every process of the machine (collector, client, targets, others)
    started: int  # windows in the database
    open_left: int
    without_result: int  # targets of closed windows with no stored result

    @property
    def windows_per_s(self) -> float:
        return self.windows / self.seconds

    def p(self, call: str, percent: int) -> float:
        return statistics.quantiles(self.latencies[call], n=100)[percent - 1]

    def summary(self) -> str:
        spread = ", ".join(
            f"{name} {self.p(name, 50) * 1e3:.0f}/{self.p(name, 99) * 1e3:.0f} ms"
            for name in self.latencies
        )
        return (
            f"{self.calls / self.seconds:.0f} calls/s, {self.windows_per_s:.1f} windows/s, "
            f"collector {self.cores:.2f} cores (client {self.client_cores:.2f}, whole machine "
            f"{self.machine_cores:.2f} of {os.cpu_count()}); p50/p99 {spread}; {self.server_errors} 5xx, "
            f"{self.failed_calls} calls failed, {self.open_left} of {self.started} windows left "
            f"open, {self.without_result} results missing"
        )

    @property
    def balanced(self) -> bool:
        """`TARGET`: sound, no stop waited on much longer than a start, neither long."""
        stop, start = self.p("stop", 99), self.p("start", 99)
        return self.sound and stop <= 1.5 * start and max(stop, start) <= 2.0

    @property
    def sound(self) -> bool:
        return not (self.server_errors or self.failed_calls or self.open_left) and (
            self.without_result == 0 and self.started >= self.windows
        )


def machine_cpu_seconds() -> float:
    """CPU time every core of the machine has spent busy so far (Linux /proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


# Counted the same way on both databases ("window" is a reserved word of PostgreSQL's).
_WINDOWS_LEFT = text("""SELECT count(*), count(*) FILTER (WHERE state = 'open') FROM "window" """)
_WITHOUT_RESULT = text(
    """SELECT count(*) FROM window_target JOIN "window" ON "window".id = window_pk """
    """WHERE "window".state = 'closed' AND window_target.result IS NULL"""
)


def load_run(
    workers: int,
    on_postgres: bool = False,
    database_away_s: float = 0,
    settings: Mapping[str, str] | None = None,
) -> LoadRun:
    """One run; `database_away_s`, the round trip a forwarder adds to PostgreSQL's;
    `settings`, the collector's environment beside the run's own."""
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        if on_postgres:
            database_url = stack.enter_context(fresh_schema(stack.enter_context(postgres_server())))
            if database_away_s:
                farther = postgres_farther(database_url, database_away_s / 2)
                database_url = stack.enter_context(farther)
        else:
            database_url = f"sqlite:///{Path(folder) / 'load.db'}"
        with (
            run_collector(
                database_url,
                Path(folder),
                SPECDEC_WORKERS=str(workers),
                SPECDEC_MAX_OPEN_WINDOWS_PER_TEAM=str(CLIENTS),  # one open window per client
                # The service's capacity, not the team's budget: one team, one address.
                SPECDEC_MAX_TARGET_READS_PER_SECOND_PER_TEAM="1e9",
                SPECDEC_MAX_CONNECTIONS_PER_CLIENT="0",
                **(settings or {}),
            ) as collector,
            run_farm(TARGETS, "vllm_v1_dp1_k5.txt") as targets,
        ):
            client = [sys.executable, "-m", "tests.bench.load_client", collector.base_url,
                      str(SECONDS), str(CLIENTS), *targets]  # fmt: skip
            before, machine_before = collector.cpu_seconds(), machine_cpu_seconds()
            done = subprocess.run(
                client, capture_output=True, text=True, check=True, timeout=SECONDS * 4 + 60
            )
            cpu = collector.cpu_seconds() - before
            machine = machine_cpu_seconds() - machine_before
        report = json.loads(done.stdout)
        engine = create_engine(database_url)
        with engine.connect() as connection:
            started, open_left = connection.execute(_WINDOWS_LEFT).one()
            without_result = connection.execute(_WITHOUT_RESULT).scalar_one()
        engine.dispose()
    statuses: dict[str, int] = report["statuses"]
    return LoadRun(
        workers=workers,
        database="postgresql" if on_postgres else "sqlite",
        seconds=report["seconds"],
        calls=sum(statuses.values()),
        windows=len(report["windows"]),
        latencies=report["latencies"],
        server_errors=sum(count for status, count in statuses.items() if int(status) >= 500),
        failed_calls=report["failed_calls"],
        cores=cpu / report["seconds"],
        client_cores=report["cpu_seconds"] / report["seconds"],
        machine_cores=machine / report["seconds"],
        started=started,
        open_left=open_left,
        without_result=without_result,
    )


def measure() -> list[Figure]:
    one, two, postgres = load_run(1), load_run(2), load_run(1, on_postgres=True)
    what = (
        f"load: {CLIENTS} clients x {SECONDS:.0f} s starting, reading, stopping and "
        f"reporting windows of 1-{TARGETS} targets (client in its own process)"
    )
    ratio = two.windows_per_s / one.windows_per_s
    return [
        Figure(f"{what}, SQLite, 1 worker", one.summary(), TARGET, one.balanced, COMMAND),
        Figure(f"{what}, SQLite, `--workers 2`", two.summary(), TARGET, two.balanced, COMMAND),
        Figure(
            f"{what}, PostgreSQL, 1 worker", postgres.summary(), TARGET, postgres.balanced, COMMAND
        ),
        Figure(
            "windows/s at 2 workers vs 1 worker (SQLite, same load, one run)",
            f"{two.windows_per_s:.1f} vs {one.windows_per_s:.1f}: **{ratio:.2f} x**",
            "≥ 1.7 x",
            ratio >= 1.7,
            COMMAND,
        ),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--postgres-away-ms"]:  # PostgreSQL only, that much farther away
        away = load_run(1, on_postgres=True, database_away_s=float(sys.argv[2]) / 1000)
        print(f"PostgreSQL {sys.argv[2]} ms away, 1 worker: {away.summary()}")
    else:
        show(measure())
