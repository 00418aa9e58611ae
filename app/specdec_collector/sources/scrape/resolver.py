"""Name resolution for scrapes: the system resolver, in threads of its own, shared fairly.

`getaddrinfo` blocks a thread until the resolver answers, and a thread cannot be cancelled:
a team whose target names never answer (a hostile or broken DNS zone) would fill asyncio's
default executor (a handful of threads) and make every other team's start wait. Here
lookups run in a pool of their own; each owner (a team) may have only a few lookups
running at once, and the slot of a lookup is freed when its thread ends, not when its caller
gives up; a name being looked up already is not looked up twice. Callers bound the wait
(a scrape's timeout); a lookup past it fails that scrape only.
"""

import asyncio
import contextvars
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: Whose scrapes are resolving names: set by `scrape_all` for the tasks it starts.
RESOLVING_FOR: contextvars.ContextVar[str] = contextvars.ContextVar("resolving_for", default="")

GetAddrInfo = Callable[..., list[tuple[Any, ...]]]


class SystemResolver:
    """`await resolver(host, port)`: the addresses of `host`, without duplicates."""

    def __init__(
        self, threads: int = 64, per_owner: int = 8, getaddrinfo: GetAddrInfo = socket.getaddrinfo
    ) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="resolve")
        self._per_owner = per_owner
        self._getaddrinfo = getaddrinfo
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._pending: dict[tuple[str, int], asyncio.Future[list[str]]] = {}

    def _lookup(self, host: str, port: int) -> list[str]:
        infos = self._getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    async def __call__(self, host: str, port: int) -> list[str]:
        key = (host, port)
        pending = self._pending.get(key)
        if pending is None:
            owner = RESOLVING_FOR.get()
            slots = self._slots.setdefault(owner, asyncio.Semaphore(self._per_owner))
            await slots.acquire()
            pending = self._pending.get(key)  # another caller may have started it meanwhile
            if pending is not None:
                slots.release()
            else:
                loop = asyncio.get_running_loop()
                pending = loop.run_in_executor(self._pool, self._lookup, host, port)
                self._pending[key] = pending

                def finished(future: asyncio.Future[list[str]]) -> None:
                    slots.release()
                    self._pending.pop(key, None)
                    if not future.cancelled():
                        future.exception()  # retrieved: callers that gave up never will

                pending.add_done_callback(finished)
        # Shielded: a caller's timeout must not cancel the lookup other callers wait for.
        return await asyncio.shield(pending)

    def close(self) -> None:
        """Stop taking lookups; threads still blocked in the resolver end on their own."""
        self._pool.shutdown(wait=False, cancel_futures=True)
