"""Sampler capacity: 500 targets sampled every second (one-instance payloads) for 60 s; and
what one window of one target sampled every 0.25 s costs beside an idle collector.

The real `specdec serve` (SQLite) samples 50 windows of 10 targets each at 1 s; the targets
are served by a separate process. Afterwards the stored samples are read from the database.

A scheduled sample is "on time" when it was taken at most half an interval late: its gap to
the target's previous snapshot is at most 1.5 intervals (a run that came late or was missed
leaves a longer gap). The figure is on-time samples over the samples a 1 s schedule has in
the 60 s (per target, 60), and the collector's CPU seconds per wall second (its cores).
"""

import os
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, create_engine, event, text

from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.support.collector import run_collector, serve_collector
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import InstanceCounters, vllm_payload

WINDOWS, TARGETS_PER_WINDOW, INTERVAL_S = 50, 10, 1.0
SECONDS = float(os.environ.get("BENCH_SAMPLER_SECONDS", "60"))
# How long the collector's CPU is read with no window open, before the windows start.
IDLE_SECONDS = 20.0
# Then with one window of one target sampled this often, for this long: what watching one
# engine costs the machine it may share with the collector (`bench_observer`).
ONE_INTERVAL_S, ONE_SECONDS = 0.25, 30.0


def on_time_share(database_url: str, begin: datetime, end: datetime, targets: int) -> float:
    """On-time samples taken in [begin, end) over the number the schedule has in that span."""
    engine = create_engine(database_url)
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT target_id, taken_at FROM snapshot ORDER BY target_id, taken_at, id")
        ).all()
    engine.dispose()
    previous: dict[int, datetime] = {}
    on_time: dict[int, int] = {}
    for target_id, taken in rows:
        taken_at = datetime.fromisoformat(taken) if isinstance(taken, str) else taken
        taken_at = taken_at.replace(tzinfo=None)
        last = previous.get(target_id)
        previous[target_id] = taken_at
        if last is None or not begin <= taken_at < end:
            continue
        if (taken_at - last).total_seconds() <= 1.5 * INTERVAL_S:
            on_time[target_id] = on_time.get(target_id, 0) + 1
    per_target = (end - begin).total_seconds() / INTERVAL_S
    # Samples closer together than the schedule would count twice: at most the schedule's.
    return sum(min(count, per_target) for count in on_time.values()) / (targets * per_target)


def measure() -> list[Figure]:
    count = WINDOWS * TARGETS_PER_WINDOW
    with (
        tempfile.TemporaryDirectory() as folder,
        run_farm(count, "vllm_v1_dp1_k5.txt") as targets,
    ):
        database_url = f"sqlite:///{Path(folder) / 'sampler.db'}"
        with (
            # One team samples all 500 targets: past the default budget of 200 per second.
            run_collector(
                database_url, Path(folder), SPECDEC_MAX_SCRAPES_PER_SECOND_PER_TEAM="1000"
            ) as collector,
            httpx.Client(base_url=collector.base_url, timeout=60) as api,
        ):
            time.sleep(2)  # its start-up done
            idle_before = collector.cpu_seconds()
            time.sleep(IDLE_SECONDS)
            idle = (collector.cpu_seconds() - idle_before) / IDLE_SECONDS
            body = {"targets": targets[:1], "sample_interval_s": ONE_INTERVAL_S}
            assert api.post("/windows/one/start", json=body).status_code == 201
            time.sleep(2 * ONE_INTERVAL_S)  # its first run done: the connection is open
            one_before = collector.cpu_seconds()
            time.sleep(ONE_SECONDS)
            one = (collector.cpu_seconds() - one_before) / ONE_SECONDS
            assert api.post("/windows/one/stop").status_code == 200
            for index in range(WINDOWS):
                chosen = targets[index * TARGETS_PER_WINDOW : (index + 1) * TARGETS_PER_WINDOW]
                body = {"targets": chosen, "sample_interval_s": INTERVAL_S}
                started = api.post(f"/windows/s{index}/start", json=body)
                assert started.status_code == 201, started.text
            time.sleep(2 * INTERVAL_S)  # every job has run once: connections are open
            begin, cpu_before = datetime.utcnow(), collector.cpu_seconds()
            time.sleep(SECONDS)
            end, cpu_used = datetime.utcnow(), collector.cpu_seconds() - cpu_before
            for index in range(WINDOWS):
                assert api.post(f"/windows/s{index}/stop").status_code == 200
        share = on_time_share(database_url, begin, end, count)
    cores = cpu_used / (end - begin).total_seconds()
    renewals, samples = renewals_apart()
    return [
        Figure(
            f"sampler: {count} targets every {INTERVAL_S:g} s for {SECONDS:.0f} s "
            f"({WINDOWS} windows x {TARGETS_PER_WINDOW}, one-instance payloads, SQLite)",
            f"**{share:.1%} on time**, collector CPU **{cores:.2f} cores**",
            "≥ 95 % on time, ≤ 1 core",
            share >= 0.95 and cores <= 1.0,
            "python -m tests.bench.bench_sampler",
        ),
        Figure(
            f"an idle collector (no window open) over {IDLE_SECONDS:.0f} s: its lease scan four "
            "times a second, the HTTP server's ticks",
            f"**{idle * 1e3:.1f} ms of CPU a second**",
            command="python -m tests.bench.bench_sampler",
        ),
        Figure(
            f"one window of one target (one-instance payload) sampled every {ONE_INTERVAL_S:g} s, "
            f"over {ONE_SECONDS:.0f} s",
            f"**{one * 1e3:.1f} ms of CPU a second**: "
            f"{(one - idle) * ONE_INTERVAL_S * 1e3:.1f} ms a sample more than idle",
            command="python -m tests.bench.bench_sampler",
        ),
        Figure(
            f"lease renewals written apart from a sample: one window sampled every "
            f"{ONE_INTERVAL_S:g} s, {samples} samples (the first run renews apart; a late one too)",
            f"**{renewals}**",
            "≤ 2",
            renewals <= 2,
            "python -m tests.bench.bench_sampler",
        ),
    ]


def renewals_apart() -> tuple[int, int]:
    """A run on time whose scrape is short writes one transaction, its sample renewing the
    lease; counted on a collector in this process: (renewals apart, samples stored)."""
    writes: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        text = " ".join(statement.replace('"', "").split())
        if text.startswith("UPDATE window SET") and "sampler_lease_until" in text:
            writes.append("sample" if "last_sampled_at" in text else "renewal")

    with (
        tempfile.TemporaryDirectory() as folder,
        serve_metrics() as server,
        serve_collector(f"sqlite:///{Path(folder) / 'renewals.db'}") as url,
        httpx.Client(base_url=url, timeout=30) as api,
    ):
        server.set_text(vllm_payload([InstanceCounters(1000, 3000, [800, 600, 400])]))
        event.listen(Engine, "before_cursor_execute", record)
        try:
            body = {"targets": [server.target], "sample_interval_s": ONE_INTERVAL_S}
            assert api.post("/windows/once/start", json=body).status_code == 201
            time.sleep(40 * ONE_INTERVAL_S)
        finally:
            event.remove(Engine, "before_cursor_execute", record)
        api.post("/windows/once/stop")
    return writes.count("renewal"), writes.count("sample")


if __name__ == "__main__":
    show(measure())
