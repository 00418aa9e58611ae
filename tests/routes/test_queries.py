"""Reading many windows: filters, pages, CSV, and the side-by-side comparison."""

import csv
import io
from fractions import Fraction
from typing import Any

import httpx
import pytest

from specdec_collector.core.comparison import NO_INTERVAL
from tests.support.metrics_server import MetricsServer, serve_metrics
from tests.support.payloads import InstanceCounters, vllm_payload


def payload(drafts: int, accepted: list[int]) -> bytes:
    return vllm_payload(
        [
            InstanceCounters(
                drafts=drafts, draft_tokens=len(accepted) * drafts, accepted_per_pos=accepted
            )
        ]
    ).encode()


def window(
    api: httpx.Client,
    server: MetricsServer,
    window_id: str,
    labels: dict[str, str],
    accepted: list[int],
    stop: bool = True,
) -> None:
    server.replace(payload(0, [0] * len(accepted)))
    assert (
        api.post(
            f"/windows/{window_id}/start", json={"targets": [server.target], "labels": labels}
        ).status_code
        == 201
    )
    server.replace(payload(100, accepted))
    if stop:
        assert api.post(f"/windows/{window_id}/stop").status_code == 200


@pytest.fixture
def stored(api: httpx.Client) -> dict[str, Any]:
    """Five windows: EAGLE and n-gram runs on two servers, one still open."""
    with serve_metrics() as one, serve_metrics() as two:
        window(api, one, "eagle-1", {"method": "eagle"}, [90, 80, 70])  # 80 % accepted
        window(api, one, "ngram-1", {"method": "ngram"}, [60, 30, 15])  # 35 %
        window(api, two, "eagle-2", {"method": "eagle"}, [95, 85, 75])  # 85 %
        window(api, two, "ngram-2", {"method": "ngram", "note": "a=b"}, [50, 20, 5])  # 25 %
        window(api, two, "open-1", {"method": "eagle"}, [1, 1, 1], stop=False)
        return {"one": one.target, "two": two.target}


def ids(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [w["id"] for w in answer.json()["windows"]]


def test_filters(api: httpx.Client, stored: dict[str, Any]) -> None:
    assert ids(api.get("/windows")) == ["open-1", "ngram-2", "eagle-2", "ngram-1", "eagle-1"]
    assert ids(api.get("/windows", params={"state": "open"})) == ["open-1"]
    assert ids(api.get("/windows", params={"label": "method=eagle", "state": "closed"})) == [
        "eagle-2",
        "eagle-1",
    ]
    assert ids(api.get("/windows", params=[("label", "method=ngram"), ("label", "note=a=b")])) == [
        "ngram-2"
    ]
    assert ids(api.get("/windows", params={"target": stored["one"]})) == ["ngram-1", "eagle-1"]
    assert ids(api.get("/windows", params={"min_acceptance_rate": 50})) == ["eagle-2", "eagle-1"]
    assert ids(api.get("/windows", params={"max_acceptance_rate": 30})) == ["ngram-2"]
    assert ids(api.get("/windows", params={"sort": "started_at", "limit": 2})) == [
        "eagle-1",
        "ngram-1",
    ]
    everything = api.get("/windows").json()["windows"]
    middle = everything[2]["started_at"]
    assert ids(api.get("/windows", params={"started_before": middle})) == ["ngram-1", "eagle-1"]
    assert ids(api.get("/windows", params={"started_after": middle})) == [
        "open-1",
        "ngram-2",
        "eagle-2",
    ]
    summary = everything[4]["targets"][0]  # eagle-1
    assert summary == {
        "target": stored["one"],
        "status": "ok",
        "engine": "vllm",
        "exact": True,
        "restarts": 0,
        "acceptance_rate": 80.0,
        "acceptance_length": 3.4,
        "num_drafts": 100,
    }
    assert api.get("/windows", params={"label": "no-equals"}).status_code == 422


def test_cursor_pages_cover_every_window_once(api: httpx.Client, stored: dict[str, Any]) -> None:
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.get("/windows", params=params).json()
        seen += [w["id"] for w in page["windows"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["open-1", "ngram-2", "eagle-2", "ngram-1", "eagle-1"]
    assert api.get("/windows", params={"cursor": "not-a-cursor"}).status_code == 422


def test_windows_as_csv(api: httpx.Client, stored: dict[str, Any]) -> None:
    answer = api.get("/windows", params={"format": "csv", "state": "closed"})
    assert answer.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert [r["id"] for r in rows] == ["ngram-2", "eagle-2", "ngram-1", "eagle-1"]
    assert rows[3]["acceptance_rate"] == "80.0" and rows[3]["labels"] == "method=eagle"
    assert (rows[3]["engine"], rows[3]["exact"], rows[3]["restarts"]) == ("vllm", "True", "0")
    assert (
        api.get("/windows", headers={"Accept": "text/csv"})
        .text.splitlines()[0]
        .startswith("id,state,")
    )


def test_compare_two_configurations(api: httpx.Client, stored: dict[str, Any]) -> None:
    answer = api.get("/compare", params={"windows": "eagle-1,ngram-1,eagle-2"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [w["id"] for w in body["windows"]] == ["eagle-1", "ngram-1", "eagle-2"]
    by_target = {row["target"]: row for row in body["targets"]}
    one = by_target[stored["one"]]
    assert [r["window"] if r else None for r in one["results"]] == ["eagle-1", "ngram-1", None]
    assert [(r["engine"], r["exact"]) for r in one["results"] if r] == [("vllm", True)] * 2
    (difference,) = one["differences"]
    # Unsampled windows: differences, but no verdict, saying why; the settings agree.
    assert {v["reason"] for v in difference.pop("verdicts").values()} == {NO_INTERVAL}
    assert {v["reason"] for v in difference.pop("per_position_verdicts").values()} == {NO_INTERVAL}
    assert difference.pop("mismatches") == []
    assert [difference] == [
        {"window": "ngram-1", "versus": "eagle-1",
         "acceptance_rate": pytest.approx(float(Fraction(35) - 80), rel=1e-15),
         "acceptance_length": pytest.approx(float(Fraction(105, 100) - Fraction(240, 100)), rel=1e-15),
         "per_position_acceptance_rates": {"0": pytest.approx(0.6 - 0.9, rel=1e-12), "1": pytest.approx(0.3 - 0.8, rel=1e-12), "2": pytest.approx(0.15 - 0.7, rel=1e-12)}},
    ]  # fmt: skip
    two = by_target[stored["two"]]
    assert [r["window"] if r else None for r in two["results"]] == [None, None, "eagle-2"]
    assert two["differences"] == []
    with_open = api.get("/compare", params={"windows": "eagle-2,open-1"}).json()
    assert with_open["targets"][0]["results"][1]["status"] == "open"
    assert api.get("/compare", params={"windows": "eagle-1,nope"}).status_code == 404
    assert api.get("/compare", params={"windows": "eagle-1"}).status_code == 422
    assert api.get("/compare", params={"windows": "eagle-1,eagle-1"}).status_code == 422
