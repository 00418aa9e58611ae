"""The HTTP client of every scrape: explicit timeouts, proxies from the environment, no
redirects, no cookies, and a small connection pool per origin."""

import asyncio
import urllib.request
from collections.abc import Mapping
from functools import lru_cache
from http.cookiejar import Cookie, CookieJar
from typing import Any

import httpx
from multidict import CIMultiDict

from specdec_collector.sources.scrape.routes import ROUTE, Route, RoutedTransport
from specdec_collector.sources.scrape.sharing import PATIENCE_S, ScrapeSharing
from specdec_collector.sources.scrape.transport import (
    PER_ORIGIN,
    AiohttpTransport,
    DirectAnswer,
    direct_timeout,
)

# Ask for the classic text format only. prometheus_client (SGLang, LMDeploy) answers OpenMetrics
# to any Accept that names it, whatever its q-value, and from 0.23 on escapes the colons of its
# sample names there; servers that always answer OpenMetrics (vLLM's Rust frontend) are read
# by the same extraction, in both spellings of every name.
ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
# gzip only, decoded here: httpx's own decoders have no output limit per chunk.
ACCEPT_ENCODING = "gzip, identity"


class _EmptyJar(CookieJar):
    """A cookie jar that keeps nothing."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def set_cookie(self, cookie: Cookie) -> None:
        return None


class _NoCookies(httpx.Cookies):
    """Cookies that are never read from an answer nor sent: httpx would otherwise wrap every
    request and answer for `http.cookiejar`, at a cost on every scrape, to find none."""

    def __init__(self) -> None:
        super().__init__(_EmptyJar())

    def extract_cookies(self, response: httpx.Response) -> None:
        return None

    def set_cookie_header(self, request: httpx.Request) -> None:
        return None


_NO_COOKIES = _NoCookies()  # keeps nothing: one for every client


class ScrapeClient(httpx.AsyncClient):
    """httpx's client without cookies: cookies are per host, not per port, so a cookie one
    target sets (a hostile team's server) would be sent to every other server on its host,
    and the shared client's jar would grow without bound. A scrape needs none. Scrapes of one
    endpoint asked for while a request of it is in flight share the next one (`sharing`).
    Each request goes where `routes.route_of` decided (`transport`); the environment's proxy
    settings are read there, never by httpx."""

    def __init__(self, transport: RoutedTransport, **kwargs: Any) -> None:
        super().__init__(transport=transport, trust_env=False, **kwargs)
        self.routes = transport
        # Its headers as made (httpx's defaults and the scrape's), for requests sent direct.
        self._made_headers = tuple(self.headers.multi_items())
        self.sharing = ScrapeSharing(PATIENCE_S, PER_ORIGIN)

    async def get_direct(
        self,
        url: str,
        headers: Mapping[str, str],
        extensions: Mapping[str, Any],
        timeout_s: float,
    ) -> DirectAnswer | None:
        """GET `url` straight from its server, as `send` would with a request of these
        `headers` and `extensions` (the same headers on the wire: the client's, then the
        request's); None if the request goes through a proxy (httpx sends those)."""
        if extensions.get(ROUTE, Route.DIRECT) == Route.PROXIED:
            return None
        merged = CIMultiDict(self._made_headers)
        merged.update(headers)
        quoted = str(parsed_url(url))  # quoted as httpx quotes it
        timeout = direct_timeout(timeout_s)
        return await self.routes.direct.get(quoted, merged, extensions.get("sni_hostname"), timeout)

    def connect_ahead(
        self, url: str, extensions: Mapping[str, Any], timeout_s: float
    ) -> "asyncio.Task[None] | None":
        """Start opening the connection a request of `url` (pinned, with its `extensions`)
        will take, if it goes straight to its server (see `AiohttpTransport`); the opening,
        if one was started."""
        if extensions.get(ROUTE, Route.DIRECT) == Route.PROXIED:
            return None
        return self.routes.direct.connect_ahead(url, extensions.get("sni_hostname"), timeout_s)

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        """Ignored (httpx's own `__init__` sets an empty jar)."""


@lru_cache(maxsize=4096)
def parsed_url(url: str) -> httpx.URL:
    """The URL as httpx parses it, once per URL: every scrape of a target asks for the same
    one, and parsing it anew would be a large part of the HTTP client's work per request."""
    return httpx.URL(url)


def new_client(timeout_s: float, proxies: Mapping[str, str] | None = None) -> httpx.AsyncClient:
    """The shared client: explicit timeouts, proxies from the environment (HTTP_PROXY,
    HTTPS_PROXY, ALL_PROXY, NO_PROXY; or `proxies`, as `urllib.request.getproxies` gives them),
    no redirects, no cookies kept.

    Requests that go straight to their server go through `AiohttpTransport`; proxied ones
    through httpx's own proxy transport (see `routes`).
    """
    found = urllib.request.getproxies() if proxies is None else proxies
    return ScrapeClient(
        RoutedTransport(AiohttpTransport(), found),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,
        headers={"Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING},
    )
