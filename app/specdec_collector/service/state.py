"""What the lifespan owns and hands to every request, typed (the lifespan yields a `State`)."""

import asyncio
import time
from dataclasses import dataclass, field
from typing import TypedDict

from specdec_collector.service.auth import AnonymousAccess, EnvKey
from specdec_collector.service.keys import KeyService
from specdec_collector.store.store import Store
from specdec_collector.windows.service import WindowService


@dataclass(slots=True)
class Health:
    """When this replica's heartbeat last landed (monotonic seconds), for a busy database;
    the answer of its last check, and when, so that checks in quick succession share one
    (`/healthz` takes no key: each one writing the database let anyone slow every team)."""

    last_beat: float | None = None
    last_answer: tuple[float, int, dict[str, str]] | None = None  # (when, status, body)
    check: "asyncio.Task[tuple[int, dict[str, str]]] | None" = None  # the one under way

    def beat_landed(self) -> None:
        self.last_beat = time.monotonic()

    def seconds_since_beat(self) -> float | None:
        return None if self.last_beat is None else time.monotonic() - self.last_beat

    def recent_answer(self, within_s: float) -> tuple[int, dict[str, str]] | None:
        """The last check's answer if it is younger than `within_s`."""
        if self.last_answer is None or time.monotonic() - self.last_answer[0] > within_s:
            return None
        return self.last_answer[1], self.last_answer[2]

    def answered(self, status: int, body: dict[str, str]) -> None:
        self.last_answer = (time.monotonic(), status, body)


@dataclass(frozen=True, slots=True)
class Services:
    """The store, the keys, the window and key calls' services, as the lifespan built them."""

    # Where database work runs: the only way requests touch the database.
    store: Store
    env_keys: list[EnvKey]
    # Whether a request without a key is served as team `default` (`specdec serve` decides).
    anonymous: AnonymousAccess
    windows: WindowService
    keys: KeyService
    health: Health = field(default_factory=Health)


class State(TypedDict):
    """The lifespan state; Starlette gives each request a copy as `request.state`."""

    services: Services
