"""Many `/metrics` servers in one separate process, for benchmarks.

The benchmark's own process must not serve the targets: on a 2-core machine its work would
be counted against the collector. This process listens on `count` loopback ports with raw
asyncio protocols (keep-alive HTTP/1.1, one fixed answer, an optional delay), which costs a
few microseconds per request.

    python -m tests.bench.farm --count 64 --delay 0.2 --payload tests/fixtures/vllm_v1_dp1_k5.txt

prints one line with the ports, then serves until stdin closes. With `--drafts-per-s N`
(payload `GROWING`) the answer is instead a vLLM payload of only the families the collector
reads, whose drafts grow by N a second (rendered anew each second, the same on every port):
for Prometheus to scrape a fleet, whose windows must see activity.
"""

import argparse
import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specdec_collector.core.promql import NAME_PATTERN
from tests.support.payloads import FIXTURES, drafts_payload

#: The payload name of a farm whose counters grow (see `--drafts-per-s`).
GROWING = "growing"


def _read_lines(payload: str) -> str:
    """The samples of a `/metrics` answer that the collector reads from Prometheus (untyped:
    Prometheus stores them under the same names)."""
    names = re.compile(f"(?:{NAME_PATTERN})")
    kept = [
        line
        for line in payload.splitlines()
        if not line.startswith("#") and names.fullmatch(line.partition("{")[0].partition(" ")[0])
    ]
    return "\n".join(kept) + "\n"


class _MetricsProtocol(asyncio.Protocol):
    def __init__(self, answer: list[bytes], delay_s: float, counter: list[int]) -> None:
        self.answer, self.delay_s, self.counter = answer, delay_s, counter
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            _, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            self.counter[0] += 1
            if self.delay_s:
                asyncio.get_running_loop().call_later(self.delay_s, self._answer)
            else:
                self._answer()

    def _answer(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.answer[0])


def http_answer(body: bytes) -> bytes:
    head = (
        "HTTP/1.1 200 OK\r\n"
        "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _grow(answer: list[bytes], drafts_per_s: float) -> None:
    began = time.monotonic()
    while True:
        drafts = int(drafts_per_s * (time.monotonic() - began))
        answer[0] = http_answer(_read_lines(drafts_payload(drafts).decode()).encode())
        await asyncio.sleep(1.0)


async def _serve(count: int, delay_s: float, body: bytes, drafts_per_s: float) -> None:
    loop = asyncio.get_running_loop()
    answer, counter = [http_answer(body)], [0]
    growing = asyncio.create_task(_grow(answer, drafts_per_s)) if drafts_per_s else None
    servers = [
        await loop.create_server(
            lambda: _MetricsProtocol(answer, delay_s, counter), "127.0.0.1", 0, backlog=1024
        )
        for _ in range(count)
    ]
    ports = [server.sockets[0].getsockname()[1] for server in servers]
    print(" ".join(map(str, ports)), flush=True)
    # Serve until the parent closes our stdin; then print how many requests were answered.
    await loop.run_in_executor(None, sys.stdin.read)
    if growing is not None:
        growing.cancel()
    print(counter[0], flush=True)


@contextmanager
def run_farm(count: int, payload: str, delay_s: float = 0.0) -> Iterator[list[str]]:
    """`count` targets (`127.0.0.1:PORT`) answering `payload` (a fixture, or GROWING: drafts
    growing by 10 a second) after `delay_s`, in a subprocess."""
    what = (
        ("--drafts-per-s", "10") if payload == GROWING else ("--payload", str(FIXTURES / payload))
    )
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tests.bench.farm"),
            *("--count", str(count), "--delay", str(delay_s), *what),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None
    ports = process.stdout.readline().split()
    if len(ports) != count:
        process.kill()
        raise RuntimeError(f"the target farm did not start: {process.wait()}")
    try:
        yield [f"127.0.0.1:{port}" for port in ports]
    finally:
        process.stdin.close()
        process.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--payload", type=Path)
    parser.add_argument("--drafts-per-s", type=float, default=0.0)
    options = parser.parse_args()
    body = options.payload.read_bytes() if options.payload else b""
    asyncio.run(_serve(options.count, options.delay, body, options.drafts_per_s))


if __name__ == "__main__":
    main()
