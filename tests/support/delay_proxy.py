"""A database farther away: a TCP forwarder in a process of its own that delays every chunk
each way, so that each round trip takes `2 * delay_s` more (`python -m
tests.support.delay_proxy PORT UPSTREAM DELAY_S`, UPSTREAM a Unix socket's path or
HOST:PORT)."""

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url

from tests.support.metrics_server import free_port


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    loop = asyncio.get_running_loop()
    try:
        while data := await reader.read(65536):
            loop.call_later(delay_s, writer.write, data)
    finally:
        await asyncio.sleep(delay_s)  # what is still on its way arrives first
        writer.close()


async def _serve(port: int, upstream: str, delay_s: float) -> None:
    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if upstream.startswith("/"):
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(upstream)
        else:
            host, _, upstream_port = upstream.rpartition(":")
            upstream_reader, upstream_writer = await asyncio.open_connection(host, upstream_port)
        await asyncio.gather(
            _pump(reader, upstream_writer, delay_s),
            _pump(upstream_reader, writer, delay_s),
            return_exceptions=True,
        )

    server = await asyncio.start_server(forward, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def _wait_listening(port: int, process: "subprocess.Popen[bytes]") -> None:
    deadline = time.monotonic() + 10
    while process.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the delaying forwarder on port {port} did not start")


@contextmanager
def postgres_farther(database_url: str, delay_s: float) -> Iterator[str]:
    """`database_url` (PostgreSQL) through a forwarder that delays `delay_s` each way."""
    with postgres_forwarded(database_url, delay_s) as (far, _forwarder):
        yield far


@contextmanager
def postgres_forwarded(
    database_url: str, delay_s: float
) -> Iterator[tuple[str, "subprocess.Popen[bytes]"]]:
    """`database_url` (PostgreSQL) through a forwarder that delays `delay_s` each way, and the
    forwarder's process (stopped with SIGSTOP, it holds every byte: a server that hangs)."""
    url = make_url(database_url)
    socket_folder = url.query.get("host")
    if isinstance(socket_folder, str) and socket_folder.startswith("/"):
        upstream = f"{socket_folder}/.s.PGSQL.{url.port or 5432}"
    else:
        upstream = f"{url.host or 'localhost'}:{url.port or 5432}"
    with delayed(upstream, delay_s) as (port, forwarder):
        far = url.difference_update_query(["host"]).set(host="127.0.0.1", port=port)
        yield far.render_as_string(hide_password=False), forwarder


@contextmanager
def delayed(upstream: str, delay_s: float) -> Iterator[tuple[int, "subprocess.Popen[bytes]"]]:
    """The port and process of a forwarder to `upstream` (a Unix socket's path, or HOST:PORT)
    on 127.0.0.1, delaying `delay_s` each way."""
    port = free_port()
    command = [sys.executable, "-m", "tests.support.delay_proxy", str(port), upstream, str(delay_s)]
    process = subprocess.Popen(command)
    try:
        _wait_listening(port, process)
        yield port, process
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1]), sys.argv[2], float(sys.argv[3])))
