"""A team's limits hold under concurrent starts, on both databases: the open windows, and the
background scrapes of its sampled windows (PostgreSQL counted committed rows only, and let
150 concurrent starts leave 118 windows open under a limit of 100)."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.support import clients
from tests.support.collector import serve_collector
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import drafts_payload

STARTS = 40


def _start_all(collector: str, bodies: list[dict[str, object]]) -> list[int]:
    def start(index: int) -> int:
        with clients.client(base_url=collector, timeout=60) as api:
            return api.post(f"/windows/w{index}/start", json=bodies[index]).status_code

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(start, range(len(bodies))))


def test_concurrent_starts_never_open_more_windows_than_the_limit(database_url: str) -> None:
    with (
        serve_metrics(body=drafts_payload(1)) as server,
        serve_collector(database_url, max_open_windows_per_team=10, db_pool_size=40) as collector,
    ):
        statuses = _start_all(collector, [{"targets": [server.target]}] * STARTS)
        listed = clients.get(f"{collector}/windows", params={"state": "open", "limit": 100}).json()
    assert statuses.count(201) == 10, statuses
    assert statuses.count(429) == STARTS - 10
    assert len(listed["windows"]) == 10


def test_concurrent_sampled_starts_stay_within_the_scrape_budget(database_url: str) -> None:
    """Each window scrapes 2 targets a second; the budget is 20: ten windows at most."""
    with (
        serve_metrics(body=drafts_payload(1)) as server,
        serve_collector(
            database_url, max_scrapes_per_second_per_team=20, db_pool_size=40
        ) as collector,
    ):
        body = {"targets": [server.target], "sample_interval_s": 0.5}
        statuses = _start_all(collector, [body] * STARTS)
    assert statuses.count(201) == 10, statuses


def test_start_stop_loops_are_budgeted_and_a_stop_always_passes(tmp_path: Path) -> None:
    """10 target reads a second, 200 at once (two windows of 100 targets): a loop of
    100-target windows gets two starts, then 429; the stops of the open windows pass even
    then (on credit), and the next start waits for that credit too."""
    with (
        serve_metrics(body=drafts_payload(1)) as server,
        serve_collector(
            f"sqlite:///{tmp_path}/b.db",
            max_target_reads_per_second_per_team=10,
            max_targets_per_window=100,
        ) as collector,
    ):
        api = clients.client(base_url=collector, timeout=60)
        targets = [f"127.0.0.{i}:{server.port}" for i in range(1, 101)]
        body = {"targets": targets}
        started = [api.post(f"/windows/{w}/start", json=body).status_code for w in "ab"]
        refused = api.post("/windows/c/start", json=body)
        stopped = [api.post(f"/windows/{w}/stop").status_code for w in "ab"]
        small = api.post("/windows/d/start", json={"targets": targets[:50]}).status_code
        other_team_unaffected = api.get("/healthz").status_code
    assert started == [201, 201] and stopped == [200, 200]
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert "SPECDEC_MAX_TARGET_READS_PER_SECOND_PER_TEAM" in refused.json()["detail"]
    assert small == 429  # the stops' 200 reads are owed first
    assert other_team_unaffected == 200
