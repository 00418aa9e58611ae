"""Growth: how start latency, cost per scrape and database size grow with targets per window
(1 -> 256) and with stored windows (10^3 -> 10^5); and listing windows at 10^5 stored.

Both on the real `specdec serve` over SQLite, targets in a separate process (one-instance
payloads, answered at once, so the collector's own time shows).

- Targets per window: windows of 1, 16, 64 and 256 targets are started and stopped; per size,
  the median start, the collector's CPU per target scrape and the database growth per window.
- Stored windows: the database is filled with closed one-target windows (copies of one real
  window, written in bulk: a start and stop each would take hours) up to 10^3, 10^4, 10^5; at
  each size, windows of 4 targets are started and stopped as above, and `GET /windows` (first
  page of 50, and filtered by a target every stored window used) is timed.
"""

import math
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import Connection, Engine

from specdec_collector.store.tables import TABLES
from tests.bench.bench_scrape_cost import run_windows
from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.support.collector import run_collector

TARGET_COUNTS = [1, 16, 64, 256]
WINDOW_COUNTS = [1_000, 10_000, 100_000]
ROUNDS = 8
COMMAND = "python -m tests.bench.bench_growth"
# In foreign-key order; the copies share the template's series (the catalogue is by endpoint).
COPIED = ("window", "window_target", "snapshot")


def database_bytes(database: Engine) -> int:
    with database.connect() as connection:
        connection.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
        pages = connection.execute(text("PRAGMA page_count")).scalar_one()
        page_size = connection.execute(text("PRAGMA page_size")).scalar_one()
    return int(pages * page_size)


def median_get(base_url: str, path: str, times: int = 20) -> float:
    latencies = []
    with httpx.Client(base_url=base_url, timeout=60) as api:
        api.get(path)
        for _ in range(times):
            began = time.perf_counter()
            answer = api.get(path)
            latencies.append(time.perf_counter() - began)
            assert answer.status_code == 200, answer.text
    return statistics.median(latencies)


def _next_id(connection: Connection, table: str) -> int:
    return int(connection.execute(select(func.max(TABLES[table].c.id))).scalar_one() or 0) + 1


def seed_windows(database: Engine, template_id: str, count: int, first: int) -> None:
    """Add `count` closed copies of window `template_id` (ids `seeded-<first>`...), in the past."""
    window_t, target_t = TABLES["window"], TABLES["window_target"]
    snapshot_t = TABLES["snapshot"]
    with database.begin() as connection:
        window = (
            connection.execute(select(window_t).where(window_t.c.window_id == template_id))
            .one()
            ._asdict()
        )
        targets = [
            row._asdict()
            for row in connection.execute(
                select(target_t).where(target_t.c.window_pk == window["id"])
            )
        ]
        target_ids = [t["id"] for t in targets]
        snapshots = [
            row._asdict()
            for row in connection.execute(
                select(snapshot_t).where(snapshot_t.c.target_id.in_(target_ids))
            )
        ]
    oldest = datetime.now(UTC) - timedelta(days=30)
    for chunk in range(0, count, 10_000):
        with database.begin() as connection:
            ids = {name: _next_id(connection, name) for name in COPIED}
            rows: dict[str, list[dict[str, Any]]] = {name: [] for name in ids}
            for index in range(chunk, min(count, chunk + 10_000)):
                started = oldest - timedelta(minutes=first + index)
                window_pk = ids["window"] + len(rows["window"])
                rows["window"].append(
                    {**window, "id": window_pk, "window_id": f"seeded-{first + index}",
                     "started_at": started, "stopped_at": started + timedelta(seconds=30)}
                )  # fmt: skip
                new_target: dict[int, int] = {}
                for target in targets:
                    new_target[target["id"]] = ids["window_target"] + len(rows["window_target"])
                    rows["window_target"].append(
                        {**target, "id": new_target[target["id"]], "window_pk": window_pk}
                    )
                for snapshot in snapshots:
                    rows["snapshot"].append(
                        {**snapshot, "id": ids["snapshot"] + len(rows["snapshot"]),
                         "target_id": new_target[snapshot["target_id"]]}
                    )  # fmt: skip
            for name in COPIED:
                connection.execute(TABLES[name].insert(), rows[name])


def _trend(points: list[tuple[int, float]]) -> str:
    """`flat`, `linear` or `sub-linear`, from the log-log slope between the last two points
    (the first points of a size sweep still carry the fixed cost of a window)."""
    (x1, y1), (x2, y2) = points[-2], points[-1]
    if y1 <= 0 or y2 <= 0:  # below the measurement's grain (clock ticks, database pages)
        return "too small to tell"
    slope = math.log(y2 / y1) / math.log(x2 / x1)
    if slope <= 0.25:
        return "flat"
    if slope >= 0.75:
        return "linear"
    return f"sub-linear (slope {slope:.2f})"


def _series(points: list[tuple[int, float]], unit: Callable[[float], str]) -> str:
    return " · ".join(f"{x:,}: {unit(y)}" for x, y in points)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _kb(size: float) -> str:
    return f"{size / 1024:.1f} KB"


#: The service's growth, not a team's budget: windows of 256 targets one after another read
#: more than the default 500 targets a second (their starts then failed, 429).
UNBUDGETED = {"SPECDEC_MAX_TARGET_READS_PER_SECOND_PER_TEAM": "1e9"}


def by_targets() -> list[Figure]:
    starts, costs, sizes = [], [], []
    with (
        tempfile.TemporaryDirectory() as folder,
        run_farm(max(TARGET_COUNTS), "vllm_v1_dp1_k5.txt") as targets,
    ):
        url = f"sqlite:///{Path(folder) / 'growth.db'}"
        with run_collector(url, Path(folder), **UNBUDGETED) as collector:
            database = create_engine(url)
            for count in TARGET_COUNTS:
                before = database_bytes(database)
                rounds = run_windows(collector, targets[:count], ROUNDS, f"t{count}")
                start, cost = statistics.median(rounds.starts), rounds.per_scrape
                starts.append((count, start))
                costs.append((count, cost))
                sizes.append((count, (database_bytes(database) - before) / (ROUNDS + 1)))
            database.dispose()
    return [
        Figure(f"growth with targets per window: {name}",
               f"{_series(points, unit)}: **{_trend(points)}**", "", None, COMMAND)
        for name, points, unit in (
            ("start latency (median)", starts, _ms),
            ("collector CPU per target scrape", costs, _ms),
            ("database growth per stopped window", sizes, _kb),
        )
    ]  # fmt: skip


def by_windows() -> list[Figure]:
    starts, costs, sizes, lists, filtered = [], [], [], [], []
    with (
        tempfile.TemporaryDirectory() as folder,
        run_farm(4, "vllm_v1_dp1_k5.txt") as targets,
    ):
        url = f"sqlite:///{Path(folder) / 'growth.db'}"
        database = create_engine(url)
        with run_collector(url, Path(folder), **UNBUDGETED) as collector:
            with httpx.Client(base_url=collector.base_url, timeout=60) as api:
                api.post("/windows/template/start", json={"targets": targets[:1]})
                api.post("/windows/template/stop")
            stored = 1
            for count in WINDOW_COUNTS:
                seed_windows(database, "template", count - stored, stored)
                stored = count
                rounds = run_windows(collector, targets, ROUNDS, f"w{count}")
                start, cost = statistics.median(rounds.starts), rounds.per_scrape
                starts.append((count, start))
                costs.append((count, cost))
                sizes.append((count, database_bytes(database) / count))
                lists.append((count, median_get(collector.base_url, "/windows")))
                filtered.append(
                    (count, median_get(collector.base_url, f"/windows?target={targets[0]}"))
                )
        database.dispose()
    listing = lists[-1][1]
    return [
        Figure(
            f"growth with stored windows: {name}",
            f"{_series(points, unit)}: **{_trend(points)}**",
            "",
            None,
            COMMAND,
        )
        for name, points, unit in (
            ("start latency, 4 targets (median)", starts, _ms),
            ("collector CPU per target scrape", costs, _ms),
            ("database size per stored window", sizes, _kb),
            ("`GET /windows?target=` (every stored window has it), first page", filtered, _ms),
        )
    ] + [
        Figure(
            f"`GET /windows` (first page of 50) at {WINDOW_COUNTS[-1]:,} stored windows",
            f"**{listing * 1e3:.1f} ms** ({_series(lists, _ms)})",
            "< 50 ms",
            listing < 0.05,
            COMMAND,
        )
    ]


def measure() -> list[Figure]:
    return by_targets() + by_windows()


if __name__ == "__main__":
    show(measure())
