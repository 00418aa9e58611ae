"""An httpx transport that sends requests through aiohttp: the httpx API stays, the wire part
costs less.

Scrapes are many small GETs of large text answers. httpcore (httpx's own transport) spent
1.7-1.9 ms of CPU receiving an eight-engine answer and its connection pool looked at every
connection per request; aiohttp's C-accelerated parser and per-host pool halve the receive
(see README, Performance). Everything around it is httpx's: the client, its timeouts and
mounts (a scheme with a proxy in the environment keeps httpx's own proxy transport), and
the exceptions the scrape tells apart, which this module maps from aiohttp's:

    aiohttp.ClientError
    ├── ClientConnectorError (refused, unreachable, TLS handshake) ...... httpx.ConnectError
    ├── ServerTimeoutError
    │   ├── ConnectionTimeoutError ...................................... httpx.ConnectTimeout
    │   └── SocketTimeoutError, others ................................... httpx.ReadTimeout
    ├── ServerDisconnectedError, ClientResponseError (a bad answer) ..... httpx.RemoteProtocolError
    ├── ClientPayloadError, ClientOSError (reset mid-answer) ............ httpx.ReadError
    ├── InvalidURL ...................................................... httpx.InvalidURL
    └── anything else ................................................... httpx.TransportError
"""

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from functools import lru_cache

import aiohttp
import httpx
from multidict import CIMultiDict
from yarl import URL

# Most specific first: the first class an exception is an instance of decides.
_MAPPED: tuple[tuple[type[BaseException], type[httpx.TransportError]], ...] = (
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),
    (aiohttp.ServerTimeoutError, httpx.ReadTimeout),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),
    (aiohttp.ClientResponseError, httpx.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx.ReadError),
    (aiohttp.ClientOSError, httpx.ReadError),
    (aiohttp.ClientError, httpx.TransportError),
)


@contextmanager
def _as_httpx_errors(request: httpx.Request) -> Iterator[None]:
    try:
        yield
    except (TimeoutError, aiohttp.ClientError) as exc:
        if isinstance(exc, asyncio.TimeoutError):  # aiohttp's own timeouts are ServerTimeoutError
            raise httpx.ReadTimeout("timed out", request=request) from exc
        if isinstance(exc, aiohttp.InvalidURL):
            raise httpx.InvalidURL(str(exc)) from exc
        for source, target in _MAPPED:
            if isinstance(exc, source):
                raise target(str(exc) or type(exc).__name__, request=request) from exc
        raise  # pragma: no cover - every ClientError is mapped above


#: Connections per origin (host and port) at most.
PER_ORIGIN = 32


@lru_cache(maxsize=4096)
def _yarl_url(url: str) -> URL:
    """aiohttp's URL for httpx's, once per URL (already quoted by httpx: taken as it is)."""
    return URL(url, encoded=True)


class _AnswerStream(httpx.AsyncByteStream):
    """The answer's body as it arrives, undecoded (the scrape decodes gzip itself, bounded)."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response, self._request = response, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx_errors(self._request):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Direct HTTP/1.1 connections through one aiohttp session: a pool per host (at most
    `per_origin` connections each), one TLS context for every origin (building one loads the
    CA bundle, ~40 ms of CPU), TLS server names from httpx's `sni_hostname` extension (a
    request pinned to an address keeps its host's name for the certificate check)."""

    def __init__(self, per_origin: int = PER_ORIGIN, keepalive_s: float = 15.0) -> None:
        self._per_origin = per_origin
        self._keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None
        # Made now, not at the first scrape: loading the CA bundle is ~40 ms of CPU that the
        # first window's start would wait for.
        self._ssl_context: ssl.SSLContext = httpx.create_ssl_context()

    def _open(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the running event loop.
        connector = aiohttp.TCPConnector(
            limit=0,  # no bound across hosts: each host has its own
            limit_per_host=self._per_origin,
            keepalive_timeout=self._keepalive_s,
            ssl=self._ssl_context,
        )
        # No cookies, no default headers: each request carries httpx's.
        return aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._session is None:
            self._session = self._open()
        timeouts = request.extensions.get("timeout", {})
        headers = CIMultiDict(
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in request.headers.raw
        )
        body = await request.aread()
        with _as_httpx_errors(request):
            response = await self._session.request(
                request.method,
                _yarl_url(str(request.url)),
                headers=headers,
                data=body or None,
                allow_redirects=False,
                server_hostname=request.extensions.get("sni_hostname"),
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=timeouts.get("pool"),
                    sock_connect=timeouts.get("connect"),
                    sock_read=timeouts.get("read"),
                ),
            )
        return httpx.Response(
            status_code=response.status,
            headers=[(name, value) for name, value in response.raw_headers],
            stream=_AnswerStream(response, request),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode(),
            },
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
