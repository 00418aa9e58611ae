"""The OpenAPI schema against the served API: schemathesis with a valid key (no 5xx, every
answer as documented), and every URL the schema allows short enough for uvicorn to hand over.

The service runs in a uvicorn thread on a free port, with a resolver that knows no names, so
the fuzzer's made-up host names never reach a DNS server.
"""

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specdec_collector.config import Settings
from specdec_collector.service.main import create_app
from tests.support import clients
from tests.support.collector import serve_in_thread
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import InstanceCounters, vllm_payload

KEY = "fuzz-team-write-key-0123456789"
HEADERS = {"Authorization": f"Bearer {KEY}"}
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
    payload = vllm_payload(
        [InstanceCounters(drafts=9, draft_tokens=27, accepted_per_pos=[5, 3, 1])]
    )
    with serve_metrics(body=payload.encode()) as server:
        # Windows the fuzzer can find: "0" and "a" are ids it tries first.
        for window_id, stop in (("0", True), ("a", False)):
            started = clients.post(
                f"{base_url}/windows/{window_id}/start",
                json={"targets": [server.target]},
                headers=HEADERS,
            )
            assert started.status_code == 201
            if stop:
                clients.post(f"{base_url}/windows/{window_id}/stop", headers=HEADERS)
        schemathesis = Path(sys.executable).parent / "schemathesis"
        run = subprocess.run(
            [str(schemathesis), "run", f"{base_url}/openapi.json", "-H", f"Authorization: Bearer {KEY}",
             "--checks", CHECKS, "--max-examples", "60", "--no-color"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    # The failures' head names the operation and the answer; the tail sums up.
    failures = run.stdout[run.stdout.find("FAILURES") :][:3000]
    assert run.returncode == 0, failures + "\n[...]\n" + run.stdout[-3000:] + run.stderr[-2000:]
    assert "Tested: 18" in run.stdout  # every operation of the schema


@pytest.fixture
def schema(tmp_path: Path) -> dict[str, Any]:
    """The service's OpenAPI schema, as it serves it."""
    return create_app(Settings(database_url=f"sqlite:///{tmp_path / 'db'}")).openapi()


def test_the_schema_describes_a_result_field_by_field(schema: dict[str, Any]) -> None:
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
        "whole_command",
        "engines",
        "lifetime",
        "diffusion",
        "models",
        "verification",
        "confidence",
        "flags",
        "throughput",
        "per_drafted_position_acceptance_rates",
        "accepted_distribution",
        "datasets",
    ]  # fmt: skip  (AISBench's keys first, in its order)
    throughput = models["Throughput"]["properties"]
    assert all(throughput[name].get("description") for name in (
        "seconds", "generated_tokens", "inter_token_latency_ms", "generated_tokens_per_step",
        "accepted_token_share",
    ))  # fmt: skip
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


#: uvicorn (httptools) answers a request whose target is longer than this with its own 400
#: "Invalid HTTP request received." in text/plain, before the service sees it.
UVICORN_LONGEST_URL_BYTES = 65535
#: One character at its longest in a URL: four UTF-8 bytes, each percent-encoded.
ENCODED_CHAR_BYTES = 12
#: A formatted value (a date-time, a number) at its longest in characters; each of its ASCII
#: characters is at most three bytes percent-encoded.
FORMATTED_CHARS = 64


def _longest_value_bytes(schema: dict[str, Any], components: dict[str, Any]) -> float:
    """The most bytes one value allowed by `schema` takes in a URL (inf when unbounded)."""
    if "$ref" in schema:
        return _longest_value_bytes(components[schema["$ref"].rsplit("/", 1)[1]], components)
    if "anyOf" in schema:
        return max(_longest_value_bytes(option, components) for option in schema["anyOf"])
    if "enum" in schema:
        return max(len(str(value)) for value in schema["enum"]) * 3
    kind = schema.get("type")
    if kind == "null":
        return 0
    if kind in ("integer", "number", "boolean") or schema.get("format") == "date-time":
        return FORMATTED_CHARS * 3
    if kind == "string":
        return float(schema.get("maxLength", math.inf)) * ENCODED_CHAR_BYTES
    return math.inf


def longest_url_bytes(path: str, operation: dict[str, Any], components: dict[str, Any]) -> float:
    """The longest request target (path and query) the operation's parameters allow."""
    length: float = len(path)
    for parameter in operation.get("parameters", []):
        schema = parameter["schema"]
        if parameter["in"] == "path":
            length += _longest_value_bytes(schema, components) - len(parameter["name"]) - 2
        elif parameter["in"] == "query":
            # "?name=value" or "&name=value", once per item of a repeated parameter.
            items, value = (
                (schema.get("maxItems", math.inf), schema["items"])
                if schema.get("type") == "array"
                else (1, schema)
            )
            length += items * (len(parameter["name"]) + 2 + _longest_value_bytes(value, components))
    return length


def test_comparisons_and_samples_are_described_field_by_field(schema: dict[str, Any]) -> None:
    models = schema["components"]["schemas"]
    paths = schema["paths"]
    answer = paths["/compare"]["get"]["responses"]["200"]["content"]["application/json"]
    assert answer["schema"] == {"$ref": "#/components/schemas/Comparison"}
    samples = paths["/windows/{window_id}/samples"]["get"]["responses"]["200"]["content"]
    assert samples["application/json"]["schema"] == {"$ref": "#/components/schemas/WindowSamples"}
    assert list(models["Comparison"]["properties"]) == ["windows", "targets"]
    assert list(models["ComparedTarget"]["properties"]) == [
        "target", "results", "differences", "speedups"
    ]  # fmt: skip
    assert list(models["Speedup"]["properties"]) == [
        "window", "versus", "generated_tokens_per_second", "inter_token_latency",
        "acceptance_length", "note",
    ]  # fmt: skip
    assert "throughput" in models["ComparedResult"]["properties"]
    assert "per_position_acceptance_rates" in models["ResultDifference"]["properties"]
    assert list(models["SamplePoint"]["properties"]) == [
        "taken_at", "phase", "status", "error", "num_drafts", "draft_tokens", "accepted_tokens",
        "acceptance_rate", "acceptance_length", "per_position_acceptance_rates", "restarts",
        "series_resets",
    ]  # fmt: skip
    assert models["SamplePoint"]["properties"]["phase"] == {
        "$ref": "#/components/schemas/SnapshotPhase"
    }


def test_every_url_the_schema_allows_reaches_the_service(schema: dict[str, Any]) -> None:
    longest = {
        f"{method.upper()} {path}": longest_url_bytes(
            path, operation, schema["components"]["schemas"]
        )
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
    }
    assert len(longest) == 18
    too_long = {
        name: length for name, length in longest.items() if length > UVICORN_LONGEST_URL_BYTES
    }
    assert too_long == {}


#: A character of four UTF-8 bytes (U+1D54B, as schemathesis drew them in the run that found this).
WIDE = "\U0001d54b"


def _longest_label_filter() -> str:
    return f"{WIDE * 128}={WIDE * 128}"


def test_the_longest_label_filter_is_answered_and_a_longer_one_is_refused_by_name(
    base_url: str,
) -> None:
    longest = [_longest_label_filter()] * 16
    listed = clients.get(f"{base_url}/windows", params={"label": longest}, headers=HEADERS)
    assert (listed.status_code, listed.json()["windows"]) == (200, [])
    assert len(str(listed.request.url).encode()) > 16 * 256 * ENCODED_CHAR_BYTES
    one_more = clients.get(
        f"{base_url}/windows", params={"label": [*longest, "a=b"]}, headers=HEADERS
    )
    assert one_more.status_code == 422
    assert [error["loc"] for error in one_more.json()["detail"]] == [["query", "label"]]
    longer = clients.get(
        f"{base_url}/windows", params={"label": _longest_label_filter() + "x"}, headers=HEADERS
    )
    assert longer.status_code == 422
    assert [error["loc"] for error in longer.json()["detail"]] == [["query", "label", 0]]


def test_the_schema_declares_the_bearer_key(schema: dict[str, Any]) -> None:
    assert schema["components"]["securitySchemes"]["apiKey"] == {
        "type": "http", "scheme": "bearer",
        "description": "a team's API key (`specdec keys create`); none in open mode",
    }  # fmt: skip
    assert schema["security"] == [{}, {"apiKey": []}]  # optional: open mode, health, metrics
    assert "/docs" not in schema["paths"] and "/" not in schema["paths"]
