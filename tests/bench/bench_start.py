"""Window start latency with 64 targets that each answer in 200 ms.

Starts the real `specdec serve` and 64 real `/metrics` servers, then times `POST .../start`
(which scrapes every target) for several windows. Printed beside it: the time one target
takes, and what the scrapes one after another would take.
"""

import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from tests.collector import run_collector
from tests.metrics_server import serve_metrics
from tests.payloads import EngineCounters, vllm_payload

TARGETS, DELAY_S, WINDOWS = 64, 0.2, 10


def main() -> None:
    payload = vllm_payload([EngineCounters(drafts=10, draft_tokens=50, accepted_per_pos=[5] * 5)])
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        collector = stack.enter_context(
            run_collector(f"sqlite:///{Path(folder) / 'bench.db'}", Path(folder))
        )
        servers = [
            stack.enter_context(serve_metrics(body=payload.encode(), delay_s=DELAY_S))
            for _ in range(TARGETS)
        ]
        body = {"targets": [server.target for server in servers]}
        single, starts = [], []
        with httpx.Client(base_url=collector.base_url, timeout=60) as api:
            for index in range(WINDOWS):
                began = time.perf_counter()
                answer = api.post(
                    f"/windows/one-{index}/start", json={"targets": body["targets"][:1]}
                )
                single.append(time.perf_counter() - began)
                assert answer.status_code == 201
                began = time.perf_counter()
                answer = api.post(f"/windows/wide-{index}/start", json=body)
                starts.append(time.perf_counter() - began)
                assert answer.status_code == 201, answer.text
    print(
        f"window start, 1 target x {DELAY_S * 1000:.0f} ms:  median {statistics.median(single):.3f} s"
    )
    print(
        f"window start, {TARGETS} targets x {DELAY_S * 1000:.0f} ms: median {statistics.median(starts):.3f} s, max {max(starts):.3f} s"
    )
    print(f"{TARGETS} scrapes one after another would take >= {TARGETS * DELAY_S:.1f} s")
    print(
        f"ratio {TARGETS}-target start / 1-target start: {statistics.median(starts) / statistics.median(single):.2f}"
    )


if __name__ == "__main__":
    main()
