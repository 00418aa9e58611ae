"""ASGI middleware: what every request meets before a route (body size and time, loopback hosts)."""

import asyncio
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.exc import SQLAlchemyError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodySizeLimit:
    """Answer 413 to a request whose body is larger than `max_bytes`, and 408 to one whose
    body has not arrived within `timeout_s`, before any route (or the key check) reads it.

    The body is read here (at most `max_bytes` + one chunk) and handed on, so a client that
    sends no Content-Length, or a false one, is limited too; one that trickles it is not held
    for longer than the deadline.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def _reject(self, send: Send) -> None:
        await _answer(send, 413, f"request body larger than {self.max_bytes} bytes")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._reject(send)
            return
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_bytes:
                        await self._reject(send)
                        return
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await _answer(send, 408, f"request body not received within {self.timeout_s:g} s")
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _loopback_name(host: str) -> bool:
    """Whether `host` (no port) names this machine: localhost, 127/8 or ::1."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_of(authority: str) -> str:
    """The host of a `Host` header value (`name:port`, `[v6]:port`)."""
    if authority.startswith("["):
        return authority[: authority.find("]") + 1]
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


class LoopbackHostOnly:
    """In open mode on a loopback address: answer a request without a key only if its `Host`
    names this machine and its `Origin`, if any, is a page served from this machine. Once
    the service has a key it is open no longer, and the check stops (a same-host reverse
    proxy's `Host` is the public name).

    Without keys anyone who reaches the port may use the service; binding to loopback keeps
    them to this machine, but a web page can still reach it: by DNS rebinding (a name of the
    page's that now resolves to 127.0.0.1 - the `Host` check) or by a cross-site form post to
    `/stop`, from any site or from another server of this machine (the `Origin` check: only the
    service's own origin, its dashboard). A request with an `Authorization` header is not a
    browser's cross-site request (it would need a CORS preflight, which is never granted).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if b"authorization" not in headers and await _still_open(scope):
                refusal = _refusal(
                    headers.get(b"host", b"").decode("latin-1"),
                    headers.get(b"origin", b"").decode("latin-1") or None,
                )
                if refusal is not None:
                    await _answer(send, 403, refusal)
                    return
        await self.app(scope, receive, send)


#: Where a request's scope keeps whether the service was open for it (asked once a request).
OPEN_ANSWER = "specdec.open"


async def _still_open(scope: Scope) -> bool:
    """Whether the service still serves requests without a key (it has none yet)."""
    services = (scope.get("state") or {}).get("services")
    if services is None:
        return True
    try:
        found = scope[OPEN_ANSWER] = bool(await services.anonymous.is_open())
    except SQLAlchemyError:
        # The database is away: checked as open (the stricter), and the route asks again,
        # where its failure is a 503.
        return True
    return found


def _refusal(host: str, origin: str | None) -> str | None:
    if not _loopback_name(_host_of(host)):
        return (
            "Host is not this machine: without API keys the service answers only to "
            "localhost, 127.0.0.1 or [::1] (create a key to serve other names)"
        )
    if origin is not None:
        parts = urlsplit(origin)
        try:
            origin_port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            origin_port = None
        if (
            parts.scheme not in ("http", "https")
            or not _loopback_name(parts.hostname or "")
            or origin_port != _port_of(host, parts.scheme)
        ):
            return (
                "cross-site request refused: without API keys only the service's own pages "
                "(its dashboard) may send one"
            )
    return None


def _port_of(authority: str, scheme: str) -> int | None:
    """The port of a `Host` header value (the scheme's default without one)."""
    rest = authority[authority.find("]") + 1 :] if authority.startswith("[") else authority
    _, colon, port = rest.rpartition(":")
    if not colon:
        return 443 if scheme == "https" else 80
    return int(port) if port.isdigit() else None


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
