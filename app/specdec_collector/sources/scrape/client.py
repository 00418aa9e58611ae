"""The clients of the collector's requests: `ScrapeClient` for scrapes (explicit timeouts,
no redirects, no cookies, a small connection pool per origin, over one `ScrapeTransport`),
and an httpx client for the Prometheus API over the same routes."""

import asyncio
import urllib.request
from collections.abc import Mapping
from functools import lru_cache
from http.cookiejar import Cookie, CookieJar
from types import TracebackType
from typing import Any

import httpx
from multidict import CIMultiDict

from specdec_collector.sources.scrape.routes import RoutedTransport
from specdec_collector.sources.scrape.sharing import PATIENCE_S, ScrapeSharing
from specdec_collector.sources.scrape.transport import (
    PER_ORIGIN,
    AiohttpTransport,
    Answer,
    ScrapeTransport,
)

# Ask for the classic text format only. prometheus_client (SGLang, LMDeploy) answers OpenMetrics
# to any Accept that names it, whatever its q-value, and from 0.23 on escapes the colons of its
# sample names there; servers that always answer OpenMetrics (vLLM's Rust frontend) are read
# by the same extraction, in both spellings of every name.
ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
# gzip only, decoded here: httpx's own decoders have no output limit per chunk.
ACCEPT_ENCODING = "gzip, identity"
#: Every scrape's headers, before the target's own: httpx's defaults, and the scrape's.
SCRAPE_HEADERS = (
    ("Accept", ACCEPT),
    ("Accept-Encoding", ACCEPT_ENCODING),
    ("Connection", "keep-alive"),
    ("User-Agent", f"python-httpx/{httpx.__version__}"),
)


class _EmptyJar(CookieJar):
    """A cookie jar that keeps nothing."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def set_cookie(self, cookie: Cookie) -> None:
        return None


class _NoCookies(httpx.Cookies):
    """Cookies that are never read from an answer nor sent: httpx would otherwise wrap every
    request and answer for `http.cookiejar`, to find none."""

    def __init__(self) -> None:
        super().__init__(_EmptyJar())

    def extract_cookies(self, response: httpx.Response) -> None:
        return None

    def set_cookie_header(self, request: httpx.Request) -> None:
        return None


_NO_COOKIES = _NoCookies()  # keeps nothing: one for every client


class QueryClient(httpx.AsyncClient):
    """httpx's client without cookies: cookies are per host, not per port, so a cookie one
    server sets would be sent to every other server on its host, and the shared client's jar
    would grow without bound. The environment's proxy settings are read by `routes`, never by
    httpx."""

    def __init__(self, transport: RoutedTransport, **kwargs: Any) -> None:
        super().__init__(transport=transport, trust_env=False, **kwargs)

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        """Ignored (httpx's own `__init__` sets an empty jar)."""


class ScrapeClient:
    """Sends every scrape's request through one `ScrapeTransport`, with `SCRAPE_HEADERS` and
    no cookies (a scrape needs none, and a hostile server's would reach its neighbours). Scrapes
    of one endpoint asked for while a request of it is in flight share the next one
    (`sharing`). Each request goes where `routes.route_of` decided (the pin's `ROUTE`
    extension, read by the transport)."""

    def __init__(self, transport: ScrapeTransport) -> None:
        self.transport = transport
        self.sharing = ScrapeSharing(PATIENCE_S, PER_ORIGIN)

    async def get(
        self,
        url: str,
        headers: Mapping[str, str],
        extensions: Mapping[str, Any],
        timeout_s: float,
    ) -> Answer:
        """GET `url` with the scrape's headers, then `headers` (the target's and its pin's)."""
        merged = CIMultiDict(SCRAPE_HEADERS)
        merged.update(headers)
        quoted = str(parsed_url(url))  # quoted as httpx quotes it
        return await self.transport.get(quoted, merged, extensions, timeout_s)

    def connect_ahead(
        self, url: str, extensions: Mapping[str, Any], timeout_s: float
    ) -> "asyncio.Task[None] | None":
        """Start opening the connection a request of `url` (pinned, with its `extensions`)
        will take, where the transport can; the opening, if one was started."""
        return self.transport.connect_ahead(url, extensions, timeout_s)

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> "ScrapeClient":
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


@lru_cache(maxsize=4096)
def parsed_url(url: str) -> httpx.URL:
    """The URL as httpx parses it, once per URL: every scrape of a target asks for the same
    one, and parsing it anew would be a large part of the HTTP client's work per request."""
    return httpx.URL(url)


def new_client(
    proxies: Mapping[str, str] | None = None, transport: ScrapeTransport | None = None
) -> ScrapeClient:
    """The scrapes' client: through `transport`, or the production one (`routes`): straight
    to the server through `AiohttpTransport`, or through the environment's proxy (HTTP_PROXY,
    HTTPS_PROXY, ALL_PROXY, NO_PROXY; or `proxies`, as `urllib.request.getproxies` gives
    them) by httpx's own transport."""
    found = urllib.request.getproxies() if proxies is None else proxies
    return ScrapeClient(transport or RoutedTransport(AiohttpTransport(), found))


def new_query_client(timeout_s: float, proxies: Mapping[str, str] | None = None) -> QueryClient:
    """The Prometheus API's client: explicit timeouts, the same routes as scrapes, no
    redirects, no cookies kept."""
    found = urllib.request.getproxies() if proxies is None else proxies
    return QueryClient(
        RoutedTransport(AiohttpTransport(), found),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,
    )
