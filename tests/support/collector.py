"""The real service: `specdec serve` in a subprocess on a free port, over a given database."""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.types import ASGIApp

from tests.support import clients
from tests.support.metrics_server import free_port
from tests.support.waiting import patience


def specdec_command() -> list[str]:
    """The installed `specdec` console script (the one a user runs)."""
    script = Path(sys.executable).parent / "specdec"
    return [str(script)] if script.exists() else [sys.executable, "-m", "specdec_collector.cli"]


def wait_answering(url: str, process: "subprocess.Popen[bytes]", timeout_s: float = 30) -> None:
    """Return once `url` answers 200; `RuntimeError` if `process` exits first or time runs out
    (`timeout_s` on an idle machine, longer on a loaded one)."""
    timeout_s = patience(timeout_s)
    deadline = time.monotonic() + timeout_s
    # One client for the whole wait: one connection, reused while the server keeps it.
    with clients.client(timeout=1) as poll:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"exited with {process.returncode}")
            try:
                if poll.get(url).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise RuntimeError(f"did not answer in {timeout_s:g} s")


@dataclass
class CollectorProcess:
    """A `specdec serve` process that a test can kill and start again on the same database."""

    database_url: str
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    # One process unless told: a test that kills the collector kills all of it.
    workers: int = 1
    process: subprocess.Popen[bytes] | None = None
    # stderr goes to a file: a pipe nobody reads would block a chatty process.
    log_path: Path = field(default_factory=lambda: Path(tempfile.mkstemp(suffix=".log")[1]))

    @property
    def stderr_text(self) -> str:
        """Everything the processes wrote to stderr so far."""
        return self.log_path.read_text(errors="replace")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, host: str = "127.0.0.1") -> None:
        self.port = free_port()
        env = {**os.environ, "SPECDEC_DATABASE_URL": self.database_url, **self.env}
        log = self.log_path.open("ab")
        command = [*specdec_command(), "serve", "--host", host, "--port", str(self.port)]
        self.process = subprocess.Popen(
            [*command, "--workers", str(self.workers)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        try:
            wait_answering(f"{self.base_url}/healthz", self.process)
        except RuntimeError as exc:
            raise RuntimeError(f"specdec serve {exc}: {self.stderr_text}") from None

    def pids(self) -> list[int]:
        """The process and its descendants (the workers of `--workers N`), Linux /proc."""
        assert self.process is not None
        found, queue = [], [self.process.pid]
        while queue:
            pid = queue.pop()
            found.append(pid)
            for task in Path(f"/proc/{pid}/task").glob("*/children"):
                queue += [int(child) for child in task.read_text().split()]
        return found

    def _proc_texts(self, name: str) -> list[str]:
        """`/proc/<pid>/<name>` of the process and its workers (those still there)."""
        texts = []
        for pid in self.pids():
            try:
                texts.append(Path(f"/proc/{pid}/{name}").read_text())
            except FileNotFoundError:  # gone since listed
                continue
        return texts

    def cpu_seconds(self) -> float:
        """User + system CPU time the process and its workers have used so far (Linux /proc)."""
        total = 0
        for stat in self._proc_texts("stat"):
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def resident_bytes(self) -> int:
        """The resident memory of the process and its workers (Linux /proc)."""
        return sum(
            int(line.split()[1]) * 1024
            for status in self._proc_texts("status")
            for line in status.splitlines()
            if line.startswith("VmRSS:")
        )

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass(frozen=True)
class Team:
    """A test's own team on a shared collector: its name and write key, and where to send them."""

    collector: CollectorProcess
    name: str
    key: str

    @property
    def base_url(self) -> str:
        return self.collector.base_url

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def client(self) -> httpx.Client:
        """An HTTP client of the collector that acts as this team."""
        return clients.client(base_url=self.base_url, headers=self.headers, timeout=30)


# Makes a fresh team on a shared collector (the `new_team` fixture).
NewTeam = Callable[[], Team]


@contextmanager
def run_collector(database_url: str, log_dir: Path, **env: str) -> Iterator[CollectorProcess]:
    """A collector on `database_url`, logging into `log_dir`, with `SPECDEC_*` settings `env`
    (`SPECDEC_WORKERS` becomes `--workers`; one unless given)."""
    workers = int(env.pop("SPECDEC_WORKERS", "1"))
    collector = CollectorProcess(
        database_url, env=env, workers=workers, log_path=log_dir / "collector.log"
    )
    collector.start()
    try:
        yield collector
    finally:
        collector.stop()


@contextmanager
def watching_health(base_url: str) -> Iterator[list[int]]:
    """Poll `/healthz` every 50 ms for the duration of the block; yields the status codes.

    The block begins once the first answer is in: a block shorter than the poller's start
    (making its client) would otherwise see none."""
    statuses: list[int] = []
    done, polling = threading.Event(), threading.Event()

    def poll() -> None:
        with clients.client(timeout=10) as client:
            while not done.is_set():
                statuses.append(client.get(f"{base_url}/healthz").status_code)
                polling.set()
                time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        polling.wait(30)
        yield statuses
    finally:
        done.set()
        poller.join()


@contextmanager
def run_server(
    command: list[str], ready_path: str, env: dict[str, str] | None = None, port: int | None = None
) -> Iterator[str]:
    """`command` (which gets `--port PORT` appended) on `port`, else a free one; yields its base
    URL once `ready_path` answers 200, and terminates it afterwards."""
    port = port or free_port()
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_answering(f"{url}{ready_path}", process)
        except RuntimeError as exc:
            raise RuntimeError(f"{' '.join(command)} {exc}") from None
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextmanager
def run_simulator(*args: str, port: int | None = None) -> Iterator[str]:
    """`specdec simulate ARGS` on `port`, else a free one; yields its base URL once /v1/models
    answers. For tests of the command; `serve_simulator` for a simulated server as a target."""
    with run_server([*specdec_command(), "simulate", *args], "/v1/models", port=port) as url:
        yield url


@contextmanager
def serve_simulator(*args: str, port: int | None = None) -> Iterator[str]:
    """The server `specdec simulate ARGS` serves (its arguments read by the command's own
    parser), served by uvicorn in a thread of this process on `port`, else a free one; yields
    its base URL. A target as real over loopback as the command's, without a process to start
    (~0.45 s of CPU each, mostly imports)."""
    from specdec_collector.cli import build_parser
    from specdec_collector.cli.service import simulated_server
    from specdec_collector.simulator.server import create_simulator_app

    parsed = build_parser().parse_args(["simulate", *args])
    app = create_simulator_app(simulated_server(parsed))
    with serve_in_thread(app, port=port) as url:
        yield url


@contextmanager
def serve_collector(database_url: str, **settings: Any) -> Iterator[str]:
    """A collector in this process (uvicorn in a thread) on a migrated `database_url`, with
    these settings; yields its base URL. For tests that differ from the shared collector only
    by settings: no process to start, no environment to pass."""
    from specdec_collector.config import Settings
    from specdec_collector.service.main import create_app
    from tests.support.databases import migrate

    migrate(database_url)
    with serve_in_thread(create_app(Settings(database_url=database_url, **settings))) as url:
        yield url


@contextmanager
def serve_in_thread(app: ASGIApp, port: int | None = None, loop: str = "auto") -> Iterator[str]:
    """`app` served by uvicorn in a thread of this process (its lifespan run first) on `port`,
    else a free one, on the event `loop` uvicorn names; yields its base URL. For tests that
    must reach into the service's process, and for servers a test only needs as targets."""
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, loop=loop, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + patience(30)
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        server.should_exit = True
        thread.join(timeout=15)
        raise RuntimeError(f"uvicorn did not start on port {port}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
