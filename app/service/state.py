"""What the lifespan owns and hands to every request, typed (the lifespan yields a `State`)."""

import time
from dataclasses import dataclass, field
from typing import TypedDict

from sqlalchemy.engine import Engine

from specdec_collector.service.auth import AnonymousAccess, EnvKey
from specdec_collector.windows.service import WindowService


@dataclass(slots=True)
class Health:
    """When this replica's heartbeat last landed (monotonic seconds), for a busy database."""

    last_beat: float | None = None

    def beat_landed(self) -> None:
        self.last_beat = time.monotonic()

    def seconds_since_beat(self) -> float | None:
        return None if self.last_beat is None else time.monotonic() - self.last_beat


@dataclass(frozen=True, slots=True)
class Services:
    """The database, the keys and the window calls' service, as the lifespan built them."""

    database: Engine
    env_keys: list[EnvKey]
    # Whether a request without a key is served as team `default` (`specdec serve` decides).
    anonymous: AnonymousAccess
    windows: WindowService
    health: Health = field(default_factory=Health)


class State(TypedDict):
    """The lifespan state; Starlette gives each request a copy as `request.state`."""

    services: Services
