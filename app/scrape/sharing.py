"""Scrapes of one endpoint that wait together share one request.

At most `per_endpoint` requests of one endpoint are in flight (the transport's connections per
origin). A scrape asked for beyond that waits, and every scrape that waits at the same time
gets the answer of one request, sent when a place frees: later than each of them was asked
for, so it is a valid reading for each (a start's baseline after its call, a stop's final
scrape after its call). 200 clients starting windows on the same 20 servers at once asked
each server ~100 times within a second; the collector now sends ~35.

A scrape is shared only with scrapes of the same URL, headers and configuration; each gets
the outcome under its own target. A waiting scrape stays within its own timeout: past it, it
fails as a timeout, and the shared request goes on for the others.
"""

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, replace

from app.scrape.outcome import ScrapeOutcome, timed_out
from app.targets import Target

Scrape = Callable[[], Awaitable[ScrapeOutcome]]


@dataclass(frozen=True, slots=True)
class _Waiting:
    """The one request the scrapes waiting now will share, how to send it, and in whose
    context (the first of them: its team shares the name resolver)."""

    shared: "asyncio.Future[ScrapeOutcome]"
    send: Scrape
    context: contextvars.Context


@dataclass
class _Endpoint:
    sending: int = 0  # requests in flight
    waiting: _Waiting | None = None


class ScrapeSharing:
    """Counts each endpoint's requests in flight and gathers the scrapes waiting for one."""

    def __init__(self, per_endpoint: int) -> None:
        self._per_endpoint = per_endpoint
        self._endpoints: dict[Hashable, _Endpoint] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # the shared requests being sent

    async def scrape(
        self, key: Hashable, target: Target, timeout_s: float, send: Scrape
    ) -> ScrapeOutcome:
        """`send()`'s outcome, or the one of a request shared with the scrapes of `key` that
        wait beside this one (under `target`)."""
        endpoint = self._endpoints.setdefault(key, _Endpoint())
        if endpoint.sending < self._per_endpoint and endpoint.waiting is None:
            endpoint.sending += 1
            try:
                return await send()
            finally:
                self._sent(key, endpoint)
        if endpoint.waiting is None:
            shared = asyncio.get_running_loop().create_future()
            endpoint.waiting = _Waiting(shared, send, contextvars.copy_context())
        try:
            async with asyncio.timeout(timeout_s):
                # Shielded: a waiting scrape that is cancelled leaves the request to the others.
                outcome = await asyncio.shield(endpoint.waiting.shared)
        except TimeoutError:
            return timed_out(target, timeout_s)
        return replace(outcome, target=target)

    def _sent(self, key: Hashable, endpoint: _Endpoint) -> None:
        """A request of `key` ended: the scrapes waiting, if any, send theirs in its place."""
        endpoint.sending -= 1
        waiting, endpoint.waiting = endpoint.waiting, None
        if waiting is None:
            if endpoint.sending == 0:
                del self._endpoints[key]
            return
        shared, send = waiting.shared, waiting.send
        endpoint.sending += 1

        async def send_shared() -> None:
            try:
                shared.set_result(await send())  # a scrape never raises
            finally:
                if not shared.done():  # cancelled (the service stops): so are its waiters
                    shared.cancel()
                self._sent(key, endpoint)

        task = asyncio.get_running_loop().create_task(send_shared(), context=waiting.context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
