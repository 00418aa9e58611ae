"""`/healthz` latency while a hostile team or target attacks a real `specdec serve`.

Each attack runs against one collector while a poller asks `/healthz` every 10 ms from
another address; the figure is the poller's p99, held to 100 ms:

- the largest payload the caps allow (4096 series of 1.9 KB labels, 8 MB), new labels at
  every start, started and stopped in a loop;
- a target whose labels change on every scrape, sampled every 0.5 s (its series budget
  spends itself, then its readings are `na`);
- 600 idle connections from one address and 200 trickled request heads (the per-client
  bound and the head deadline close them);
- keyless `/healthz` callers as fast as they can ask (their checks share one answer a second);
- a window read from Prometheus as long as the bound allows (a day of one server scraped every
  15 s, from a stand-in Prometheus), its samples read every 0.5 s while open, then stopped.

python -m tests.bench.bench_attacks
"""

import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx

from tests.bench.figures import Figure, show
from tests.support.collector import CollectorProcess, run_collector
from tests.support.metrics_server import MetricsServer, serve_metrics
from tests.support.payloads import InstanceCounters, vllm_payload
from tests.support.prometheus_standin import serve_standin_prometheus

ATTACK_S = 8.0
TARGET_MS = 100.0


def largest_payload(tag: str) -> bytes:
    pad = "x" * 1900
    name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    lines = [
        f'{name}{{engine="0",model_name="m",position="{i}",pad="{pad}{tag}"}} {i}'
        for i in range(4095)
    ]
    lines.append('vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10')
    return ("\n".join(lines) + "\n").encode()


def churning(request: int) -> bytes:
    return vllm_payload(
        [
            InstanceCounters(10, 30, [5, 2, 1], engine=str(i), model=f"m-{request}")
            for i in range(64)
        ]
    ).encode()


@contextmanager
def polled(base_url: str) -> Iterator[list[float]]:
    """`/healthz` every 10 ms from 127.0.0.2 (not the attacker's address): the latencies."""
    latencies: list[float] = []
    done = threading.Event()
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    transport = httpx.HTTPTransport(local_address="127.0.0.2")

    def poll() -> None:
        with httpx.Client(transport=transport, timeout=30) as client:
            while not done.is_set():
                began = time.monotonic()
                client.get(f"http://{host}:{port}/healthz")
                latencies.append(time.monotonic() - began)
                time.sleep(0.01)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        yield latencies
    finally:
        done.set()
        poller.join()


def p99_ms(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[int(len(ordered) * 0.99)] * 1e3 if ordered else float("inf")


def _payload_loop(collector: CollectorProcess, server: MetricsServer, until: float) -> None:
    api = httpx.Client(base_url=collector.base_url, timeout=60)
    turn = 0
    while time.monotonic() < until:
        server.replace(largest_payload(str(turn)))
        api.post(f"/windows/big-{turn}/start", json={"targets": [server.target]})
        api.post(f"/windows/big-{turn}/stop")
        turn += 1


def _churn(collector: CollectorProcess, server: MetricsServer, until: float) -> None:
    api = httpx.Client(base_url=collector.base_url, timeout=60)
    body = {"targets": [server.target], "sample_interval_s": 0.5}
    api.post("/windows/churn/start", json=body)
    time.sleep(max(0.0, until - time.monotonic()))
    api.post("/windows/churn/stop")


def _slowloris(collector: CollectorProcess, server: MetricsServer, until: float) -> None:
    host, port = collector.base_url.removeprefix("http://").rsplit(":", 1)
    with ExitStack() as held:
        while time.monotonic() < until:
            for index in range(800):
                try:
                    sock = socket.create_connection((host, int(port)), timeout=2)
                except OSError:
                    continue
                held.callback(sock.close)
                if index % 4 == 0:
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            time.sleep(1.0)


def _keyless_flood(collector: CollectorProcess, server: MetricsServer, until: float) -> None:
    def flood() -> None:
        with httpx.Client(base_url=collector.base_url, timeout=30) as client:
            while time.monotonic() < until:
                client.get("/healthz")

    threads = [threading.Thread(target=flood) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _long_prometheus_window(
    collector: CollectorProcess, server: MetricsServer, until: float
) -> None:
    api = httpx.Client(base_url=collector.base_url, timeout=120)
    at = datetime.fromtimestamp(time.time() - 86400 + 60, UTC).isoformat()
    body = {"targets": [PROMETHEUS_INSTANCE], "source": "prometheus", "at": at}
    api.post("/windows/day/start", json=body)
    while time.monotonic() < until:
        api.get("/windows/day/samples")
        time.sleep(0.5)
    api.post("/windows/day/stop", json={"at": datetime.now(UTC).isoformat()})


PROMETHEUS_INSTANCE = "10.9.8.7:8000"

ATTACKS: list[tuple[str, Callable[[CollectorProcess, MetricsServer, float], None], dict[str, str]]] = [
    ("the largest payload the caps allow, started and stopped in a loop", _payload_loop, {}),
    ("a target whose labels change on every scrape, sampled every 0.5 s", _churn, {}),
    ("800 idle connections a second from one address, a quarter trickling heads", _slowloris,
     {"SPECDEC_HEADER_TIMEOUT_S": "2"}),
    ("8 keyless clients asking /healthz as fast as they can", _keyless_flood, {}),
    ("a day-long window read from Prometheus, its samples read every 0.5 s, then stopped",
     _long_prometheus_window, {}),
]  # fmt: skip


def measure() -> list[Figure]:
    figures = []
    for what, attack, env in ATTACKS:
        with (
            serve_standin_prometheus(PROMETHEUS_INSTANCE, time.time() - 2 * 86400, 15.0) as prom,
            tempfile.TemporaryDirectory() as folder,
            serve_metrics(body=largest_payload("a"), body_for=None) as server,
            run_collector(
                f"sqlite:///{Path(folder) / 'a.db'}",
                Path(folder),
                SPECDEC_PROMETHEUS_URL=prom.url,
                **env,
            ) as collector,
        ):
            if attack is _churn:
                server.body_for = churning
            with polled(collector.base_url) as latencies:
                time.sleep(1.0)
                attack(collector, server, time.monotonic() + ATTACK_S)
            p99 = p99_ms(latencies)
        figures.append(
            Figure(
                f"/healthz p99 under attack: {what}",
                f"{p99:.0f} ms over {len(latencies)} checks",
                f"< {TARGET_MS:.0f} ms",
                p99 < TARGET_MS,
                "python -m tests.bench.bench_attacks",
            )
        )
    return figures


if __name__ == "__main__":
    show(measure())
