"""Scrapes of one endpoint share requests: one in flight at a time, and a few a second at most.

An endpoint has one request in flight at a time, as Prometheus scrapes a target: a scrape
asked for meanwhile waits, and every scrape waiting at the same time gets the answer of one
request, sent when the one in flight ends: later than each of them was asked for, so it is a
valid reading for each (a start's baseline after its call, a stop's final scrape after its
call). A slow endpoint is not waited on for long: after `patience_s` (at most a tenth of the
scrape's timeout) the waiting scrapes send theirs beside the one in flight, as long as fewer
than `per_endpoint` are (the transport's connections per origin). Many clients starting
windows on the same servers at once ask each server many times within a second: shared, a
herd like it sends each server a few requests, not one per scrape.

An endpoint is also sent at most RATE_BURST requests at once and RATE_PER_S a second after
(a token bucket): past it, the scrapes asked for wait together for the next request the rate
allows, at most 1 / RATE_PER_S. A window's own scrapes (its start, its sampler at 0.25 s at
the most often, its stop) stay within the burst and never wait for it; a herd of windows on
one server shares a few requests a second instead of each asking on its own: the server
renders its `/metrics` (on vLLM, in the API server that answers the benchmark) at most
RATE_PER_S times a second, and the collector parses no more answers than that. The rate
matters most on PostgreSQL, where the collector's calls for the same servers overlap less
and so share fewer requests.

A scrape is shared only with scrapes of the same URL, headers and configuration (the rate
too is theirs); each gets the outcome under its own target. A waiting scrape stays within its
own timeout: past it, it fails as a timeout, and the shared request goes on for the others.
"""

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

from specdec_collector.core.readings import TargetReading
from specdec_collector.core.targets import Target
from specdec_collector.sources.scrape.failures import timed_out

Scrape = Callable[[], Awaitable[TargetReading]]

#: How long scrapes wait for a slow request in flight before they send theirs beside it.
PATIENCE_S = 0.25
#: Requests of one endpoint: RATE_BURST at once, then RATE_PER_S a second (a token bucket).
RATE_PER_S = 10.0
RATE_BURST = 10.0
#: Endpoints remembered (with their rate) before the idle ones whose bucket is full again are
#: forgotten: those are as new ones.
REMEMBERED = 4096


@dataclass(slots=True)
class _Waiting:
    """The scrapes waiting now for the one request they will share (each its own future:
    None once its timeout passed), how to send it, in whose context (the first of them: its
    team shares the name resolver), and the timer that sends it: beside the one in flight if
    that one is slow, or when the rate allows."""

    send: Scrape
    context: contextvars.Context
    waiters: "list[asyncio.Future[TargetReading | None]]" = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None  # sends it: after the patience, or at the rate


@dataclass(slots=True)
class _Endpoint:
    key: Hashable
    tokens: float  # requests the rate allows now, as of `filled_at` (the loop's time)
    filled_at: float
    sending: int = 0  # requests in flight
    waiting: _Waiting | None = None


class ScrapeSharing:
    """Counts each endpoint's requests in flight and its rate, and gathers the scrapes
    waiting for one."""

    def __init__(
        self,
        patience_s: float,
        per_endpoint: int,
        rate_per_s: float = RATE_PER_S,
        burst: float = RATE_BURST,
    ) -> None:
        self._patience_s = patience_s
        self._per_endpoint = per_endpoint
        self._rate_per_s, self._burst = rate_per_s, burst
        self._endpoints: dict[Hashable, _Endpoint] = {}
        self._forget_at = REMEMBERED  # endpoints held when the idle ones are looked for
        self._tasks: set[asyncio.Task[None]] = set()  # the shared requests being sent

    async def scrape(
        self, key: Hashable, target: Target, timeout_s: float, send: Scrape
    ) -> TargetReading:
        """`send()`'s outcome, or the one of a request shared with the scrapes of `key` that
        wait beside this one (under `target`)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        endpoint = self._endpoint(key, now)
        if endpoint.waiting is None and endpoint.sending == 0 and self._took(endpoint, now):
            endpoint.sending += 1
            try:
                return await send()
            finally:
                self._sent(endpoint)
        waiting = endpoint.waiting
        if waiting is None:
            waiting = endpoint.waiting = _Waiting(send, contextvars.copy_context())
            if endpoint.sending:
                patience_s = min(self._patience_s, timeout_s / 10)
                waiting.timer = loop.call_later(patience_s, self._timer_fired, endpoint)
            else:  # none in flight: the rate is spent
                self._send_when_allowed(endpoint)
        # A future of its own and a timer, not a shield of the shared request and a timeout
        # scope: a herd of starts waits in thousands of scrapes at once, and a shield and a
        # scope each are costly at that count. Cancelled, it leaves the request to the others.
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

    def _endpoint(self, key: Hashable, now: float) -> _Endpoint:
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            if len(self._endpoints) >= self._forget_at:
                self._forget_idle(now)
            endpoint = self._endpoints[key] = _Endpoint(key, self._burst, now)
        return endpoint

    def _forget_idle(self, now: float) -> None:
        """Forget the endpoints with nothing in flight or waiting whose bucket is full again;
        looked for again once twice as many are held (a fleet's endpoints, all busy, cost
        one look per doubling, not one per new endpoint)."""
        full_after = now - self._burst / self._rate_per_s
        for key, endpoint in list(self._endpoints.items()):
            idle = endpoint.sending == 0 and endpoint.waiting is None
            if idle and (endpoint.tokens >= self._burst or endpoint.filled_at <= full_after):
                del self._endpoints[key]
        self._forget_at = max(REMEMBERED, 2 * len(self._endpoints))

    def _refill(self, endpoint: _Endpoint, now: float) -> None:
        spent = now - endpoint.filled_at
        endpoint.tokens = min(self._burst, endpoint.tokens + spent * self._rate_per_s)
        endpoint.filled_at = now

    def _took(self, endpoint: _Endpoint, now: float) -> bool:
        """Whether the rate allows a request of `endpoint` now (counted if so)."""
        self._refill(endpoint, now)
        if endpoint.tokens < 1:
            return False
        endpoint.tokens -= 1
        return True

    def _timer_fired(self, endpoint: _Endpoint) -> None:
        """The waiting scrapes' timer: the request in flight is slow (the patience passed), or
        the rate allows one more. They send theirs, beside the one in flight if need be, if the
        endpoint has a place (else when a request ends) and the rate allows."""
        if endpoint.waiting is not None and endpoint.sending < self._per_endpoint:
            self._send_when_allowed(endpoint)

    def _sent(self, endpoint: _Endpoint) -> None:
        """A request ended: the scrapes waiting, if any, send theirs in its place (as soon as
        the rate allows)."""
        endpoint.sending -= 1
        if endpoint.waiting is not None:
            self._send_when_allowed(endpoint)

    def _send_when_allowed(self, endpoint: _Endpoint) -> None:
        """Send the waiting scrapes' request now if the rate allows, else when it will."""
        waiting = endpoint.waiting
        assert waiting is not None
        loop = asyncio.get_running_loop()
        if self._took(endpoint, loop.time()):
            self._send_waiting(endpoint)
            return
        if waiting.timer is not None:
            waiting.timer.cancel()
        delay_s = (1 - endpoint.tokens) / self._rate_per_s
        waiting.timer = loop.call_later(delay_s, self._timer_fired, endpoint)

    def _send_waiting(self, endpoint: _Endpoint) -> None:
        waiting = endpoint.waiting
        assert waiting is not None
        endpoint.waiting = None
        if waiting.timer is not None:
            waiting.timer.cancel()
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
