"""A stand-in Prometheus for windows longer than a test can wait for: one vLLM server scraped
every `interval_s` since `first`, its samples made up on demand.

It answers the queries the Prometheus source sends (`core.promql`), as the real HTTP API
does: the spec-decode series at a time (a vector of each one's last sample at or before it), the
time of the last scrape of `up` (a vector by instance), the count of `up` series by instance
(its scrape configurations: `configs`), the raw samples of `up` (a matrix, one a scrape), and a
range selector `{...}[Ns]` (a matrix of the samples in the `N` s up to the query's time). At
scrape `k` the counters are `drafts = 2k`, `draft tokens = 6k`, `accepted = 4k`, counted afresh
from every scrape in `resets` (an engine restart). Every query is recorded with its range, if any.
"""

import json
import math
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.metrics_server import QuietServer

#: The longest URL taken: a proxy's (nginx's request line buffer is 8 KB by default).
MAX_URL_BYTES = 8192

FAMILIES = {
    "vllm:spec_decode_num_drafts_total": 2,
    "vllm:spec_decode_num_draft_tokens_total": 6,
    "vllm:spec_decode_num_accepted_tokens_total": 4,
}


@dataclass
class StandinPrometheus:
    instance: str
    first: float  # the time of scrape 0
    interval_s: float
    resets: tuple[int, ...] = ()
    configs: int = 1  # the scrape configurations (jobs) scraping the server
    url: str = ""
    ranges_s: list[float] = field(default_factory=list)  # the span of every range query
    queries: int = 0

    def scrape_index(self, at: float) -> int | None:
        """The last scrape at or before `at`, if any."""
        if at < self.first:
            return None
        return math.floor((at - self.first) / self.interval_s + 1e-9)

    def counter(self, k: int, per_scrape: int) -> int:
        since = max((r for r in self.resets if r <= k), default=0)
        return per_scrape * (k - since)

    def labels(self, name: str) -> dict[str, str]:
        return {"__name__": name, "engine": "0", "model_name": "m",
                "instance": self.instance, "job": "vllm"}  # fmt: skip

    def answer(self, query: str, at: float) -> dict[str, Any]:
        self.queries += 1
        ranged = re.search(r"\[(\d+)s\]$", query)
        if self.instance not in query.replace("\\", ""):  # a regular expression's escapes
            return _success("vector" if ranged is None else "matrix", [])
        last = self.scrape_index(at)
        if query.startswith("count by (instance)"):  # one scrape configuration
            if last is None:
                return _success("vector", [])
            return _success("vector", [{"metric": {"instance": self.instance},
                                        "value": [at, str(self.configs)]}])  # fmt: skip
        if "timestamp(" in query:
            if last is None:
                return _success("vector", [])
            stamp = self.first + last * self.interval_s
            return _success("vector", [{"metric": {"instance": self.instance},
                                        "value": [at, repr(stamp)]}])  # fmt: skip
        if ranged is None:
            if last is None:
                return _success("vector", [])
            return _success("vector", [
                {"metric": self.labels(name), "value": [at, str(self.counter(last, step))]}
                for name, step in FAMILIES.items()
            ])  # fmt: skip
        span = float(ranged[1])
        self.ranges_s.append(span)
        low = self.scrape_index(at - span)
        ks = range(0 if low is None else low + 1, (last if last is not None else -1) + 1)
        if query.startswith("up{"):  # the raw samples of `up`: one a scrape
            labels = {"__name__": "up", "instance": self.instance, "job": "vllm"}
            values = [[self.first + k * self.interval_s, "1"] for k in ks]
            return _success("matrix", [{"metric": labels, "values": values}] if values else [])
        return _success("matrix", [
            {"metric": self.labels(name),
             "values": [[self.first + k * self.interval_s, str(self.counter(k, step))]
                        for k in ks]}
            for name, step in FAMILIES.items()
        ])  # fmt: skip


def _success(kind: str, result: list[dict[str, Any]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": kind, "result": result}}


@contextmanager
def serve_standin_prometheus(
    instance: str, first: float, interval_s: float, resets: tuple[int, ...] = ()
) -> Iterator[StandinPrometheus]:
    """The stand-in on a free loopback port; `.url` is its base URL."""
    state = StandinPrometheus(instance, first, interval_s, resets)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if len(self.path) > MAX_URL_BYTES:  # as the proxy in front of it would
                self.send_error(414)
                return
            self._answer(parse_qs(urlsplit(self.path).query))

        def do_POST(self) -> None:  # a form-encoded body, as the API takes it
            length = int(self.headers.get("Content-Length") or 0)
            self._answer(parse_qs(self.rfile.read(length).decode()))

        def _answer(self, params: dict[str, list[str]]) -> None:
            if urlsplit(self.path).path != "/api/v1/query":
                self.send_error(404)
                return
            body = json.dumps(state.answer(params["query"][0], float(params["time"][0]))).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = QuietServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
