"""Where a request goes: straight to its server, or through the environment's proxy. Decided
once, here, for both the target check and the connection.

httpx decides from HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY with rules of its own, and
urllib with others: for a NO_PROXY entry with a port (`evil.corp.test:8080`) or a scheme
(`http://*.svc.test`) they disagree, and a check by one and a connection by the other would
fetch such a name directly with no check of where it resolved. So the client trusts no
environment (`trust_env=False`), and `RoutedTransport` sends each request where `route_of`
said: the route is a request extension the pin sets (`ROUTE`), or decided by the same
function for a request without one (a Prometheus query).

`route_of` follows urllib's rules (`proxy_bypass_environment`, what `urllib.request` and
`requests` do): an entry matches a host, a domain suffix, or `*`; one with a port only that
port.
"""

import asyncio
import urllib.request
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import httpx
from multidict import CIMultiDict
from yarl import URL

from specdec_collector.sources.scrape.transport import AiohttpTransport, Answer, HttpxTransport

#: The request extension that names its route.
ROUTE = "specdec_route"


class Route(StrEnum):
    DIRECT = "direct"  # no proxy for the scheme
    BYPASSED = "bypassed"  # a proxy is set, but NO_PROXY names the host: straight there too
    PROXIED = "proxied"  # through the proxy, which resolves the name


def proxy_of(scheme: str, proxies: Mapping[str, str]) -> str | None:
    """The proxy URL a request of `scheme` goes through, if any (ALL_PROXY for any scheme)."""
    return proxies.get(scheme) or proxies.get("all") or None


def route_of(scheme: str, host: str, port: int | None, proxies: Mapping[str, str]) -> Route:
    """The route of a request to `host`:`port` by `scheme`, given the proxies read once."""
    if proxy_of(scheme, proxies) is None:
        return Route.DIRECT
    # What `proxy_bypass` does on Linux (typeshed omits it); the port counts for an entry that
    # names one.
    shown = f"[{host}]" if ":" in host else host
    name = shown if port is None else f"{shown}:{port}"
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    return Route.BYPASSED if bypass(name, dict(proxies)) else Route.PROXIED


class RoutedTransport(httpx.AsyncBaseTransport):
    """Sends each request where its route says: `direct` for direct and bypassed ones, the
    proxy of its scheme for proxied ones. The scrapes' transport (`transport.ScrapeTransport`),
    and an httpx transport for the Prometheus API's client."""

    def __init__(self, direct: AiohttpTransport, proxies: Mapping[str, str]) -> None:
        self.direct = direct
        self.proxies = dict(proxies)
        self._through: dict[str, HttpxTransport] = {}

    def _proxy_transport(self, proxy: str) -> HttpxTransport:
        transport = self._through.get(proxy)
        if transport is None:
            made = HttpxTransport(httpx.AsyncHTTPTransport(proxy=proxy))
            transport = self._through[proxy] = made
        return transport

    async def get(
        self, url: str, headers: CIMultiDict[str], extensions: Mapping[str, Any], timeout_s: float
    ) -> Answer:
        if extensions.get(ROUTE, Route.DIRECT) != Route.PROXIED:
            return await self.direct.get(url, headers, extensions, timeout_s)
        proxy = proxy_of(URL(url, encoded=True).scheme, self.proxies)
        assert proxy is not None, "a proxied route has a proxy"
        return await self._proxy_transport(proxy).get(url, headers, extensions, timeout_s)

    def connect_ahead(
        self, url: str, extensions: Mapping[str, Any], timeout_s: float
    ) -> "asyncio.Task[None] | None":
        if extensions.get(ROUTE, Route.DIRECT) == Route.PROXIED:
            return None  # the connection is the proxy's
        return self.direct.connect_ahead(url, extensions, timeout_s)

    def route(self, request: httpx.Request) -> Route:
        chosen = request.extensions.get(ROUTE)
        if chosen is not None:
            return Route(chosen)
        url = request.url
        return route_of(url.scheme, url.host, url.port, self.proxies)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.route(request) is not Route.PROXIED:
            return await self.direct.handle_async_request(request)
        proxy = proxy_of(request.url.scheme, self.proxies)
        assert proxy is not None, "a proxied route has a proxy"
        return await self._proxy_transport(proxy).transport.handle_async_request(request)

    async def aclose(self) -> None:
        await self.direct.aclose()
        for transport in self._through.values():
            await transport.aclose()
