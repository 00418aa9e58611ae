"""A real HTTP server that serves `/metrics`, whose answer a test sets and whose requests it sees."""

import gzip
import os
import random
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Below Linux's ephemeral range (32768-60999): ports the kernel picks by itself, for a bind to
# port 0 or an outgoing connection, never fall in here.
_PORTS = range(10_000, 32_000)
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on, never handed out before in this process.

    Each pytest-xdist worker draws from its own slice of `_PORTS`, so no other worker, and no
    port the kernel numbers itself, can take it between this check and the bind; and a port is
    never reused, so no collector still scraping an old target reaches a later test's server.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    size = len(_PORTS) // workers
    mine = range(_PORTS.start + worker * size, _PORTS.start + (worker + 1) * size)
    for _ in range(10_000):
        port = random.choice(mine)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port left in {mine}")


@dataclass
class MetricsServer:
    """What the server answers, and what it was asked."""

    host: str = "127.0.0.1"
    port: int = 0
    body: bytes = b""
    status: int = 200
    content_type: str = "text/plain; version=0.0.4; charset=utf-8"
    gzip: bool = False
    delay_s: float = 0.0
    # Called in the request's thread before it answers (after `delay_s`): a test holds answers
    # back with it, e.g. until every one of its servers has been asked.
    before_answer: Callable[[], None] | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)
    # The body of the n-th request (from 1), when it changes with every one.
    body_for: Callable[[int], bytes] | None = None
    requests: list[dict[str, str]] = field(default_factory=list)
    connections: int = 0  # accepted, whether or not a request came on them
    in_flight: int = 0
    max_in_flight: int = 0
    spans: list[tuple[float, float]] = field(default_factory=list)  # (arrived, answered), monotonic
    served: list[bytes] = field(default_factory=list)  # the bodies answered, in order
    served_mark: int = 0  # len(served) when the body last changed through `replace`
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def set_text(self, text: str) -> None:
        self.body = text.encode()

    def replace(self, body: bytes) -> None:
        """Answer `body` from now on; `wait_served` then waits for an answer with it."""
        with self.lock:
            self.body = body
            self.served_mark = len(self.served)

    def wait_served(self, timeout_s: float = 30) -> None:
        """Block until the body given to `replace` has been answered at least once."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if self.body in self.served[self.served_mark :]:
                    return
            time.sleep(0.02)
        raise TimeoutError("the body was never served")

    def count(self) -> int:
        with self.lock:
            return len(self.requests)


def _handler(state: MetricsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:  # once per connection
            with state.lock:
                state.connections += 1
            super().setup()

        def do_GET(self) -> None:
            arrived = time.monotonic()
            with state.lock:
                state.requests.append(
                    {
                        "path": self.path,
                        "_peer": f"{self.client_address[0]}:{self.client_address[1]}",
                        **{k.lower(): v for k, v in self.headers.items()},
                    }
                )
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                if state.delay_s:
                    time.sleep(state.delay_s)
                if state.before_answer is not None:
                    state.before_answer()
                plain, status = state.body, state.status
                if state.body_for is not None:
                    plain = state.body_for(len(state.requests))
                body = gzip.compress(plain) if state.gzip else plain
                self.send_response(status)
                self.send_header("Content-Type", state.content_type)
                self.send_header("Content-Length", str(len(body)))
                if state.gzip:
                    self.send_header("Content-Encoding", "gzip")
                for name, value in state.extra_headers.items():
                    self.send_header(name, value)
                self.end_headers()
                with state.lock:
                    state.spans.append((arrived, time.monotonic()))
                    if status == 200:
                        state.served.append(plain)
                self.wfile.write(body)
            finally:
                with state.lock:
                    state.in_flight -= 1

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


class QuietServer(ThreadingHTTPServer):
    """A threading HTTP server that says nothing of a client that went away (the collector
    drops connections on its timeouts: expected, not a failure of the test's server)."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class _Server(QuietServer):
    request_queue_size = 256  # many concurrent scrapes must not wait in the accept queue


@contextmanager
def serve_metrics(**settings: object) -> Iterator[MetricsServer]:
    """Run a `MetricsServer` on a free loopback port for the duration of the block."""
    state = MetricsServer(**settings)  # type: ignore[arg-type]
    server = _Server((state.host, free_port()), _handler(state))
    state.port = server.server_address[1]
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serve_reset_mid_body() -> Iterator[str]:
    """A server that sends headers and part of a body, then resets the connection (RST)."""
    listener = socket.create_server(("127.0.0.1", free_port()))
    stopping = threading.Event()

    def run() -> None:
        while not stopping.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with client:
                client.recv(65536)
                client.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n"
                    + b"# HELP vllm:spec_decode_num_drafts_total x\n" * 20
                )
                # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stopping.set()
        listener.close()
