"""The scrapes' name resolver: one team's never-answering names cannot starve another's."""

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from specdec_collector.core.targets import parse_target
from specdec_collector.sources.scrape import ScrapeConfig
from specdec_collector.sources.scrape.pinning import Pin, pins
from specdec_collector.sources.scrape.resolver import RESOLVING_FOR, SystemResolver

pytestmark = pytest.mark.anyio


class FakeDns:
    """getaddrinfo whose `*.evil` names block until released; every other name answers."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.asked: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        with self.lock:
            self.asked.append(host)
        if host.endswith(".evil"):
            self.released.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port))]


@pytest.fixture
def dns() -> Iterator[FakeDns]:
    fake = FakeDns()
    yield fake
    fake.released.set()


async def _as(owner: str, resolver: SystemResolver, host: str, timeout_s: float) -> list[str]:
    RESOLVING_FOR.set(owner)
    async with asyncio.timeout(timeout_s):
        return await resolver(host, 80)


async def test_a_team_whose_names_never_answer_cannot_starve_another(dns: FakeDns) -> None:
    resolver = SystemResolver(threads=16, per_owner=4, getaddrinfo=dns)
    stuck = [asyncio.create_task(_as("hostile", resolver, f"n{i}.evil", 0.2)) for i in range(50)]
    for outcome in await asyncio.gather(*stuck, return_exceptions=True):
        assert isinstance(outcome, TimeoutError)
    # Only its own four slots were taken: four threads block, the other 46 never started.
    assert len(dns.asked) == 4
    assert await _as("healthy", resolver, "vllm.test", 5) == ["10.0.0.7"]
    # Its slots stay taken while its threads block, though every caller gave up...
    with pytest.raises(TimeoutError):
        await _as("hostile", resolver, "ok.test", 0.2)
    dns.released.set()  # ...and come back when the resolver answers.
    assert await _as("hostile", resolver, "ok.test", 5) == ["10.0.0.7"]
    resolver.close()


async def test_a_name_being_looked_up_is_not_looked_up_twice(dns: FakeDns) -> None:
    resolver = SystemResolver(getaddrinfo=dns)
    waiting = [asyncio.create_task(_as(f"team{i}", resolver, "a.evil", 5)) for i in range(3)]
    await asyncio.sleep(0.1)
    dns.released.set()
    for outcome in await asyncio.gather(*waiting, return_exceptions=True):
        assert isinstance(outcome, socket.gaierror)
    assert dns.asked == ["a.evil"]
    resolver.close()


async def test_the_start_checks_of_two_teams_resolve_in_their_own_shares(dns: FakeDns) -> None:
    """A start's check of twenty names that never answer takes its team's four slots only: the
    other team's check resolves at once, while those are still blocked."""
    resolver = SystemResolver(threads=32, per_owner=4, getaddrinfo=dns)
    config = ScrapeConfig(timeout_s=10, max_bytes=1 << 20, resolve=resolver)
    hostile = [parse_target(f"n{i}.evil:8000") for i in range(20)]
    stuck = asyncio.create_task(pins(hostile, config, team="hostile"))
    await asyncio.sleep(0.1)
    (found,) = await asyncio.wait_for(
        pins([parse_target("vllm.test:8000")], config, team="healthy"), timeout=5
    )
    blocked = not dns.released.is_set() and not stuck.done()
    dns.released.set()
    await stuck
    resolver.close()
    assert isinstance(found, Pin) and found.url == "http://10.0.0.7:8000/metrics"
    assert blocked
