"""Where the store runs each call: its own choice, turned by its knobs, with the same
answer wherever it runs."""

import threading
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from specdec_collector.store.db import open_database
from specdec_collector.store.store import Cost, Store, StoreKnobs
from tests.support.databases import migrate

pytestmark = pytest.mark.anyio


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    migrate(url)
    database = open_database(url)
    yield database
    database.dispose()


def _where(database: Engine) -> str:
    """The thread a call ran in, having read the database there."""
    with database.connect() as connection:
        connection.execute(text("SELECT 1"))
    return threading.current_thread().name


def _steps(database: Engine, count: int) -> Generator[None, None, tuple[str, int]]:
    """A computation of `count` steps: the thread it ended in, and the steps it took."""
    done = 0
    for _ in range(count):
        yield
        done += 1
    return _where(database), done


async def test_lookups_run_on_the_event_loop_unless_turned_off(sqlite: Engine) -> None:
    loop = threading.current_thread().name
    on = Store(sqlite)
    assert await on.lookup(_where) == loop
    off = Store(sqlite, StoreKnobs(lookups_on_loop=False))
    assert await off.lookup(_where) != loop  # `SPECDEC_DB_LOOKUPS_ON_LOOP=false`: a thread
    await on.aclose()
    await off.aclose()


async def test_a_small_computation_is_stepped_on_the_loop_a_large_one_in_the_lane(
    sqlite: Engine,
) -> None:
    """SQLite: a stop of a few readings on the event loop, a larger or unknown one, or any
    with `SPECDEC_STOP_ON_LOOP_READINGS=0`, in the computations lane; the same answer."""
    loop = threading.current_thread().name
    store = Store(sqlite)
    assert await store.compute(Cost(readings=3), _steps, 500) == (loop, 500)
    assert await store.compute(Cost(readings=65), _steps, 500) == ("specdec-computations", 500)
    assert await store.compute(Cost(readings=None), _steps, 5) == ("specdec-computations", 5)
    await store.aclose()
    off = Store(sqlite, StoreKnobs(on_loop_readings=0))
    assert await off.compute(Cost(readings=1), _steps, 5) == ("specdec-computations", 5)
    await off.aclose()


async def test_on_postgresql_every_computation_runs_in_the_request_pool(postgres_url: str) -> None:
    migrate(postgres_url)
    database = open_database(postgres_url)
    store = Store(database)
    where, steps = await store.compute(Cost(readings=1), _steps, 5)
    await store.aclose()
    assert steps == 5 and where != threading.current_thread().name
    assert where != "specdec-computations"


async def test_arranging_few_series_stays_on_the_loop_many_go_to_a_thread(sqlite: Engine) -> None:
    loop = threading.current_thread().name
    store = Store(sqlite)

    def where() -> str:
        return threading.current_thread().name

    assert await store.arrange(10, where) == loop
    assert await store.arrange(10_000, where) != loop
    await store.aclose()
