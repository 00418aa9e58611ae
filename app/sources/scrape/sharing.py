"""Scrapes of one endpoint asked for while a request of it is in flight share the next one.

An endpoint has one request in flight at a time, as Prometheus scrapes a target: a scrape
asked for meanwhile waits, and every scrape waiting at the same time gets the answer of one
request, sent when the one in flight ends: later than each of them was asked for, so it is a
valid reading for each (a start's baseline after its call, a stop's final scrape after its
call). A slow endpoint is not waited on for long: after `patience_s` (at most a tenth of the
scrape's timeout) the waiting scrapes send theirs beside the one in flight, as long as fewer
than `per_endpoint` are (the transport's connections per origin). 200 clients starting
windows on the same 20 servers at once asked each server ~100 times within a second; a herd
like it costs half the CPU it cost when up to 32 requests of a server went out at once.

A scrape is shared only with scrapes of the same URL, headers and configuration; each gets
the outcome under its own target. A waiting scrape stays within its own timeout: past it, it
fails as a timeout, and the shared request goes on for the others.
"""

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

from specdec_collector.core.readings import TargetReading
from specdec_collector.core.targets import Target
from specdec_collector.sources.scrape.failures import timed_out

Scrape = Callable[[], Awaitable[TargetReading]]

#: How long scrapes wait for a slow request in flight before they send theirs beside it. The
#: herd of 200 starts cost the same CPU with 0.1 s, 0.25 s and no end to waiting.
PATIENCE_S = 0.25


@dataclass(slots=True)
class _Waiting:
    """The scrapes waiting now for the one request they will share (each its own future:
    None once its timeout passed), how to send it, in whose context (the first of them: its
    team shares the name resolver), and the timer that sends it beside the one in flight if
    that one is slow."""

    send: Scrape
    context: contextvars.Context
    waiters: "list[asyncio.Future[TargetReading | None]]" = field(default_factory=list)
    impatient: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class _Endpoint:
    key: Hashable
    sending: int = 0  # requests in flight
    waiting: _Waiting | None = None


class ScrapeSharing:
    """Counts each endpoint's requests in flight and gathers the scrapes waiting for one."""

    def __init__(self, patience_s: float, per_endpoint: int) -> None:
        self._patience_s = patience_s
        self._per_endpoint = per_endpoint
        self._endpoints: dict[Hashable, _Endpoint] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # the shared requests being sent

    async def scrape(
        self, key: Hashable, target: Target, timeout_s: float, send: Scrape
    ) -> TargetReading:
        """`send()`'s outcome, or the one of a request shared with the scrapes of `key` that
        wait beside this one (under `target`)."""
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            endpoint = self._endpoints[key] = _Endpoint(key, sending=1)
            try:
                return await send()
            finally:
                self._sent(endpoint)
        loop = asyncio.get_running_loop()
        waiting = endpoint.waiting
        if waiting is None:
            waiting = endpoint.waiting = _Waiting(send, contextvars.copy_context())
            patience_s = min(self._patience_s, timeout_s / 10)
            waiting.impatient = loop.call_later(patience_s, self._impatient, endpoint)
        # A future of its own and a timer, not a shield of the shared request and a timeout
        # scope: a herd of starts waited in thousands of scrapes at once, and those cost a
        # tenth of its CPU. Cancelled, it leaves the request to the others.
        mine: asyncio.Future[TargetReading | None] = loop.create_future()
        waiting.waiters.append(mine)
        timer = loop.call_later(timeout_s, _answer, mine, None)
        try:
            outcome = await mine
        finally:
            timer.cancel()
        if outcome is None:
            return timed_out(target, timeout_s)
        return outcome.for_target(target)

    def _impatient(self, endpoint: _Endpoint) -> None:
        """The request in flight is slow: the waiting scrapes send theirs beside it, if the
        endpoint has a place (else when a request ends)."""
        if endpoint.waiting is not None and endpoint.sending < self._per_endpoint:
            self._send_waiting(endpoint)

    def _sent(self, endpoint: _Endpoint) -> None:
        """A request ended: the scrapes waiting, if any, send theirs in its place."""
        endpoint.sending -= 1
        if endpoint.waiting is not None:
            self._send_waiting(endpoint)
        elif endpoint.sending == 0:
            del self._endpoints[endpoint.key]

    def _send_waiting(self, endpoint: _Endpoint) -> None:
        waiting = endpoint.waiting
        assert waiting is not None
        endpoint.waiting = None
        if waiting.impatient is not None:
            waiting.impatient.cancel()
        endpoint.sending += 1
        waiters, send = waiting.waiters, waiting.send

        async def send_shared() -> None:
            outcome = None
            try:
                outcome = await send()  # a scrape never raises
            finally:
                for waiter in waiters:
                    if outcome is None:  # cancelled (the service stops): so are its waiters
                        waiter.cancel()
                    else:
                        _answer(waiter, outcome)
                self._sent(endpoint)

        task = asyncio.get_running_loop().create_task(send_shared(), context=waiting.context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _answer(waiter: "asyncio.Future[TargetReading | None]", outcome: TargetReading | None) -> None:
    if not waiter.done():  # timed out, or cancelled, before
        waiter.set_result(outcome)
