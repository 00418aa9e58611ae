"""The load benchmark's client, run in a process of its own so that its CPU is never the
collector's: N clients start, read, stop and report windows for S seconds (a window's four
calls on one keep-alive connection, as one benchmark run makes them; the next window on a new
one), then print what happened as JSON on stdout.

python -m tests.bench.load_client BASE_URL SECONDS CLIENTS TARGET...

Raw asyncio streams, not httpx: an httpx client costs about as much CPU per call as the
collector does to answer it, and on a 2-core machine would cap the rate it measures.
"""

import asyncio
import itertools
import json
import sys
import time
from dataclasses import asdict, dataclass, field


@dataclass
class LoadReport:
    seconds: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    windows: list[str] = field(default_factory=list)  # every window fully started and stopped
    reconnects: int = 0
    failed_calls: int = 0  # calls that failed three times over
    cpu_seconds: float = 0.0  # this client's own


class _Connection:
    """One keep-alive HTTP/1.1 connection, reopened when the server closes it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def call(self, method: str, path: str, body: bytes | None) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + (body or b""))
        status_line = await self.reader.readuntil(b"\r\n")
        length, closing = 0, False
        while (line := await self.reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and value.strip().lower() == "close":
                closing = True
        await self.reader.readexactly(length)
        if closing:
            self.close()
        return int(status_line.split(b" ", 2)[1])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _client(
    host: str, port: int, deadline: float, targets: list[str], ids: "itertools.count[int]",
    report: LoadReport,
) -> None:  # fmt: skip
    connection = _Connection(host, port)
    while time.monotonic() < deadline:
        # Each window is one benchmark run of one client (a `specdec run`): its calls share a
        # connection, the next run makes its own (and lands on whichever worker accepts it).
        connection.close()
        index = next(ids)
        window_id = f"load-{index}"
        start_body = json.dumps({"targets": targets[: 1 + index % len(targets)]}).encode()
        calls = [
            ("start", "POST", f"/windows/{window_id}/start", start_body),
            ("read", "GET", f"/windows/{window_id}", None),
            ("stop", "POST", f"/windows/{window_id}/stop", None),
            ("report", "GET", f"/windows/{window_id}/report", None),
        ]
        for name, method, path, body in calls:
            began = time.perf_counter()
            for _ in range(3):  # every call is idempotent: a retry is safe
                try:
                    status = await connection.call(method, path, body)
                    break
                except (OSError, asyncio.IncompleteReadError):
                    connection.close()
                    report.reconnects += 1
            else:
                report.failed_calls += 1
                break
            report.latencies.setdefault(name, []).append(time.perf_counter() - began)
            report.statuses[str(status)] = report.statuses.get(str(status), 0) + 1
        else:
            report.windows.append(window_id)
    connection.close()


async def run(base_url: str, seconds: float, clients: int, targets: list[str]) -> LoadReport:
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    report = LoadReport()
    ids = itertools.count()
    began = time.monotonic()
    await asyncio.gather(
        *(_client(host, int(port), began + seconds, targets, ids, report) for _ in range(clients))
    )
    report.seconds = time.monotonic() - began
    report.cpu_seconds = time.process_time()
    return report


if __name__ == "__main__":
    url, duration, count, *names = sys.argv[1:]
    print(json.dumps(asdict(asyncio.run(run(url, float(duration), int(count), names)))))
