"""A real Prometheus server for the tests (Debian's `prometheus`), scraping what a test names."""

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.collector import wait_answering
from tests.support.metrics_server import free_port

NO_PROMETHEUS = (
    "no prometheus binary: install Debian's package (apt-get install prometheus); CI installs it"
)


def prometheus_binary() -> str:
    """The path of `prometheus`; skips the test without one, fails it under CI."""
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(NO_PROMETHEUS, pytrace=False)
        pytest.skip(NO_PROMETHEUS)
    return found


@contextmanager
def run_prometheus(targets: list[str], interval_s: float = 1.0) -> Iterator[str]:
    """Prometheus on a free loopback port scraping `targets` (`host:port`, at `/metrics`) every
    `interval_s`; yields its base URL once ready, and stops it (its data is thrown away)."""
    config = {
        "global": {"scrape_interval": f"{interval_s:g}s", "scrape_timeout": f"{interval_s:g}s"},
        "scrape_configs": [{"job_name": "vllm", "static_configs": [{"targets": targets}]}],
    }
    with run_prometheus_config(config) as base_url:
        yield base_url


@contextmanager
def run_prometheus_config(config: dict[str, Any]) -> Iterator[str]:
    """Prometheus on a free loopback port with this configuration (as its YAML would load);
    yields its base URL once ready, and stops it (its data is thrown away)."""
    binary = prometheus_binary()
    with tempfile.TemporaryDirectory(prefix="specdec-prometheus-") as folder:
        path = Path(folder) / "prometheus.yml"
        path.write_text(json.dumps(config))  # YAML is a superset of JSON
        port = free_port()
        process = subprocess.Popen(
            [binary, f"--config.file={path}", f"--storage.tsdb.path={folder}/data",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_answering(f"{base_url}/-/ready", process)
            yield base_url
        finally:
            process.terminate()
            process.wait(timeout=30)
