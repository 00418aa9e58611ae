"""The seam under every scrape: a `ScrapeTransport` GETs a URL and gives back an `Answer`.
Production's is `routes.RoutedTransport` (straight to the server through `AiohttpTransport`,
through a proxy by httpx's own transport); a test double is any httpx transport (respx's, or
`httpx.MockTransport`) wrapped in `HttpxTransport`, so a test's scrape takes the production
path down to this seam.

Scrapes are many small GETs of large text answers. httpcore (httpx's own transport) receives
an answer in Python and its connection pool looks at every connection per request; aiohttp
has a C-accelerated parser and a pool per host (docs/performance.md), and a scrape straight
to its server skips httpx's request and response objects (`AiohttpTransport.get`,
`DirectAnswer`). httpx's exceptions are the ones a scrape tells apart, whatever the
transport; this module maps aiohttp's to them:

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
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Protocol

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
def _as_httpx_errors(request: httpx.Request | None) -> Iterator[None]:
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

#: For how long after a request to an origin ended its connection is taken to be open still,
#: so `connect_ahead` opens no other. Less than the keep-alive of the servers scraped (uvicorn,
#: under vLLM and SGLang, closes an idle connection after 5 s): a guess that is wrong costs
#: only what a connection not opened ahead costs.
FRESH_S = 4.0

#: Origins whose last use `connect_ahead` remembers, at most (past it, the stale ones go).
MAX_ORIGINS_REMEMBERED = 16384

#: An origin as a connection pool tells them apart: scheme, host, port, TLS server name.
Origin = tuple[str, str | None, int | None, str | None]


@lru_cache(maxsize=4096)
def _yarl_url(url: str) -> URL:
    """aiohttp's URL for httpx's, once per URL (already quoted by httpx: taken as it is)."""
    return URL(url, encoded=True)


def _origin(url: URL, server_hostname: str | None) -> Origin:
    return (url.scheme, url.raw_host, url.port, server_hostname)


class Answer(Protocol):
    """What a scrape reads of an answer: an `httpx.Response`, or a `DirectAnswer`."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class ScrapeTransport(Protocol):
    """How a scrape's request reaches its server.

    Concurrency contract: one instance serves every scrape of the process, on one event loop;
    `get` and `connect_ahead` may be called by many tasks at once, and `aclose` once, after
    the last request. `get` raises only `httpx.HTTPError` (its subclasses name the failure:
    the tree above) or `OSError`; an answer's `aiter_raw` likewise. The caller closes every
    answer it was given (`Answer.aclose`), read or not."""

    async def get(
        self, url: str, headers: CIMultiDict[str], extensions: Mapping[str, Any], timeout_s: float
    ) -> Answer:
        """GET `url` (as httpx quotes it) with exactly `headers`; `extensions` as httpx's
        request extensions (`sni_hostname`, and `routes.ROUTE`); connecting (from the pool
        or anew) within `timeout_s`, with no bound per read (the scrape bounds the whole)."""
        ...

    def connect_ahead(
        self, url: str, extensions: Mapping[str, Any], timeout_s: float
    ) -> "asyncio.Task[None] | None":
        """Start opening the connection the next `get` of `url` will take, if this transport
        can (see `AiohttpTransport.connect_ahead`); the opening, if one was started."""
        ...

    async def aclose(self) -> None: ...


class DirectAnswer:
    """An answer as aiohttp read it, for a scrape that went straight to its server: its
    status, its headers (case-insensitive) and its body as it arrives, undecoded; aiohttp's
    failures raised as httpx's (the tree above)."""

    __slots__ = ("_request", "_response")

    def __init__(
        self, response: aiohttp.ClientResponse, request: httpx.Request | None = None
    ) -> None:
        self._response, self._request = response, request  # the request its errors name

    @property
    def status_code(self) -> int:
        return self._response.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        with _as_httpx_errors(self._request):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        self._response.release()


class HttpxTransport:
    """A `ScrapeTransport` over an httpx transport: httpx's proxy transport in production,
    a test's respx or `httpx.MockTransport`. The request is the one `httpx.AsyncClient` would
    send (its `Host`, its timeouts); the answer is httpx's response."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    async def get(
        self, url: str, headers: CIMultiDict[str], extensions: Mapping[str, Any], timeout_s: float
    ) -> Answer:
        steps = {**extensions, "timeout": _steps_timeout(timeout_s)}
        request = httpx.Request("GET", url, headers=list(headers.items()), extensions=steps)
        return _HttpxAnswer(await self.transport.handle_async_request(request))

    def connect_ahead(
        self, url: str, extensions: Mapping[str, Any], timeout_s: float
    ) -> "asyncio.Task[None] | None":
        return None  # an httpx transport connects only for a request

    async def aclose(self) -> None:
        await self.transport.aclose()


class _HttpxAnswer:
    """An httpx transport's answer, its body read from its stream as `httpx.AsyncClient` reads
    it (a mock's answer made from bytes counts as read already, and still has them)."""

    __slots__ = ("_response",)

    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    @property
    def status_code(self) -> int:
        return self._response.status_code

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        stream = self._response.stream
        assert isinstance(stream, httpx.AsyncByteStream), "an async transport's answer"
        async for chunk in stream:
            yield chunk

    async def aclose(self) -> None:
        await self._response.aclose()


@lru_cache(maxsize=16)
def _steps_timeout(timeout_s: float) -> dict[str, float | None]:
    """httpx's request timeouts bounding the steps as `direct_timeout` does."""
    return httpx.Timeout(timeout_s, read=None).as_dict()


class _AnswerStream(httpx.AsyncByteStream):
    """A `DirectAnswer`'s body as an `httpx.Response` reads it, for requests sent through httpx."""

    def __init__(self, answer: DirectAnswer) -> None:
        self._answer = answer

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._answer.aiter_raw():
            yield chunk

    async def aclose(self) -> None:
        await self._answer.aclose()


@lru_cache(maxsize=16)
def direct_timeout(timeout_s: float) -> aiohttp.ClientTimeout:
    """A direct scrape's steps bounded as `httpx.Timeout(timeout_s, read=None)` bounds a
    client's: a connection from the pool, and a new one, within `timeout_s`; no bound per read
    (the scrape's own total bounds it)."""
    return aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_connect=timeout_s)


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Direct HTTP/1.1 connections through one aiohttp session: a pool per host (at most
    `per_origin` connections each), one TLS context for every origin (building one loads the
    CA bundle), TLS server names from httpx's `sni_hostname` extension (a
    request pinned to an address keeps its host's name for the certificate check).

    `connect_ahead` opens a connection to an origin before its request is sent; the request
    then waits for that connection rather than opening another."""

    def __init__(self, per_origin: int = PER_ORIGIN, keepalive_s: float = 15.0) -> None:
        self._per_origin = per_origin
        self._keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None
        # Made now, not at the first scrape, so the first window's start does not pay for
        # loading the CA bundle.
        self._ssl_context: ssl.SSLContext = httpx.create_ssl_context()
        self._opening: dict[Origin, asyncio.Task[None]] = {}
        self._last_used: dict[Origin, float] = {}  # monotonic time a connection was last free

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

    def connect_ahead(
        self, url: str, extensions: Mapping[str, Any], timeout_s: float
    ) -> "asyncio.Task[None] | None":
        """Start opening a connection to `url`'s origin, unless one is being opened or was
        free less than FRESH_S ago; it waits in the pool for the origin's next request, which
        waits for it rather than opening another. A connection that cannot be opened is
        forgotten: that request tells why. The opening, if one was started."""
        parsed = _yarl_url(url)
        origin = _origin(parsed, extensions.get("sni_hostname"))
        used = self._last_used.get(origin)
        if origin in self._opening or (used is not None and time.monotonic() - used < FRESH_S):
            return None
        opening = asyncio.get_running_loop().create_task(self._connect(parsed, origin, timeout_s))
        self._opening[origin] = opening
        opening.add_done_callback(lambda _: self._opening.pop(origin, None))
        return opening

    async def _connect(self, url: URL, origin: Origin, timeout_s: float) -> None:
        session = self._started()
        assert session.connector is not None, "the session was made with a connector"
        request = aiohttp.ClientRequest(
            "GET", url, loop=asyncio.get_running_loop(), server_hostname=origin[3]
        )
        timeout = aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_connect=timeout_s)
        try:
            connection = await session.connector.connect(request, [], timeout)
        except Exception:  # refused, unreachable, a bad certificate: its request tells why
            return
        connection.release()  # into the pool, free
        self._free(origin)

    def _free(self, origin: Origin) -> None:
        """A connection to `origin` is free now (in the pool, or soon: its answer was read)."""
        if len(self._last_used) >= MAX_ORIGINS_REMEMBERED:
            now = time.monotonic()
            self._last_used = {o: t for o, t in self._last_used.items() if now - t < FRESH_S}
        self._last_used[origin] = time.monotonic()

    def _started(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = self._open()
        return self._session

    async def _send(
        self,
        request: httpx.Request | None,
        method: str,
        url: URL,
        headers: CIMultiDict[str],
        body: bytes,
        server_hostname: str | None,
        steps: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        session = self._started()
        origin = _origin(url, server_hostname)
        opening = self._opening.get(origin)
        if opening is not None:
            # Its connection, once open, is this request's; the request's own timeout bounds
            # the wait, which never cancels the opening.
            await asyncio.wait((opening,))
        with _as_httpx_errors(request):
            response = await session.request(
                method,
                url,
                headers=headers,
                data=body or None,
                allow_redirects=False,
                server_hostname=server_hostname,
                timeout=steps,
            )
        self._free(origin)
        return response

    async def get(
        self, url: str, headers: CIMultiDict[str], extensions: Mapping[str, Any], timeout_s: float
    ) -> DirectAnswer:
        """GET `url` with exactly `headers`, as `handle_async_request` sends a request,
        without httpx's request and response objects."""
        sent = await self._send(
            None,
            "GET",
            _yarl_url(url),
            headers,
            b"",
            extensions.get("sni_hostname"),
            direct_timeout(timeout_s),
        )
        return DirectAnswer(sent)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        headers = CIMultiDict(
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in request.headers.raw
        )
        response = await self._send(
            request,
            request.method,
            _yarl_url(str(request.url)),
            headers,
            await request.aread(),
            request.extensions.get("sni_hostname"),
            aiohttp.ClientTimeout(
                total=None,
                connect=timeouts.get("pool"),
                sock_connect=timeouts.get("connect"),
                sock_read=timeouts.get("read"),
            ),
        )
        return httpx.Response(
            status_code=response.status,
            headers=[(name, value) for name, value in response.raw_headers],
            stream=_AnswerStream(DirectAnswer(response, request)),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode(),
            },
        )

    async def aclose(self) -> None:
        for opening in list(self._opening.values()):
            opening.cancel()
        session, self._session = self._session, None
        if session is not None:
            await session.close()
