"""Scrapes of one endpoint asked for while a request of it is in flight share the next one, sent
after each of them was asked for (or beside a slow one, after a patience); against a real
server that counts what it is asked and when."""

import asyncio
import time

import httpx
import pytest

from app.promtext import extract_spec_decode
from app.scrape import ScrapeConfig, ScrapeOutcome, new_client, scrape_target
from app.scrape.client import ScrapeClient
from app.scrape.sharing import ScrapeSharing
from app.targets import Target, parse_target
from tests.metrics_server import serve_metrics
from tests.payloads import EngineCounters, vllm_payload

pytestmark = pytest.mark.anyio

PAYLOAD = vllm_payload([EngineCounters(drafts=5, draft_tokens=15, accepted_per_pos=[3, 2, 1])])


def _share(client: httpx.AsyncClient, patience_s: float, per_endpoint: int) -> None:
    """Wait `patience_s` for a request in flight; at most `per_endpoint` requests of one
    endpoint at once (the service: 0.25 s and 32)."""
    assert isinstance(client, ScrapeClient)
    client.sharing = ScrapeSharing(patience_s, per_endpoint)


async def test_scrapes_asked_meanwhile_share_one_request_sent_after_each_was_asked() -> None:
    config = ScrapeConfig(5.0, 1 << 20)
    with serve_metrics(body=PAYLOAD.encode(), delay_s=0.3) as server:
        async with new_client(5.0) as client:
            _share(client, patience_s=10.0, per_endpoint=32)
            targets = [parse_target(server.target) for _ in range(10)]  # ten equal objects
            asked: list[float] = []

            async def scrape(target: Target) -> ScrapeOutcome:
                asked.append(time.monotonic())
                return await scrape_target(client, target, config)

            first = asyncio.ensure_future(scrape(targets[0]))
            await asyncio.sleep(0.1)  # sent: the next ones wait for it to end
            waiting = [asyncio.ensure_future(scrape(t)) for t in targets[1:]]
            outcomes = await asyncio.gather(first, *waiting)
    assert server.count() == 2  # one, then one for the nine that waited together
    series = extract_spec_decode(PAYLOAD)
    for target, outcome in zip(targets, outcomes, strict=True):
        assert outcome.target is target  # each under its own target
        assert outcome.error is None and outcome.series == series
    (_, first_answered), (shared_arrived, _) = sorted(server.spans)
    assert shared_arrived > max(asked)  # a reading after every call that shares it
    assert shared_arrived >= first_answered  # sent when the one in flight ended


async def test_a_slow_request_in_flight_is_waited_on_for_the_patience_only() -> None:
    config = ScrapeConfig(5.0, 1 << 20)
    with serve_metrics(body=PAYLOAD.encode(), delay_s=1.0) as server:
        async with new_client(5.0) as client:
            _share(client, patience_s=0.2, per_endpoint=32)
            target = parse_target(server.target)
            first = asyncio.ensure_future(scrape_target(client, target, config))
            await asyncio.sleep(0.1)
            began = time.monotonic()
            waited = [asyncio.ensure_future(scrape_target(client, target, config)) for _ in "ab"]
            outcomes = await asyncio.gather(first, *waited)
    assert [o.error for o in outcomes] == [None] * 3
    (_, first_answered), (shared_arrived, _) = sorted(server.spans)
    assert began + 0.2 <= shared_arrived < first_answered  # beside the slow one, both waiters


async def test_an_endpoint_with_every_place_taken_is_waited_on_past_the_patience() -> None:
    config = ScrapeConfig(5.0, 1 << 20)
    with serve_metrics(body=PAYLOAD.encode(), delay_s=0.5) as server:
        async with new_client(5.0) as client:
            _share(client, patience_s=0.05, per_endpoint=1)
            target = parse_target(server.target)
            first = asyncio.ensure_future(scrape_target(client, target, config))
            await asyncio.sleep(0.1)
            late = await scrape_target(client, target, config)
            assert (await first).error is None and late.error is None
    (_, first_answered), (shared_arrived, _) = sorted(server.spans)
    assert shared_arrived >= first_answered


async def test_a_waiting_scrape_keeps_its_own_timeout_and_the_request_goes_on() -> None:
    config = ScrapeConfig(0.5, 1 << 20)
    with serve_metrics(body=PAYLOAD.encode(), delay_s=0.4) as server:
        async with new_client(0.5) as client:
            _share(client, patience_s=10.0, per_endpoint=1)
            target = parse_target(server.target)
            first = asyncio.ensure_future(scrape_target(client, target, config))
            await asyncio.sleep(0.05)
            began = time.monotonic()
            late = await scrape_target(client, target, config)  # 0.35 s waiting + 0.4 s
            waited = time.monotonic() - began
            assert (await first).error is None
            await asyncio.sleep(0.6)  # the shared request ends meanwhile
    assert late.error == f"Failed to fetch metrics from {server.url}: timed out after 0.5 s"
    assert 0.5 <= waited < 1.5  # its own timeout, not the shared request's end
    assert server.count() == 2


async def test_a_cancelled_waiting_scrape_leaves_the_request_to_the_others() -> None:
    config = ScrapeConfig(5.0, 1 << 20)
    with serve_metrics(body=PAYLOAD.encode(), delay_s=0.2) as server:
        async with new_client(5.0) as client:
            _share(client, patience_s=10.0, per_endpoint=1)
            target = parse_target(server.target)
            first = asyncio.ensure_future(scrape_target(client, target, config))
            await asyncio.sleep(0.05)
            gone = asyncio.ensure_future(scrape_target(client, target, config))
            kept = asyncio.ensure_future(scrape_target(client, target, config))
            await asyncio.sleep(0.05)
            gone.cancel()
            assert (await first).error is None and (await kept).error is None
            assert gone.cancelled()
    assert server.count() == 2


async def test_scrapes_with_other_headers_never_share() -> None:
    config = ScrapeConfig(5.0, 1 << 20)
    with serve_metrics(body=PAYLOAD.encode(), delay_s=0.2) as server:
        async with new_client(5.0) as client:
            _share(client, patience_s=10.0, per_endpoint=1)
            url = f"http://{server.target}/metrics"
            teams = [parse_target({"url": url, "headers": {"X-Team": f"t{i}"}}) for i in range(3)]
            outcomes = await asyncio.gather(*(scrape_target(client, t, config) for t in teams))
    assert [o.error for o in outcomes] == [None] * 3
    assert sorted(request["x-team"] for request in server.requests) == ["t0", "t1", "t2"]
