"""What the lifespan owns and hands to every request, typed (the lifespan yields a `State`)."""

from dataclasses import dataclass
from typing import TypedDict

from sqlalchemy.engine import Engine

from app.auth import EnvKey
from app.windows.lifecycle import WindowService


@dataclass(frozen=True, slots=True)
class Services:
    """The engine, the keys and the window calls' service, as the lifespan built them."""

    engine: Engine
    env_keys: list[EnvKey]
    # Whether no key at all may serve team `default` without auth (`specdec serve` decides).
    anonymous_allowed: bool
    windows: WindowService


class State(TypedDict):
    """The lifespan state; Starlette gives each request a copy as `request.state`."""

    services: Services
