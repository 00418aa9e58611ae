"""Slow and idle clients cannot hold a `specdec serve` (a real one): a request head has a
deadline, a body has a deadline, and one client address may hold only so many connections."""

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from fastapi import FastAPI

from specdec_collector.cli.service import EVENT_LOOP
from tests.support import clients
from tests.support.collector import CollectorProcess, run_collector, serve_in_thread
from tests.support.waiting import wait_for


def _address(base_url: str) -> tuple[str, int]:
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


@contextmanager
def _guarded(tmp_path: Path) -> Iterator[CollectorProcess]:
    settings = {
        "SPECDEC_HEADER_TIMEOUT_S": "1",
        "SPECDEC_BODY_TIMEOUT_S": "1",
        "SPECDEC_MAX_CONNECTIONS_PER_CLIENT": "20",
    }
    with run_collector(f"sqlite:///{tmp_path}/c.db", tmp_path, **settings) as collector:
        yield collector


def _connect(address: tuple[str, int], source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(address, timeout=10, source_address=(source, 0))
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed `sock` within `seconds`, and what it sent first."""
    sock.settimeout(seconds)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except TimeoutError:
        return False, received
    return True, received


def test_a_trickled_head_or_an_idle_connection_is_closed_at_its_deadline(tmp_path: Path) -> None:
    with _guarded(tmp_path) as collector:
        address = _address(collector.base_url)
        idle = _connect(address)
        trickled = _connect(address)
        trickled.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the head never ends
        # After an answer, the next head has its deadline too.
        kept = _connect(address)
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        time.sleep(0.3)
        kept.sendall(b"GET /healthz HTTP/1.1\r\n")
        for sock in (idle, trickled, kept):
            closed, _ = _closed_within(sock, 5)
            assert closed
        assert clients.get(f"{collector.base_url}/healthz").status_code == 200


def test_a_trickled_body_is_answered_408_at_its_deadline(tmp_path: Path) -> None:
    with _guarded(tmp_path) as collector:
        sock = _connect(_address(collector.base_url))
        sock.sendall(
            b"POST /windows/slow/start HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"targ'
        )
        _, answer = _closed_within(sock, 10)  # answered at its deadline, not held
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"request body not received within 1 s" in answer


def test_one_client_address_holds_at_most_its_connections_and_others_still_get_answers(
    tmp_path: Path,
) -> None:
    """20 connections from 127.0.0.1 at most: the 21st is answered 503 and closed; a client
    at another address (127.0.0.2) is answered meanwhile."""
    with _guarded(tmp_path) as collector, ExitStack() as held:
        address = _address(collector.base_url)
        for _ in range(20):
            held.callback(_connect(address).close)
        time.sleep(0.2)
        extra = _connect(address)
        closed, answer = _closed_within(extra, 5)
        other = _connect(address, source="127.0.0.2")
        other.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        _, healthy = _closed_within(other, 5)
    assert closed and answer.startswith(b"HTTP/1.1 503"), answer[:200]
    assert b"too many connections" in answer
    assert healthy.startswith(b"HTTP/1.1 200"), healthy[:200]


def _busy_app(served: list[str], release: threading.Event) -> FastAPI:
    """Endpoints that hold the event loop (a busy collector's turns, made long on purpose)."""
    app = FastAPI()

    @app.get("/{name}")
    async def answer(name: str) -> dict[str, str]:
        served.append(name)
        if name == "block":  # the loop held until the new connections wait in the kernel
            release.wait(30)
        elif name == "busy":
            time.sleep(0.02)  # noqa: ASYNC251 - one turn of a busy loop
        return {"served": name}

    return app


def _keep_busy(address: tuple[str, int], stop: threading.Event) -> None:
    """One keep-alive client asking `/busy` back to back: an open connection's turns."""
    with _connect(address) as sock:
        reader = sock.makefile("rb")
        while not stop.is_set():
            sock.sendall(b"GET /busy HTTP/1.1\r\nHost: x\r\n\r\n")
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)


def test_connections_that_wait_together_are_all_accepted_at_the_next_turn() -> None:
    """New connections are accepted all at once, not one per turn of the event loop: a busy
    service's open connections must not keep the new ones (a benchmark run's start) waiting.
    uvloop, which uvicorn runs on where it is installed, accepted one per turn: 60 new
    connections waited through 10-30 turns of the open connection's requests (1-2 here)."""
    served: list[str] = []
    release = threading.Event()
    stop = threading.Event()
    with serve_in_thread(_busy_app(served, release), loop=EVENT_LOOP) as base_url:
        address = _address(base_url)
        busy = threading.Thread(target=_keep_busy, args=(address, stop), daemon=True)
        busy.start()
        try:
            wait_for(lambda: True if "busy" in served else None, "the open connection's requests")
            blocking = _connect(address)
            blocking.sendall(b"GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
            wait_for(lambda: True if "block" in served else None, "the loop to be held")
            new = [_connect(address) for _ in range(60)]  # queued in the kernel meanwhile
            for sock in new:
                sock.sendall(b"GET /new HTTP/1.1\r\nHost: x\r\n\r\n")
            release.set()
            for sock in new:
                assert sock.recv(4096).startswith(b"HTTP/1.1 200")
                sock.close()
            blocking.close()
        finally:
            release.set()
            stop.set()
            busy.join(timeout=10)
    after_block = served[served.index("block") + 1 :]
    last_new = len(after_block) - after_block[::-1].index("new")
    turns_waited = after_block[:last_new].count("busy")
    assert after_block.count("new") == 60
    assert turns_waited <= 4, f"the last new connection waited {turns_waited} busy turns"


def test_the_internals_of_uvicorn_the_guard_relies_on_are_there() -> None:
    """The guard subclasses uvicorn's httptools protocol (uvicorn has no header timeout nor a
    connection limit per client): it overrides three of its callbacks and reads its `cycle`,
    `transport` and `loop`. A uvicorn that changes them fails here, not in production."""
    import inspect

    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from specdec_collector.service.connections import GuardedHttpToolsProtocol

    for name in ("connection_made", "on_response_complete", "connection_lost"):
        base = inspect.signature(getattr(HttpToolsProtocol, name)).parameters
        guard = inspect.signature(getattr(GuardedHttpToolsProtocol, name)).parameters
        assert list(guard) == list(base), name
    source = inspect.getsource(HttpToolsProtocol)
    for attribute in ("self.cycle", "self.transport", "self.loop"):
        assert f"{attribute} =" in source or f"{attribute}: " in source, attribute
    assert "self.cycle = RequestResponseCycle(" in source  # a new cycle per request
