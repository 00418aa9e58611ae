"""Shared fixtures: databases (SQLite and PostgreSQL), the real collector and a client of it."""

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

from tests.collector import Collector, run_collector


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


POSTGRES_URL_VARIABLE = "SPECDEC_TEST_POSTGRES_URL"
NO_POSTGRES = f"""the PostgreSQL half of the suite needs a server. On Debian, as root:
    make postgres        # starts PostgreSQL 15 and creates the role and database
and run the tests with
    {POSTGRES_URL_VARIABLE}=postgresql+psycopg://specdec:specdec@127.0.0.1:5432/specdec_test"""


@contextmanager
def fresh_postgres_schema() -> Iterator[str]:
    """A URL of a new, empty schema on the test PostgreSQL server, dropped afterwards."""
    base = os.environ.get(POSTGRES_URL_VARIABLE)
    if not base:
        pytest.fail(NO_POSTGRES, pytrace=False)
    schema = f"test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(base)
    try:
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    except OperationalError as exc:
        pytest.fail(f"{NO_POSTGRES}\n({exc.orig})", pytrace=False)
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, or a new schema on the test PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'specdec.db'}"
        return
    with fresh_postgres_schema() as url:
        yield url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh schema on the test PostgreSQL server, for what only PostgreSQL can show."""
    with fresh_postgres_schema() as url:
        yield url


@pytest.fixture
def collector(database_url: str, tmp_path: Path) -> Iterator[Collector]:
    """`specdec serve` on a free port with a fresh database."""
    with run_collector(database_url, tmp_path) as running:
        yield running


@pytest.fixture
def api(collector: Collector) -> Iterator[httpx.Client]:
    """A client of the collector."""
    with httpx.Client(base_url=collector.base_url, timeout=30) as client:
        yield client
