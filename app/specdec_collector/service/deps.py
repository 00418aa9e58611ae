"""Every dependency of the routes, each as an `Annotated` alias, in one place.

The dependencies call one another as functions, not through `Depends`: FastAPI solves every
sub-dependency of every request anew, a large part of a cached result read's work; the
caller, which several of them need, is kept for the rest of the request once found.
"""

from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.engine import Engine

from specdec_collector.exceptions import NotAuthenticated
from specdec_collector.schemas import TEAM_MAX_CHARS, TEAM_PATTERN
from specdec_collector.service.auth import (
    EnvKey,
    OpenMode,
    Principal,
    admin,
    anonymous,
    authenticate,
    principal_from_env_keys,
    reader,
    team_scope,
    writer,
)
from specdec_collector.service.keys import KeyService
from specdec_collector.service.middleware import OPEN_ANSWER
from specdec_collector.service.state import Health, Services
from specdec_collector.store.store import Store
from specdec_collector.windows.service import WindowService
from specdec_collector.windows.stored import Actor


def _services(request: Request) -> Services:
    """What the lifespan built (see `service.state`)."""
    services: Services = request.state.services
    return services


async def get_store(request: Request) -> Store:
    """Where database work runs (`store.store`), as the lifespan made it."""
    return _services(request).store


StoreDep = Annotated[Store, Depends(get_store)]


async def get_windows(request: Request) -> WindowService:
    """The windows facade (`windows.service`): every window call."""
    return _services(request).windows


WindowsDep = Annotated[WindowService, Depends(get_windows)]


async def get_keys(request: Request) -> KeyService:
    """The stored keys' calls (`service.keys`)."""
    return _services(request).keys


KeysDep = Annotated[KeyService, Depends(get_keys)]


async def get_health(request: Request) -> Health:
    return _services(request).health


HealthDep = Annotated[Health, Depends(get_health)]

# The caller, once found, for the rest of the request.
_PRINCIPAL = "specdec.principal"


async def get_principal(request: Request) -> Principal:
    """The authenticated caller.

    A key from SPECDEC_API_KEYS is checked here on the event loop, and so is open mode on
    SQLite (`AnonymousAccess`); only a stored key goes to the thread pool: that hop costs more
    than the rest of a cached read.
    """
    found: Principal | None = request.scope.get(_PRINCIPAL)
    if found is not None:
        return found
    services = _services(request)
    authorization = request.headers.get("authorization")
    if authorization is None:
        # The open-mode middleware may have asked already, for this request.
        is_open = request.scope.get(OPEN_ANSWER)
        found = anonymous(is_open if is_open is not None else await services.anonymous.is_open())
    else:
        found = principal_from_env_keys(authorization, services.env_keys)
    if found is None:
        found = await services.store.lookup(
            _authenticated, authorization, services.env_keys, services.anonymous.mode
        )
    request.scope[_PRINCIPAL] = found
    return found


def _authenticated(
    database: Engine, authorization: str | None, env_keys: list[EnvKey], mode: OpenMode
) -> Principal:
    return authenticate(authorization, env_keys, database, mode)


async def get_optional_principal(request: Request) -> Principal | None:
    """The caller if it sent a key (401 for a bad one), or in open mode; else None."""
    if request.headers.get("authorization") is None:
        try:
            return await get_principal(request)
        except NotAuthenticated:
            return None
    return await get_principal(request)


OptionalReaderDep = Annotated[Principal | None, Depends(get_optional_principal)]


async def get_writer(request: Request) -> Principal:
    """The caller, who must hold a write or admin key."""
    return writer(await get_principal(request))


TeamQuery = Annotated[
    str | None,
    Query(
        max_length=TEAM_MAX_CHARS,
        pattern=TEAM_PATTERN,
        description="admin keys only: the team to act in",
    ),
]


async def get_read_team(request: Request, team: TeamQuery = None) -> str:
    """The team a read acts in: the key's, or for an admin key the one `?team=` names."""
    return team_scope(reader(await get_principal(request)), team)


ReadTeamDep = Annotated[str, Depends(get_read_team)]


async def get_actor(request: Request, team: TeamQuery = None) -> Actor:
    """Who starts or stops: the team acted in (see `get_read_team`) and the key's label."""
    principal = await get_writer(request)
    return Actor(team_scope(principal, team), principal.key)


ActorDep = Annotated[Actor, Depends(get_actor)]


async def get_admin(request: Request) -> Principal:
    """The caller, who must hold an admin key; 403 for any other key."""
    return admin(await get_principal(request))


AdminDep = Annotated[Principal, Depends(get_admin)]


async def get_admin_actor(request: Request, team: TeamQuery = None) -> Actor:
    """An admin acting in a team (see `get_actor`); 403 for any other key."""
    principal = await get_admin(request)
    return Actor(team_scope(principal, team), principal.key)


AdminActorDep = Annotated[Actor, Depends(get_admin_actor)]
