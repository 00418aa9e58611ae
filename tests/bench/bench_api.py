"""API: `GET /windows/{id}/results/{target}` at 32 concurrent clients, against a bare FastAPI
endpoint that returns the same JSON, served the same way (uvicorn, one process, same options).

The collector runs with an API key (a shared deployment's setting) on SQLite; the result read
is of a closed window of 4 one-instance targets. The two servers are loaded in turns (5 s each,
three times), by a raw-socket load generator that costs far less than either server.
"""

import json
import statistics
import sys
import tempfile
from contextlib import AbstractContextManager
from pathlib import Path

import httpx

from tests.bench.farm import run_farm
from tests.bench.figures import Figure, show
from tests.bench.loadgen import LoadResult, run_load
from tests.support.collector import run_collector, run_server

CLIENTS, SECONDS, TURNS = 32, 5.0, 3
KEY = "bench-key-0123456789abcdef"


def run_bare(result_file: Path) -> AbstractContextManager[str]:
    """The bare FastAPI endpoint in a subprocess; yields its base URL."""
    command = [sys.executable, "-m", "tests.bench.bare"]
    return run_server(command, "/healthz", {"BENCH_RESULT_FILE": str(result_file)})


def _checked(result: LoadResult) -> float:
    assert set(result.statuses) == {200}, result.statuses
    return result.rate


def measure() -> list[Figure]:
    headers = {"Authorization": f"Bearer {KEY}"}
    with (
        tempfile.TemporaryDirectory() as folder,
        run_farm(4, "vllm_v1_dp1_k5.txt") as targets,
        run_collector(
            f"sqlite:///{Path(folder) / 'api.db'}",
            Path(folder),
            SPECDEC_API_KEYS=f"bench:write:{KEY}",
        ) as collector,
    ):
        with httpx.Client(base_url=collector.base_url, headers=headers, timeout=30) as api:
            assert api.post("/windows/read-me/start", json={"targets": targets}).status_code == 201
            assert api.post("/windows/read-me/stop").status_code == 200
            path = f"/windows/read-me/results/{targets[0]}"
            body = api.get(path).json()
        result_file = Path(folder) / "result.json"
        result_file.write_text(json.dumps(body))
        with run_bare(result_file) as bare_url:
            bare_rates, api_rates = [], []
            for _ in range(TURNS):
                bare_rates.append(_checked(run_load(bare_url, path, CLIENTS, SECONDS)))
                api_rates.append(
                    _checked(run_load(collector.base_url, path, CLIENTS, SECONDS, headers))
                )
    bare, served = statistics.median(bare_rates), statistics.median(api_rates)
    return [
        Figure(
            f"`GET /windows/{{id}}/results/{{target}}` at {CLIENTS} concurrent clients (with an API key)",
            f"{served:.0f} requests/s vs a bare FastAPI endpoint's {bare:.0f}: **{served / bare:.2f} x**",
            "≥ 0.5 x",
            served / bare >= 0.5,
            "python -m tests.bench.bench_api",
        )
    ]


if __name__ == "__main__":
    show(measure())
