"""A small HTTP/1.1 load generator: N keep-alive connections, each one request at a time.

Written on raw asyncio protocols so that it costs far less CPU per request than the servers it
measures (an httpx client would be the bottleneck on a 2-core machine, and would make two
servers of different speed look alike).
"""

import asyncio
import functools
import time
from dataclasses import dataclass


@dataclass
class LoadResult:
    requests: int
    seconds: float
    statuses: dict[int, int]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


class _Connection(asyncio.Protocol):
    def __init__(
        self, request: bytes, deadline: float, result: LoadResult, done: asyncio.Future[None]
    ) -> None:
        self.request, self.deadline, self.result, self.done = request, deadline, result, done
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buffer[:head_end].decode("latin-1")
        length = 0
        for line in head.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(self.buffer) < head_end + 4 + length:
            return
        status = int(head.split(" ", 2)[1])
        self.result.statuses[status] = self.result.statuses.get(status, 0) + 1
        self.result.requests += 1
        self.buffer = self.buffer[head_end + 4 + length :]
        assert self.transport is not None
        if time.monotonic() < self.deadline:
            self.transport.write(self.request)
        else:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _run(
    host: str, port: int, path: str, headers: dict[str, str], connections: int, seconds: float
) -> LoadResult:
    loop = asyncio.get_running_loop()
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode()
    result = LoadResult(0, 0.0, {})
    began = time.monotonic()
    deadline = began + seconds
    finished = []
    for _ in range(connections):
        done: asyncio.Future[None] = loop.create_future()
        await loop.create_connection(
            functools.partial(_Connection, request, deadline, result, done), host, port
        )
        finished.append(done)
    await asyncio.gather(*finished)
    result.seconds = time.monotonic() - began
    return result


def run_load(
    base_url: str,
    path: str,
    connections: int,
    seconds: float,
    headers: dict[str, str] | None = None,
) -> LoadResult:
    """GET `path` on `base_url` (`http://host:port`) over `connections` connections for `seconds`."""
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    return asyncio.run(_run(host, int(port), path, headers or {}, connections, seconds))
