"""schemathesis against the OpenAPI schema, with a valid key: no 5xx, every answer as documented.

The service runs in a uvicorn thread on a free port, with a resolver that knows no names, so
the fuzzer's made-up host names never reach a DNS server.
"""

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.main import create_app
from tests.collector import serve_in_thread
from tests.metrics_server import serve_metrics
from tests.payloads import EngineCounters, vllm_payload

KEY = "fuzz-team-write-key-0123456789"
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
    ]
)


async def no_dns(host: str, port: int) -> list[str]:
    raise OSError(-2, "Name or service not known (the test resolver knows no names)")


@pytest.fixture
def base_url(database_url: str) -> Iterator[str]:
    settings = Settings(
        database_url=database_url,
        api_keys=f"fuzz:write:{KEY}",
        scrape_timeout_s=1,
    )
    with serve_in_thread(create_app(settings, resolve=no_dns)) as url:
        yield url


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_undocumented_answer(base_url: str) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    payload = vllm_payload([EngineCounters(drafts=9, draft_tokens=27, accepted_per_pos=[5, 3, 1])])
    with serve_metrics(body=payload.encode()) as server:
        # Windows the fuzzer can find: "0" and "a" are ids it tries first.
        for window_id, stop in (("0", True), ("a", False)):
            started = httpx.post(
                f"{base_url}/windows/{window_id}/start",
                json={"targets": [server.target]},
                headers=headers,
            )
            assert started.status_code == 201
            if stop:
                httpx.post(f"{base_url}/windows/{window_id}/stop", headers=headers)
        schemathesis = Path(sys.executable).parent / "schemathesis"
        run = subprocess.run(
            [str(schemathesis), "run", f"{base_url}/openapi.json", "-H", f"Authorization: Bearer {KEY}",
             "--checks", CHECKS, "--max-examples", "60", "--no-color"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Tested: 12" in run.stdout  # every operation of the schema


def test_the_schema_describes_a_result_field_by_field(tmp_path: Path) -> None:
    schema = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'db'}")).openapi()
    models = schema["components"]["schemas"]
    assert list(models["TargetResult"]["properties"]) == [
        "status",
        "url",
        "error",
        "data",
        "raw",
        "engine",
        "exact",
        "notes",
        "samples",
        "restarts",
        "series_resets",
        "overlaps",
        "bounds",
        "engines",
        "lifetime",
    ]  # fmt: skip  (AISBench's keys first, in its order)
    assert list(models["ResultData"]["properties"]) == [
        "num_drafts", "draft_tokens", "accepted_tokens", "acceptance_rate", "acceptance_length",
        "per_position_acceptance_rates",
    ]  # fmt: skip
    result = schema["paths"]["/windows/{window_id}/results/{target}"]["get"]["responses"]["200"]
    assert result["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/TargetResult"
    }
    target = models["TargetPublic"]["properties"]
    assert {"$ref": "#/components/schemas/TargetResult"} in target["result"]["anyOf"]
    assert {"$ref": "#/components/schemas/Counts"} in target["before"]["anyOf"]
