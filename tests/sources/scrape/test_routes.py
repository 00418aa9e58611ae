"""With a proxy in the environment, one decision says where each scrape goes, and that
decision is both what the target check assumes and where the connection is made.

The proxy is a real HTTP server that records what it is asked (an HTTP proxy receives the
absolute URL in the request line); the names resolve through a resolver the test gives, as
a DNS zone the team controls would answer."""

import socket
from collections.abc import Awaitable, Callable

import pytest

from specdec_collector.core.targets import TargetPolicy, parse_target
from specdec_collector.sources.scrape import ScrapeConfig, new_client, scrape_target
from specdec_collector.sources.scrape.routes import Route, route_of
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import fixture

MAX = 1 << 20
pytestmark = pytest.mark.anyio


def answering(table: dict[str, list[str]]) -> Callable[[str, int], Awaitable[list[str]]]:
    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]

    return resolve


async def _scrape(target: str, proxies: dict[str, str], names: dict[str, list[str]]) -> str | None:
    config = ScrapeConfig(2.0, MAX, TargetPolicy(), answering(names), proxies)
    async with new_client(proxies) as client:
        outcome = await scrape_target(client, parse_target(target), config)
    return outcome.error


def test_no_proxy_entries_with_a_port_or_a_scheme_are_one_decision() -> None:
    proxies = {"http": "http://proxy.test:3128", "no": "evil.corp.test:8080,http://*.svc.test"}
    assert route_of("http", "evil.corp.test", 8080, proxies) is Route.BYPASSED
    assert route_of("http", "evil.corp.test", 9090, proxies) is Route.PROXIED
    assert route_of("http", "a.svc.test", 80, proxies) is Route.PROXIED  # urllib: no schemes
    assert route_of("https", "a.svc.test", 443, proxies) is Route.DIRECT  # no HTTPS proxy


async def test_a_bypassed_name_is_checked_and_pinned_to_the_checked_address() -> None:
    """NO_PROXY names the host with its port: the scrape goes straight there, to the address
    the check found (the name is known only to the team's DNS), and one resolving to cloud
    metadata is refused without a request."""
    text = fixture("vllm_v1_dp1_k5.txt").encode()
    with serve_metrics(body=text) as server, serve_metrics(body=b"") as proxy:
        name = f"evil.corp.test:{server.port}"
        proxies = {"http": f"http://{proxy.target}", "no": name}
        reached = await _scrape(name, proxies, {"evil.corp.test": ["127.0.0.1"]})
        refused = await _scrape(name, proxies, {"evil.corp.test": ["169.254.169.254"]})
    assert reached is None and server.count() == 1
    assert server.requests[0]["host"] == name
    assert refused is not None and "169.254.169.254 is link-local (cloud metadata)" in refused
    assert proxy.count() == 0


async def test_a_proxied_name_that_resolves_here_to_metadata_is_refused() -> None:
    """Through the proxy the proxy resolves the name; one that resolves here to a metadata
    address is refused before the proxy is asked, one that does not resolve here is the
    proxy's to reach."""
    text = fixture("vllm_v1_dp1_k5.txt").encode()
    with serve_metrics(body=text) as proxy:
        proxies = {"http": f"http://{proxy.target}", "no": "http://*.svc.test"}
        refused = await _scrape("a.svc.test:8080", proxies, {"a.svc.test": ["fd00:ec2::254"]})
        asked = proxy.count()
        unknown = await _scrape("b.svc.test:8080", proxies, {})
    assert refused is not None and "resolves to a refused address" in refused
    assert asked == 0
    assert unknown is None and proxy.requests[0]["path"] == "http://b.svc.test:8080/metrics"
