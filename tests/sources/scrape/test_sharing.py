"""Scrapes of one endpoint asked for while a request of it is in flight share the next one, sent
after each of them was asked for (or beside a slow one, after a patience); against a real
server that counts what it is asked and when."""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest

from specdec_collector.core.exposition import extract_spec_decode
from specdec_collector.core.readings import TargetReading
from specdec_collector.core.targets import Target, parse_target
from specdec_collector.sources.scrape import ScrapeConfig, new_client, scrape_target
from specdec_collector.sources.scrape.client import ScrapeClient
from specdec_collector.sources.scrape.sharing import (
    PATIENCE_S,
    RATE_BURST,
    REMEMBERED,
    ScrapeSharing,
)
from specdec_collector.store.tables import utcnow
from tests.support.metrics_server import MetricsServer, serve_metrics
from tests.support.payloads import InstanceCounters, vllm_payload

pytestmark = pytest.mark.anyio

PAYLOAD = vllm_payload([InstanceCounters(drafts=5, draft_tokens=15, accepted_per_pos=[3, 2, 1])])


def _share(client: ScrapeClient, patience_s: float, per_endpoint: int) -> None:
    """Wait `patience_s` for a request in flight; at most `per_endpoint` requests of one
    endpoint at once (the service: 0.25 s and 32)."""
    client.sharing = ScrapeSharing(patience_s, per_endpoint)


@dataclass(frozen=True)
class InFlight:
    server: MetricsServer
    target: Target
    scrape: Callable[[], Awaitable[TargetReading]]  # another scrape of the target
    first: "asyncio.Future[TargetReading]"  # the scrape in flight


@asynccontextmanager
async def _one_in_flight(
    delay_s: float,
    patience_s: float,
    per_endpoint: int,
    timeout_s: float = 5.0,
    ahead_s: float = 0.1,
) -> AsyncIterator[InFlight]:
    """A server answering after `delay_s`, a client sharing as `_share` says, and a first
    scrape of the server sent `ahead_s` ago."""
    config = ScrapeConfig(timeout_s, 1 << 20)
    with serve_metrics(body=PAYLOAD.encode(), delay_s=delay_s) as server:
        async with new_client() as client:
            _share(client, patience_s, per_endpoint)
            target = parse_target(server.target)
            first = asyncio.ensure_future(scrape_target(client, target, config))
            await asyncio.sleep(ahead_s)
            yield InFlight(server, target, lambda: scrape_target(client, target, config), first)


async def test_scrapes_asked_meanwhile_share_one_request_sent_after_each_was_asked() -> None:
    config = ScrapeConfig(5.0, 1 << 20)
    with serve_metrics(body=PAYLOAD.encode(), delay_s=0.3) as server:
        async with new_client() as client:
            _share(client, patience_s=10.0, per_endpoint=32)
            targets = [parse_target(server.target) for _ in range(10)]  # ten equal objects
            asked: list[float] = []

            async def scrape(target: Target) -> TargetReading:
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
    async with _one_in_flight(delay_s=3.0, patience_s=0.2, per_endpoint=32) as flight:
        waited = [asyncio.ensure_future(flight.scrape()) for _ in "ab"]
        outcomes = await asyncio.gather(flight.first, *waited)
    assert [o.error for o in outcomes] == [None] * 3
    assert flight.server.count() == 2  # both waiters shared one request...
    (_, first_answered), (shared_arrived, _) = sorted(flight.server.spans)
    assert shared_arrived < first_answered  # ...sent beside the slow one, not after it


async def test_an_endpoint_with_every_place_taken_is_waited_on_past_the_patience() -> None:
    async with _one_in_flight(delay_s=0.5, patience_s=0.05, per_endpoint=1) as flight:
        late = await flight.scrape()
        assert (await flight.first).error is None and late.error is None
    (_, first_answered), (shared_arrived, _) = sorted(flight.server.spans)
    assert shared_arrived >= first_answered


async def test_a_waiting_scrape_keeps_its_own_timeout_and_the_request_goes_on() -> None:
    async with _one_in_flight(
        delay_s=0.4, patience_s=10.0, per_endpoint=1, timeout_s=0.5, ahead_s=0.05
    ) as flight:
        late = await flight.scrape()  # 0.35 s waiting + 0.4 s: past its own timeout
        assert (await flight.first).error is None
        await asyncio.sleep(0.6)  # the shared request ends meanwhile
    url = flight.server.url
    assert late.error == f"Failed to fetch metrics from {url}: timed out after 0.5 s"
    assert flight.server.count() == 2


async def test_a_cancelled_waiting_scrape_leaves_the_request_to_the_others() -> None:
    async with _one_in_flight(delay_s=0.2, patience_s=10.0, per_endpoint=1, ahead_s=0.05) as flight:
        gone = asyncio.ensure_future(flight.scrape())
        kept = asyncio.ensure_future(flight.scrape())
        await asyncio.sleep(0.05)
        gone.cancel()
        assert (await flight.first).error is None and (await kept).error is None
        assert gone.cancelled()
    assert flight.server.count() == 2


async def test_scrapes_with_other_headers_never_share() -> None:
    config = ScrapeConfig(5.0, 1 << 20)
    with serve_metrics(body=PAYLOAD.encode(), delay_s=0.2) as server:
        async with new_client() as client:
            _share(client, patience_s=10.0, per_endpoint=1)
            url = f"http://{server.target}/metrics"
            teams = [parse_target({"url": url, "headers": {"X-Team": f"t{i}"}}) for i in range(3)]
            outcomes = await asyncio.gather(*(scrape_target(client, t, config) for t in teams))
    assert [o.error for o in outcomes] == [None] * 3
    assert sorted(request["x-team"] for request in server.requests) == ["t0", "t1", "t2"]


async def test_a_herd_on_one_endpoint_shares_requests_at_the_endpoints_rate() -> None:
    """Scrapes asked every 10 ms for a second: the first `burst` go out at once, the rest
    share the requests the rate allows, each answered by a request that arrived after it was
    asked."""
    config = ScrapeConfig(5.0, 1 << 20)
    rate_per_s, burst = 10.0, 3.0
    with serve_metrics(body=PAYLOAD.encode()) as server:
        async with new_client() as client:
            client.sharing = ScrapeSharing(10.0, 32, rate_per_s=rate_per_s, burst=burst)
            target = parse_target(server.target)
            asked: list[float] = []

            async def scrape() -> tuple[float, TargetReading]:
                asked_at = time.monotonic()
                asked.append(asked_at)
                return asked_at, await scrape_target(client, target, config)

            began = time.monotonic()
            herd = []
            for _ in range(100):
                herd.append(asyncio.ensure_future(scrape()))
                await asyncio.sleep(0.01)
            outcomes = await asyncio.gather(*herd)
            took = time.monotonic() - began
    # Each answered within its timeout (the last one waited one turn at the rate, not more).
    assert [reading.error for _, reading in outcomes] == [None] * 100
    # Without the rate, each of the 100 would have had its own request (none overlaps); the
    # bound grows with the time the herd took, so a slow machine only loosens it.
    assert server.count() <= burst + rate_per_s * took + 1
    arrivals = sorted(arrived for arrived, _ in server.spans)
    for asked_at in asked:  # a request sent after it was asked answered each scrape
        assert any(arrived >= asked_at for arrived in arrivals)


async def test_a_windows_own_scrapes_never_wait_for_the_rate() -> None:
    """A burst's worth of scrapes one after another (starts and stops of windows in quick
    succession): each is sent as it is asked, none waits for the rate (one at a time, they
    would wait for the rate: here one so slow that a wait would outlast the test)."""
    config = ScrapeConfig(30.0, 1 << 20)
    count = int(RATE_BURST)
    with serve_metrics(body=PAYLOAD.encode()) as server:
        async with new_client() as client:
            client.sharing = ScrapeSharing(PATIENCE_S, 32, rate_per_s=1e-6, burst=RATE_BURST)
            target = parse_target(server.target)
            for _ in range(count):
                assert (await scrape_target(client, target, config)).error is None
    assert server.count() == count


async def test_endpoints_no_longer_asked_are_forgotten_once_their_rate_is_whole_again() -> None:
    sharing = ScrapeSharing(0.25, 32, rate_per_s=1000.0, burst=2.0)
    target = parse_target("127.0.0.1:9")  # never asked: `send` answers
    reading = TargetReading(target, utcnow(), {})

    async def send() -> TargetReading:
        return reading

    for index in range(3 * REMEMBERED):
        await sharing.scrape(("endpoint", index), target, 1.0, send)
        if index % 500 == 0:
            await asyncio.sleep(0.003)  # the buckets of the endpoints before refill
    assert len(sharing._endpoints) <= 2 * REMEMBERED
