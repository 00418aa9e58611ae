"""The Python client, sync and async, against the real service."""

import asyncio

import httpx
import pytest

from specdec_collector.client import (
    AsyncCollectorClient,
    CollectorClient,
    CollectorError,
    CollectorUnavailable,
)
from specdec_collector.schemas import WindowSummary, WindowView
from tests.support.collector import Team
from tests.support.metrics_server import free_port, serve_metrics
from tests.support.payloads import drafts_payload


def test_sync_client_round_trip(team: Team) -> None:
    with (
        serve_metrics(body=drafts_payload(100)) as server,
        CollectorClient(team.base_url, api_key=team.key) as client,
    ):
        window = client.start("c-1", [server.target], labels={"model": "m"}, sample_interval_s=1)
        assert window.labels == {"model": "m"} and window.sample_interval_s == 1
        server.replace(drafts_payload(300))
        report = client.stop_and_report("c-1")
        got = client.get("c-1")
        listed = client.list()
    assert "Drafts                                        200" in report
    result = got.targets[0].result
    assert result is not None and result.data is not None and result.data.num_drafts == 200
    assert [w.id for w in listed] == ["c-1"]
    assert listed[0].targets[0].num_drafts == 200


def test_async_client_round_trip(team: Team) -> None:
    async def run() -> tuple[WindowView, str, list[WindowSummary]]:
        async with AsyncCollectorClient(team.base_url, api_key=team.key) as client:
            await client.start("c-2", [server.target])
            server.replace(drafts_payload(250))
            report = await client.stop_and_report("c-2")
            return await client.get("c-2"), report, await client.list(state="closed")

    with serve_metrics(body=drafts_payload(50)) as server:
        window, report, listed = asyncio.run(run())
    assert window.state == "closed"
    assert "Drafts                                        200" in report
    assert [w.id for w in listed] == ["c-2"]


def test_errors_say_what_happened(team: Team) -> None:
    with CollectorClient(team.base_url, api_key=team.key) as client:
        with pytest.raises(CollectorError) as missing:
            client.stop("nope")
        assert (missing.value.status, missing.value.detail) == (404, "window nope not found")
        with pytest.raises(CollectorError) as invalid:
            client.start("bad", ["ftp://h:1/"])
        assert invalid.value.status == 422
    with (
        CollectorClient(f"http://127.0.0.1:{free_port()}") as down,
        pytest.raises(CollectorUnavailable),
    ):
        down.get("x")


def test_list_endpoint_is_newest_first_and_filters_state(api: httpx.Client) -> None:
    with serve_metrics(body=drafts_payload(10)) as server:
        for window_id in ("first", "second", "third"):
            api.post(f"/windows/{window_id}/start", json={"targets": [server.target]})
        api.post("/windows/second/stop")
    assert [w["id"] for w in api.get("/windows").json()["windows"]] == ["third", "second", "first"]
    assert [w["id"] for w in api.get("/windows", params={"state": "open"}).json()["windows"]] == [
        "third",
        "first",
    ]
    assert [w["id"] for w in api.get("/windows", params={"limit": 1}).json()["windows"]] == [
        "third"
    ]
    assert api.get("/windows", params={"limit": 0}).status_code == 422


def test_every_window_pages_through_them_all(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    """`every_window` follows `next_cursor` until the last page, sync and async alike."""
    monkeypatch.setattr("specdec_collector.client.PAGE_LIMIT", 2)
    ids = [f"p-{index}" for index in range(5)]
    with (
        serve_metrics(body=drafts_payload(10)) as server,
        CollectorClient(team.base_url, api_key=team.key) as client,
    ):
        for window_id in ids:
            client.start(window_id, [server.target], labels={"odd": str(int(window_id[-1]) % 2)})
        every = [window.id for window in client.every_window()]
        odd = [window.id for window in client.every_window(labels=["odd=1"])]

        async def listed() -> list[str]:
            async with AsyncCollectorClient(team.base_url, api_key=team.key) as async_client:
                return [window.id async for window in async_client.every_window()]

        every_async = asyncio.run(listed())
        for window_id in ids:
            client.stop(window_id)
    assert every == every_async == ids[::-1]
    assert odd == ["p-3", "p-1"]
