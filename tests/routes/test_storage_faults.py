"""Storage faults on SQLite: the disk fills, the file system turns read-only, and both pass.

A small ext4 file system (a loop-mounted image) holds the database, so the faults are real
file-system answers: ENOSPC when it fills, EPERM once the files are made immutable
(`chattr +i`, which also stops writes through descriptors already open, as a read-only
remount would). Mounting needs root, as CI runs; PostgreSQL's storage is the server's, covered
by the test of a database that goes away (tests/routes/test_replicas.py).
"""

import errno
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from specdec_collector.service.routes.health import ANSWER_KEPT_S
from specdec_collector.store.db import open_database
from specdec_collector.store.migrate import upgrade_database
from tests.support import clients
from tests.support.collector import run_collector
from tests.support.metrics_server import MetricsServer, serve_metrics
from tests.support.payloads import InstanceCounters, vllm_payload


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail("storage-fault tests mount a 24 MiB ext4 image and need root (CI runs as root)")
    image, mount = tmp_path / "disk.img", tmp_path / "disk"
    mount.mkdir()
    with image.open("wb") as handle:
        handle.truncate(24 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    body = vllm_payload([InstanceCounters(drafts=10, draft_tokens=30, accepted_per_pos=[5, 3, 1])])
    with serve_metrics(body=body.encode()) as running:
        yield running


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as handle:
        for chunk in (1 << 20, 4096):  # megabytes first, then the last blocks one by one
            try:
                while True:
                    handle.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def _truncate_wal(database: Path) -> None:
    # SQLite reuses its WAL file; emptied, the next write needs new blocks from the disk.
    with sqlite3.connect(database) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def test_a_full_disk_answers_503_loses_nothing_and_passes(
    small_disk: Path, tmp_path: Path, server: MetricsServer
) -> None:
    database = small_disk / "specdec.db"
    with run_collector(f"sqlite:///{database}", tmp_path) as collector:
        api = clients.client(base_url=collector.base_url, timeout=30)
        assert api.post("/windows/kept/start", json={"targets": [server.target]}).status_code == 201
        kept = api.post("/windows/kept/stop").json()
        _truncate_wal(database)
        filler = _fill(small_disk)
        refused = api.post("/windows/new/start", json={"targets": [server.target]})
        assert refused.status_code == 503
        assert (
            refused.json()["detail"]
            == "database unavailable: database or disk is full; retry later"
        )
        health = _fresh_health(api)
        assert health.status_code == 503
        assert health.json()["detail"] == "database unavailable: database or disk is full"
        assert api.get("/windows/kept").json() == kept  # reads still work
        filler.unlink()
        assert _recovered_health(api).status_code == 200  # by itself
        assert api.post("/windows/new/start", json={"targets": [server.target]}).status_code == 201
        assert api.get("/windows/kept").json() == kept


def _fresh_health(api: httpx.Client) -> httpx.Response:
    """`/healthz` once the answer of the last check (kept for ANSWER_KEPT_S) has expired."""
    time.sleep(ANSWER_KEPT_S + 0.1)
    return api.get("/healthz")


#: How long a repaired storage may take to show in `/healthz`, as a probe asking again sees it.
RECOVERY_S = 10.0


def _recovered_health(api: httpx.Client) -> httpx.Response:
    """`/healthz` asked again as a probe does, until it answers 200 or RECOVERY_S pass.

    A check whose heartbeat takes more than 50 ms answers what the check before it found (the
    storage fault), and the next check its own; the first write after a fault can take that
    long under load (`make test` saw it)."""
    deadline = time.monotonic() + RECOVERY_S
    while (answer := _fresh_health(api)).status_code != 200 and time.monotonic() < deadline:
        pass
    return answer


def test_read_only_database_files_answer_503_and_pass(
    small_disk: Path, tmp_path: Path, server: MetricsServer
) -> None:
    database = small_disk / "specdec.db"
    with run_collector(f"sqlite:///{database}", tmp_path) as collector:
        api = clients.client(base_url=collector.base_url, timeout=30)
        assert api.post("/windows/kept/start", json={"targets": [server.target]}).status_code == 201
        kept = api.post("/windows/kept/stop").json()
        files = [
            str(path) for path in small_disk.glob("specdec.db*") if not path.name.endswith("-shm")
        ]
        subprocess.run(["chattr", "+i", *files], check=True)
        try:
            refused = api.post("/windows/new/start", json={"targets": [server.target]})
            health = _fresh_health(api)
            ready = api.get("/readyz")
            alive = api.get("/livez")
            still_read = api.get("/windows/kept")
        finally:
            subprocess.run(["chattr", "-i", *files], check=True)
        assert still_read.json() == kept
        assert refused.status_code == 503
        assert refused.json()["detail"].startswith("database unavailable: ")
        assert health.status_code == 503
        # Not ready (out of service), but alive: a probe must not restart it for its database.
        assert ready.status_code == 503 and ready.json() == health.json()
        assert alive.status_code == 200 and alive.json() == {"status": "alive"}
        assert _recovered_health(api).status_code == 200
        assert api.post("/windows/new/start", json={"targets": [server.target]}).status_code == 201
        assert api.get("/windows/kept").json() == kept


def test_a_connection_opened_while_the_files_were_read_only_is_never_handed_out_again(
    small_disk: Path,
) -> None:
    """SQLite opens a file it cannot write read-only, and the connection stays so: once the
    files are writable again, the pool opens a fresh one instead (before, the first write
    after a disk came back failed, and its request answered 503)."""
    url = f"sqlite:///{small_disk / 'pool.db'}"
    upgrade_database(url)
    database = open_database(url)
    files = [str(path) for path in small_disk.glob("pool.db*") if not path.name.endswith("-shm")]
    subprocess.run(["chattr", "+i", *files], check=True)
    try:
        with database.connect() as connection:  # the pool's only connection, opened read-only
            assert connection.execute(text("SELECT count(*) FROM window")).scalar_one() == 0
    finally:
        subprocess.run(["chattr", "-i", *files], check=True)
    with database.begin() as connection:
        connection.execute(text("CREATE TABLE written (id INTEGER)"))
    database.dispose()
