"""The real-engine tier: real engines installed on first use (`provision`), started once per
session on loopback, and one real `specdec serve` on a fresh SQLite database beside them."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real_engines import provision, servers
from tests.support.collector import CollectorProcess, run_collector
from tests.support.metrics_server import free_port


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engines")


@pytest.fixture(scope="session")
def vllm_engine(logs: Path) -> Iterator[servers.Engine]:
    provision.vllm()
    provision.model()
    with servers.vllm(free_port(), logs / "vllm.log") as engine:
        yield engine


@pytest.fixture(scope="session")
def llama_engine(logs: Path) -> Iterator[servers.Engine]:
    provision.llamacpp()
    provision.model()
    with servers.llama(free_port(), logs / "llama.log") as engine:
        yield engine


@pytest.fixture(scope="session")
def collector(logs: Path) -> Iterator[CollectorProcess]:
    with run_collector(f"sqlite:///{logs}/collector.db", logs) as running:
        yield running
