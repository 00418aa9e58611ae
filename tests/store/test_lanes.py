"""Lanes: jobs one at a time, first come first served; writes that wait together commit together."""

import asyncio
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine

from specdec_collector.core.targets import parse_target
from specdec_collector.exceptions import TooManyWindows
from specdec_collector.schemas import WindowCreate
from specdec_collector.store.db import open_database, takes_turns
from specdec_collector.store.lanes import Lane, WriteLanes
from specdec_collector.store.migrate import upgrade_database
from specdec_collector.store.transaction import RunAlone, WriteTransaction
from specdec_collector.windows.storage import add_window, load_window
from specdec_collector.windows.stored import Actor
from tests.support import clients
from tests.support.collector import serve_collector
from tests.support.databases import migrate
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import InstanceCounters, drafts_payload, vllm_payload


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'lanes.db'}"
    migrate(url)
    database = open_database(url)
    with database.begin() as connection:
        connection.execute(text("CREATE TABLE note (id INTEGER PRIMARY KEY, body TEXT UNIQUE)"))
    yield database
    database.dispose()


def _commits(database: Engine) -> list[int]:
    """A list that grows by one at each commit on `engine`."""
    seen: list[int] = []
    event.listen(database, "commit", lambda connection: seen.append(1))
    return seen


def _notes(database: Engine) -> list[str]:
    with database.connect() as connection:
        return list(connection.execute(text("SELECT body FROM note ORDER BY id")).scalars())


def _note(transaction: WriteTransaction, body: str) -> str:
    transaction.session.execute(text("INSERT INTO note (body) VALUES (:body)"), {"body": body})
    return body


class _Held:
    """A job that holds the lane's thread until released: what it queues meanwhile waits."""

    def __init__(self) -> None:
        self.running, self.release = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.running.set()
        assert self.release.wait(10)


async def _hold(lane: Lane) -> tuple[_Held, "asyncio.Future[None]"]:
    """The lane held by a job (running once this returns), and that job's future."""
    held = _Held()
    holding = asyncio.ensure_future(lane.run(held))
    await asyncio.to_thread(held.running.wait, 10)
    return held, holding


async def _while_held(lane: Lane, queue_jobs: Any) -> list[Any]:
    """Hold the lane, queue what `queue_jobs()` returns (coroutines), release, gather them."""
    held, holding = await _hold(lane)
    tasks = [asyncio.ensure_future(job) for job in queue_jobs()]
    await asyncio.sleep(0.05)  # every job is in the queue
    held.release.set()
    await holding
    return await asyncio.gather(*tasks, return_exceptions=True)


def test_a_sqlite_engine_takes_turns_and_gets_serial_lanes(database: Engine) -> None:
    assert takes_turns(database)
    assert not takes_turns(open_database("postgresql+psycopg://u@127.0.0.1:1/db"))


def test_jobs_run_in_the_order_they_came(database: Engine) -> None:
    """A stop's write waits for no start that came after it: each is what a benchmark waits
    on, and a loaded collector that served starts first kept its stops waiting longest."""
    lane = Lane("test", serial=True, database=database)
    order: list[str] = []

    def job(name: str) -> str:
        order.append(name)
        return name

    def write(transaction: WriteTransaction, name: str) -> str:
        order.append(name)
        return _note(transaction, name)

    async def main() -> list[Any]:
        return await _while_held(
            lane,
            lambda: [
                lane.write(write, "stop-1"),
                lane.run(job, "compute-1"),
                lane.write(write, "start-1"),
                lane.write(write, "stop-2"),
                lane.run(job, "compute-2"),
                lane.write(write, "start-2"),
            ],
        )

    results = asyncio.run(main())
    lane.close()
    names = ["stop-1", "compute-1", "start-1", "stop-2", "compute-2", "start-2"]
    assert results == names  # each caller gets its own
    assert order == names
    assert _notes(database) == ["stop-1", "start-1", "stop-2", "start-2"]


@pytest.mark.parametrize(("together", "commits_made"), [(64, 1), (1, 5)])
def test_writes_that_wait_together_commit_together(
    database: Engine, together: int, commits_made: int
) -> None:
    """The writes that waited share one commit; with `SPECDEC_DB_WRITES_TOGETHER=1` each has
    its own, in order."""
    lane = Lane("test", serial=True, database=database, together=together)
    commits = _commits(database)

    async def main() -> list[Any]:
        return await _while_held(lane, lambda: [lane.write(_note, f"n{i}") for i in range(5)])

    assert asyncio.run(main()) == [f"n{i}" for i in range(5)]
    lane.close()
    assert len(commits) == commits_made
    assert _notes(database) == [f"n{i}" for i in range(5)]


def test_a_domain_error_fails_its_own_write_only(database: Engine) -> None:
    """A write raises a domain error before it writes: the others keep their transaction."""
    lane = Lane("test", serial=True, database=database)
    commits = _commits(database)

    def refused(transaction: WriteTransaction) -> None:
        raise TooManyWindows("team t has 2 open windows")

    async def main() -> list[Any]:
        return await _while_held(
            lane,
            lambda: [
                lane.write(_note, "a"),
                lane.write(refused),
                lane.write(_note, "b"),
            ],
        )

    first, error, last = asyncio.run(main())
    lane.close()
    assert (first, last) == ("a", "b")
    assert isinstance(error, TooManyWindows) and str(error) == "team t has 2 open windows"
    assert len(commits) == 1
    assert _notes(database) == ["a", "b"]


def test_a_write_that_must_run_alone_runs_once_its_group_is_committed(database: Engine) -> None:
    """A write that would wait for another process's lock inside a group says so before it
    writes (`RunAlone`): the group commits without it, then it runs in a transaction alone."""
    lane = Lane("test", serial=True, database=database)
    commits = _commits(database)
    together: list[bool] = []

    def shy(transaction: WriteTransaction) -> str:
        together.append(transaction.together)
        if transaction.together:
            raise RunAlone("a lock another process holds")
        return _note(transaction, "alone")

    async def main() -> list[Any]:
        return await _while_held(
            lane, lambda: [lane.write(_note, "a"), lane.write(shy), lane.write(_note, "b")]
        )

    assert asyncio.run(main()) == ["a", "alone", "b"]
    lane.close()
    assert together == [True, False]
    assert len(commits) == 2
    assert _notes(database) == ["a", "b", "alone"]


def test_a_group_never_waits_for_a_team_lock_another_replica_holds(postgres_url: str) -> None:
    """PostgreSQL: another replica holds team `busy`'s lock. A group with a start of `busy`
    and one of `free` commits `free`'s at once; `busy`'s runs alone once the lock is free.
    (Two replicas' groups taking two teams' locks in opposite orders would deadlock.)"""
    upgrade_database(postgres_url)
    database, other = open_database(postgres_url), open_database(postgres_url)
    lane = Lane("test", serial=True, database=database)
    target = parse_target("127.0.0.1:9100")
    body = WindowCreate(targets=[target.name])

    def start(team: str) -> "asyncio.Future[Any]":
        return asyncio.ensure_future(
            lane.write(add_window, Actor(team, "k"), "w", body, [target], 10, "r", 0)
        )

    async def main(holder: Any) -> None:
        held, holding = await _hold(lane)
        busy, free = start("busy"), start("free")
        await asyncio.sleep(0.05)  # both queued: one group
        held.release.set()
        await holding
        assert (await asyncio.wait_for(free, 5)) is not None
        await asyncio.sleep(0.2)
        assert not busy.done()  # waiting for the lock, alone
        holder.rollback()  # the other replica's transaction ends
        assert (await asyncio.wait_for(busy, 5)) is not None

    try:
        with other.connect() as holder:
            holder.execute(
                text("SELECT pg_advisory_xact_lock(hashtext('specdec-team:' || :team))"),
                {"team": "busy"},
            )
            asyncio.run(main(holder))
        assert load_window(database, "free", "w").window.team == "free"
        assert load_window(database, "busy", "w").window.team == "busy"
    finally:
        lane.close()
        database.dispose()
        other.dispose()


def test_a_group_of_starts_still_counts_each_teams_windows(postgres_url: str) -> None:
    """PostgreSQL: in a group holding three starts of team `one` and one of `two` (which asks
    for each team's lock once: `bench_statements`), the open windows are still counted at each
    start, so the third start of `one` past its limit of two is refused."""
    upgrade_database(postgres_url)
    database = open_database(postgres_url)
    lane = Lane("test", serial=True, database=database)
    target = parse_target("127.0.0.1:9100")
    body = WindowCreate(targets=[target.name])

    def start(team: str, window_id: str) -> Any:
        return lane.write(add_window, Actor(team, "k"), window_id, body, [target], 2, "r", 0)

    async def main() -> list[Any]:
        return await _while_held(
            lane,
            lambda: [start("one", "a"), start("two", "a"), start("one", "b"), start("one", "c")],
        )

    try:
        one_a, two_a, one_b, one_c = asyncio.run(main())
    finally:
        lane.close()
    try:
        assert all(w is not None and not isinstance(w, Exception) for w in (one_a, two_a, one_b))
        assert isinstance(one_c, TooManyWindows)
        assert load_window(database, "one", "b").window.team == "one"
    finally:
        database.dispose()


def _keys_in_lanes(lanes: WriteLanes) -> list[tuple[str, int]]:
    """A key for each lane of `lanes` (the lane a key picks is its hash's)."""
    found: dict[int, tuple[str, int]] = {}
    for number in range(1000):
        key = ("window", number)
        found.setdefault(hash(key) % lanes.count, key)
        if len(found) == lanes.count:
            break
    return [found[index] for index in range(lanes.count)]


def test_writes_of_other_keys_run_beside_a_write_that_waits(postgres_url: str) -> None:
    """PostgreSQL, three lanes: a write that waits (for a round trip, say) holds up only its
    own lane; the writes of other keys are committed meanwhile, and a key's writes keep the
    order they came in."""
    upgrade_database(postgres_url)
    database = open_database(postgres_url)
    with database.begin() as connection:
        connection.execute(text("CREATE TABLE note (id SERIAL PRIMARY KEY, body TEXT UNIQUE)"))
    lanes = WriteLanes("test", database, 3)
    slow, other, third = _keys_in_lanes(lanes)
    others_done = threading.Event()

    def waiting(transaction: WriteTransaction, body: str) -> str:
        # Done only once both other lanes committed theirs: one lane would never get there.
        assert others_done.wait(10), "the other keys' writes waited behind this one"
        return _note(transaction, body)

    async def main() -> None:
        first = asyncio.ensure_future(lanes.write(slow, waiting, "slow-1"))
        then = asyncio.ensure_future(lanes.write(slow, _note, "slow-2"))
        await asyncio.gather(lanes.write(other, _note, "other"), lanes.write(third, _note, "third"))
        others_done.set()
        await asyncio.gather(first, then)

    try:
        asyncio.run(main())
        notes = _notes(database)
        assert set(notes[:2]) == {"other", "third"} and notes[2:] == ["slow-1", "slow-2"]
    finally:
        lanes.close()
        database.dispose()


def test_sqlite_has_one_write_lane(database: Engine) -> None:
    """SQLite takes one write at a time: more lanes would only wait for each other."""
    lanes = WriteLanes("test", database, 3)
    try:
        assert lanes.count == 1
    finally:
        lanes.close()


def test_a_failing_write_is_never_another_writes_failure(database: Engine) -> None:
    """A write that fails after writing (here a unique constraint) rolls its transaction back:
    every write of it runs again alone, and only the failing one fails."""
    lane = Lane("test", serial=True, database=database)

    async def main() -> list[Any]:
        return await _while_held(
            lane,
            lambda: [
                lane.write(_note, "a"),
                lane.write(_note, "a"),  # a second "a": refused
                lane.write(_note, "b"),
            ],
        )

    first, error, last = asyncio.run(main())
    lane.close()
    assert (first, last) == ("a", "b")
    assert "UNIQUE constraint failed: note.body" in str(error)
    assert _notes(database) == ["a", "b"]


def test_a_write_whose_caller_went_away_before_it_started_is_not_run(database: Engine) -> None:
    lane = Lane("test", serial=True, database=database)

    async def main() -> None:
        held, holding = await _hold(lane)
        gone = asyncio.ensure_future(lane.write(_note, "gone"))
        kept = asyncio.ensure_future(lane.write(_note, "kept"))
        await asyncio.sleep(0.05)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        # The lane's future is cancelled by a callback of the event loop's next turns.
        await asyncio.sleep(0.05)
        held.release.set()
        await holding
        assert await kept == "kept"

    asyncio.run(main())
    lane.close()
    assert _notes(database) == ["kept"]


def test_close_runs_the_jobs_already_queued(database: Engine) -> None:
    lane = Lane("test", serial=True, database=database)

    async def main() -> None:
        held, holding = await _hold(lane)
        writes = [asyncio.ensure_future(lane.write(_note, "last"))]
        await asyncio.sleep(0.05)
        closing = asyncio.ensure_future(asyncio.to_thread(lane.close))
        await asyncio.sleep(0.05)
        held.release.set()
        await asyncio.gather(holding, closing, *writes)

    asyncio.run(main())
    assert _notes(database) == ["last"]


def test_a_lane_that_is_not_serial_runs_each_job_at_once_in_the_request_pool() -> None:
    """A lane that is not serial (PostgreSQL's computations): no thread of its own, every job
    at once."""
    lane = Lane("test", serial=False)
    started = threading.Barrier(3, timeout=10)

    def job(name: str) -> str:
        started.wait()  # all three run at once, or this times out
        return name

    async def main() -> list[str]:
        return await asyncio.gather(*(lane.run(job, f"n{i}") for i in range(3)))

    assert sorted(asyncio.run(main())) == ["n0", "n1", "n2"]
    assert "test" not in {thread.name for thread in threading.enumerate()}
    lane.close()


def test_a_small_stop_on_sqlite_is_computed_on_the_event_loop_a_large_one_in_the_lane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unsampled window of a few targets has its results computed on the event loop (in
    the lane's thread, under load, a stop waited for the interpreter's lock several times as
    long as it ran); a sampled one's, with as many samples as it was long, in the lane."""
    used: list[str] = []
    run = Lane.run

    async def recorded(self: Lane, *args: Any, **kwargs: Any) -> Any:
        used.append(self._thread.name if self._thread else "")
        return await run(self, *args, **kwargs)

    monkeypatch.setattr(Lane, "run", recorded)

    def growing(n: int) -> bytes:  # the n-th scrape's counters: 5 drafts more each time
        counters = InstanceCounters(drafts=5 * n, draft_tokens=15 * n, accepted_per_pos=[3 * n, n])
        return vllm_payload([counters]).encode()

    with (
        serve_metrics(body_for=growing) as server,
        serve_collector(f"sqlite:///{tmp_path / 's.db'}") as collector,
        clients.client(base_url=collector, timeout=30) as api,
    ):
        body: dict[str, Any] = {"targets": [server.target]}
        assert api.post("/windows/small/start", json=body).status_code == 201
        stopped = api.post("/windows/small/stop")
        small = list(used)
        sampled = {**body, "sample_interval_s": 60}
        assert api.post("/windows/sampled/start", json=sampled).status_code == 201
        assert api.post("/windows/sampled/stop").status_code == 200
    assert stopped.status_code == 200, stopped.text
    result = stopped.json()["targets"][0]["result"]
    assert result["status"] == "ok", result["error"]
    assert "specdec-computations" not in small
    assert used.count("specdec-computations") == 1


def test_teams_starting_and_stopping_at_once_in_three_write_lanes_keep_their_results(
    postgres_url: str,
) -> None:
    """PostgreSQL, three write lanes: four teams start and stop 24 windows at once, each on a
    server of its own, whose drafts grow by a known amount between its start and its stop, and
    on one server they all share (new to the catalogue: every lane adds its series at once).
    Every window closes with its own figures; the shared server's are `na` (no activity),
    and each of them names the other windows of its team."""
    teams = [f"team-{index}" for index in range(4)]
    keys = {team: f"key-of-{team}-0123456789" for team in teams}
    api_keys = ",".join(f"{team}:write:{key}" for team, key in keys.items())
    with ExitStack() as stack:
        shared = stack.enter_context(serve_metrics(body=drafts_payload(500)))
        own = [stack.enter_context(serve_metrics(body=drafts_payload(1000))) for _ in range(24)]
        url = stack.enter_context(
            serve_collector(postgres_url, db_write_lanes=3, api_keys=api_keys)
        )

        async def window(index: int) -> dict[str, Any]:
            team = teams[index % len(teams)]
            headers = {"Authorization": f"Bearer {keys[team]}"}
            async with clients.async_client(base_url=url, headers=headers, timeout=60) as http:
                body = {"targets": [own[index].target, shared.target]}
                started = await http.post(f"/windows/w{index}/start", json=body)
                assert started.status_code == 201, started.text
                own[index].body = drafts_payload(1000 + 8 * (index + 1))
                stopped = await http.post(f"/windows/w{index}/stop")
                assert stopped.status_code == 200, stopped.text
                return dict(stopped.json())

        async def all_windows() -> list[dict[str, Any]]:
            return await asyncio.gather(*(window(index) for index in range(24)))

        stopped = asyncio.run(all_windows())
    named_any = False
    for index, view in enumerate(stopped):
        assert view["state"] == "closed"
        mine, common = view["targets"]
        grown = index + 1  # drafts grew by 8 x this: its tokens by 24 x, accepted by 4 + 2 + 1
        assert mine["result"]["data"]["num_drafts"] == 8 * grown
        assert mine["result"]["data"]["draft_tokens"] == 24 * grown
        assert mine["result"]["data"]["accepted_tokens"] == 7 * grown
        assert common["result"]["status"] == "na"
        named = {entry["id"] for entry in common["result"]["overlaps"]["windows"]}
        assert named <= {f"w{other}" for other in range(index % 4, 24, 4)} - {f"w{index}"}
        named_any = named_any or bool(named)
    assert named_any  # the windows of a team ran at the same time
