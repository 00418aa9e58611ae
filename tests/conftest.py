"""Shared fixtures: the anyio backend, the real collector and a client of it."""

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.collector import Collector, run_collector


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[Collector]:
    """`specdec serve` on a free port with a fresh database."""
    with run_collector(tmp_path) as running:
        yield running


@pytest.fixture
def api(collector: Collector) -> Iterator[httpx.Client]:
    """A client of the collector."""
    with httpx.Client(base_url=collector.base_url, timeout=30) as client:
        yield client
