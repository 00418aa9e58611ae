"""Connection guards uvicorn lacks: how many connections, from one client and in all, and how
long a request's head may take to arrive.

uvicorn reads a request's head for as long as its client takes and accepts every connection
until the process runs out of file descriptors, so idle connections, made without a key,
could take `/healthz` down. Here, as the HTTP protocol of `specdec serve`:

- a connection past SPECDEC_MAX_CONNECTIONS (all clients) or SPECDEC_MAX_CONNECTIONS_PER_CLIENT
  (one address) is answered 503 and closed before anything is read from it;
- a connection whose request head (request line and headers) has not fully arrived within
  SPECDEC_HEADER_TIMEOUT_S of its opening, or of the end of its previous answer, is closed.

The body has its own deadline (`middleware.BodySizeLimit`). The settings are read from the
environment, as every worker process reads them.
"""

import asyncio
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from specdec_collector.config import Settings, get_settings

_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: 52\r\n\r\n"
    b'{"detail":"too many connections: try again shortly"}'
)


def raise_open_files_limit(wanted: int = 65536) -> int:
    """Raise this process's limit of open files to its hard limit (at most `wanted`): the
    soft limit is often 1024, a few hundred benchmarks' worth of connections. The limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def connection_limit(settings: Settings) -> int:
    """The connections a process accepts at once: the setting, else half its open-files
    limit (the other half for scrapes, the database and the Prometheus queries)."""
    if settings.max_connections is not None:
        return settings.max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, soft // 2)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits above."""

    _open: int = 0
    _by_client: dict[str, int] = {}  # noqa: RUF012 - the process's connections, shared
    _limits: tuple[int, int, float] | None = None

    @classmethod
    def limits(cls) -> tuple[int, int, float]:
        """(connections, per client, head timeout), from the settings, once per process."""
        if cls._limits is None:
            settings = get_settings()
            cls._limits = (
                connection_limit(settings),
                settings.max_connections_per_client,
                settings.header_timeout_s,
            )
        return cls._limits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client_host = ""
        self._counted = False
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        most, per_client, head_timeout_s = self.limits()
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        cls = GuardedHttpToolsProtocol
        if cls._open >= most or (per_client and cls._by_client.get(host, 0) >= per_client):
            transport.write(_REFUSED)
            transport.close()
            return
        self._client_host, self._counted = host, True
        cls._open += 1
        cls._by_client[host] = cls._by_client.get(host, 0) + 1
        self._expect_head(head_timeout_s)

    def _expect_head(self, timeout_s: float) -> None:
        """Close the connection unless a new request's head has arrived within `timeout_s`."""
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(timeout_s, self._head_late, self.cycle)

    def _head_late(self, cycle_then: object) -> None:
        self._head_timer = None
        if self.cycle is cycle_then and not self.transport.is_closing():
            self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._counted and not self.transport.is_closing():
            self._expect_head(self.limits()[2])

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._counted:
            self._counted = False
            cls = GuardedHttpToolsProtocol
            cls._open -= 1
            left = cls._by_client.get(self._client_host, 1) - 1
            if left:
                cls._by_client[self._client_host] = left
            else:
                cls._by_client.pop(self._client_host, None)
        super().connection_lost(exc)
