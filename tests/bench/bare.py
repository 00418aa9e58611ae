"""The yardstick for the API benchmark: a bare FastAPI endpoint that returns a fixed result.

Same path shape as `GET /windows/{id}/results/{target}`, same JSON body (read from the file
named by BENCH_RESULT_FILE), served by uvicorn with the options `specdec serve` uses.

    BENCH_RESULT_FILE=result.json python -m tests.bench.bare --port 8123
"""

import json
import os
import sys
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

app = FastAPI()
RESULT: dict[str, Any] = json.loads(Path(os.environ["BENCH_RESULT_FILE"]).read_text())


@app.get("/windows/{window_id}/results/{target}")
async def get_result(window_id: str, target: str) -> dict[str, Any]:
    """The fixed result."""
    return RESULT


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    """Ready."""
    return {"status": "ok"}


if __name__ == "__main__":  # python -m tests.bench.bare --port PORT
    uvicorn.run(
        app, host="127.0.0.1", port=int(sys.argv[2]), log_level="info", timeout_graceful_shutdown=10
    )
