"""HTTP clients for the suite's own calls, all sharing one TLS context.

httpx builds a TLS context (the CA bundle loaded) for each client it makes, ~19 ms of CPU,
and `httpx.get` makes a client per call. The suite's calls are plain HTTP on loopback, yet it
made a few thousand clients, and a probe asked every 20 ms that way kept half a core busy.
These take the same arguments as httpx's, with the context made once.
"""

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

#: Made once per test process; never used for a connection of the suite's (plain HTTP).
TLS = ssl.create_default_context()


def client(**options: Any) -> httpx.Client:
    """`httpx.Client(**options)` with the shared TLS context."""
    return httpx.Client(verify=TLS, **options)


def async_client(**options: Any) -> httpx.AsyncClient:
    """`httpx.AsyncClient(**options)` with the shared TLS context."""
    return httpx.AsyncClient(verify=TLS, **options)


def get(url: str, **options: Any) -> httpx.Response:
    """`httpx.get`: one call on a client of its own (a new connection)."""
    with client() as one:
        return one.get(url, **options)


def post(url: str, **options: Any) -> httpx.Response:
    """`httpx.post`: one call on a client of its own (a new connection)."""
    with client() as one:
        return one.post(url, **options)


@contextmanager
def stream(method: str, url: str, **options: Any) -> Iterator[httpx.Response]:
    """`httpx.stream`: one streamed call on a client of its own."""
    with client() as one, one.stream(method, url, **options) as answer:
        yield answer
