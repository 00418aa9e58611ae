"""A TCP forwarder a test can cut and restore: a database that goes away and comes back."""

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field


@dataclass
class TcpProxy:
    """Forwards 127.0.0.1:`port` to `upstream`, a (host, port) or a Unix socket's path;
    `cut()` drops every connection and refuses new ones."""

    upstream: tuple[str, int] | str
    port: int = 0
    up: bool = True
    connections: list[socket.socket] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def cut(self) -> None:
        with self.lock:
            self.up = False
            for sock in self.connections:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self.connections.clear()

    def restore(self) -> None:
        with self.lock:
            self.up = True


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _connect(upstream: tuple[str, int] | str) -> socket.socket:
    if isinstance(upstream, tuple):
        return socket.create_connection(upstream, timeout=5)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.settimeout(5)
    try:
        unix.connect(upstream)
    except OSError:
        unix.close()
        raise
    return unix


@contextmanager
def tcp_proxy(upstream: tuple[str, int] | str) -> Iterator[TcpProxy]:
    """Run a `TcpProxy` on a free loopback port for the duration of the block."""
    proxy = TcpProxy(upstream)
    listener = socket.create_server(("127.0.0.1", 0))
    proxy.port = listener.getsockname()[1]
    stopping = threading.Event()

    def accept() -> None:
        while not stopping.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with proxy.lock:
                if not proxy.up:
                    client.close()
                    continue
                try:
                    server = _connect(upstream)
                except OSError:
                    client.close()
                    continue
                server.settimeout(None)
                proxy.connections += [client, server]
            threading.Thread(target=_pump, args=(client, server), daemon=True).start()
            threading.Thread(target=_pump, args=(server, client), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        stopping.set()
        listener.close()
        proxy.cut()
