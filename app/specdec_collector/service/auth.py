"""API keys, roles and teams.

Keys come from `SPECDEC_API_KEYS` (`team:role:key`, comma-separated) and from the database
(`specdec keys create`, `POST /keys`: `service.keys`), where only their SHA-256 is stored. A
client sends `Authorization: Bearer <key>`. Roles: `read` (GET only), `write` (start, stop, read),
`admin` (any team, named with `?team=`, and the keys themselves) and `metrics` (`/metrics` only).

Open mode (one team, `default`, without auth) is decided by `OpenMode`: on a loopback address
the service is open until the first key is created, and stays closed once one was, even when
every key is revoked; beyond loopback it is never open unless `SPECDEC_ALLOW_ANONYMOUS=true`,
which (anywhere) also lets it reopen when no key is active. Keys in `SPECDEC_API_KEYS` close it.
"""

import hashlib
import hmac
import ipaddress
import re
import secrets
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import bindparam, func
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Engine

from specdec_collector.exceptions import NotAllowed, NotAuthenticated
from specdec_collector.schemas import TEAM_PATTERN, KeyRole
from specdec_collector.store.db import read_connection
from specdec_collector.store.store import Store
from specdec_collector.store.tables import TABLES

DEFAULT_TEAM = "default"
_TEAM = re.compile(TEAM_PATTERN)
_BEARER = "bearer "


def hash_key(key: str) -> str:
    """The stored form of a key: its SHA-256, hex."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A fresh random key (256 bits)."""
    return "sdk_" + secrets.token_urlsafe(32)


def check_team(team: str) -> str:
    """`team` if it is a valid team name, else `ValueError`."""
    if not _TEAM.match(team):
        raise ValueError(f"team {team!r} must be 1-64 characters of A-Za-z0-9._- ")
    return team


def check_role(role: str) -> KeyRole:
    """`role` as a `KeyRole`, else `ValueError`."""
    try:
        return KeyRole(role)
    except ValueError:
        roles = ", ".join(KeyRole)
        raise ValueError(f"role {role!r} is not one of {roles}") from None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: team, role, and a label of the key (`env:N`, `key:ID`, `anonymous`)."""

    team: str
    role: KeyRole
    key: str


@dataclass(frozen=True, slots=True)
class EnvKey:
    principal: Principal
    digest: bytes


def parse_env_keys(text: str) -> list[EnvKey]:
    """Parse `SPECDEC_API_KEYS`; `ValueError` names the bad entry by position, never its key."""
    keys = []
    for index, entry in enumerate(part.strip() for part in text.split(",")):
        if not entry:
            continue
        team, sep, rest = entry.partition(":")
        role, sep2, key = rest.partition(":")
        if not sep or not sep2 or not key:
            raise ValueError(f"SPECDEC_API_KEYS entry {index + 1} is not team:role:key")
        try:
            principal = Principal(check_team(team), check_role(role), f"env:{index + 1}")
        except ValueError as exc:
            raise ValueError(f"SPECDEC_API_KEYS entry {index + 1}: {exc}") from None
        if len(key) < 16:
            raise ValueError(
                f"SPECDEC_API_KEYS entry {index + 1}: a key has at least 16 characters"
            )
        keys.append(EnvKey(principal, hashlib.sha256(key.encode()).digest()))
    return keys


def is_loopback(host: str) -> bool:
    """Whether binding to `host` serves this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# Every request without a key (in open mode) or with a stored key runs one of these: built
# once, as Core statements (an ORM session and a statement built per call cost more than the
# query itself).
_KEYS = TABLES["api_key"]
_ACTIVE_KEYS = sa_select(func.count()).select_from(_KEYS).where(_KEYS.c.revoked_at.is_(None))
_ANY_KEY = sa_select(_KEYS.c.id).limit(1)
_KEY_BY_HASH = sa_select(_KEYS.c.id, _KEYS.c.team, _KEYS.c.role).where(
    _KEYS.c.key_hash == bindparam("key_hash"), _KEYS.c.revoked_at.is_(None)
)


def active_db_keys(database: Engine) -> int:
    """How many keys in the database are not revoked."""
    with read_connection(database) as connection:
        return int(connection.execute(_ACTIVE_KEYS).scalar_one())


def any_db_key(database: Engine) -> bool:
    """Whether a key was ever stored in the database (a revoked one counts)."""
    with read_connection(database) as connection:
        return connection.execute(_ANY_KEY).first() is not None


class OpenMode(StrEnum):
    """When a request without a key is served, as team `default` with write access."""

    NEVER = "never"  # bound beyond loopback without SPECDEC_ALLOW_ANONYMOUS
    UNTIL_FIRST_KEY = "until_first_key"  # loopback: closed for good once a key was created
    WHILE_NO_ACTIVE_KEY = "while_no_active_key"  # SPECDEC_ALLOW_ANONYMOUS=true: said explicitly

    @classmethod
    def of(cls, loopback_or_allowed: bool, allow_anonymous: bool) -> "OpenMode":
        """The mode for a service bound to loopback (or allowed beyond it) and the setting."""
        if allow_anonymous:
            return cls.WHILE_NO_ACTIVE_KEY
        return cls.UNTIL_FIRST_KEY if loopback_or_allowed else cls.NEVER

    def is_open(self, env_keys: list["EnvKey"], database: Engine) -> bool:
        """Whether a request without a key is served now."""
        if env_keys or self is OpenMode.NEVER:
            return False
        if self is OpenMode.UNTIL_FIRST_KEY:
            return not any_db_key(database)
        return active_db_keys(database) == 0


class AnonymousAccess:
    """Whether a request without a key is served now (see `OpenMode`), asked by every one.

    The keys are read from the database each time (one created by `specdec keys create` or on
    another replica closes the service at once), as a lookup of the store's (on the event
    loop where the database is at hand). Once a key exists in
    `UNTIL_FIRST_KEY` mode the service is closed for good, and nothing more is read.
    """

    def __init__(
        self,
        mode: OpenMode,
        env_keys: list[EnvKey],
        store: Store,
    ) -> None:
        self.mode = mode
        self._env_keys = env_keys
        self._closed_for_good = bool(env_keys) or mode is OpenMode.NEVER
        self._store = store

    async def is_open(self) -> bool:
        if self._closed_for_good:
            return False
        found = await self._store.lookup(self._open_in)
        if not found and self.mode is OpenMode.UNTIL_FIRST_KEY:
            self._closed_for_good = True
        return found

    def _open_in(self, database: Engine) -> bool:
        return self.mode.is_open(self._env_keys, database)


def _lookup(database: Engine, key: str) -> Principal | None:
    with read_connection(database) as connection:
        row = connection.execute(_KEY_BY_HASH, {"key_hash": hash_key(key)}).first()
    return None if row is None else Principal(row.team, KeyRole(row.role), f"key:{row.id}")


def _env_principal(key: str, env_keys: list[EnvKey]) -> Principal | None:
    digest = hashlib.sha256(key.encode()).digest()
    found: Principal | None = None
    # Every configured key is compared, each in constant time, so timing tells nothing.
    for env_key in env_keys:
        if hmac.compare_digest(digest, env_key.digest):
            found = env_key.principal
    return found


def _bearer(authorization: str) -> str:
    if not authorization.lower().startswith(_BEARER):
        raise NotAuthenticated("use Authorization: Bearer <key>")
    return authorization[len(_BEARER) :].strip()


def anonymous(is_open: bool) -> Principal:
    """The caller of a request without a key: team `default` in open mode, else 401."""
    if is_open:
        return Principal(DEFAULT_TEAM, KeyRole.WRITE, "anonymous")
    raise NotAuthenticated("an API key is required: Authorization: Bearer <key>")


def authenticate(
    authorization: str | None, env_keys: list[EnvKey], database: Engine, open_mode: OpenMode
) -> Principal:
    """The caller of a request with this `Authorization` header, or 401."""
    if authorization is None:
        return anonymous(open_mode.is_open(env_keys, database))
    key = _bearer(authorization)
    found = _env_principal(key, env_keys) or _lookup(database, key)
    if found is None:
        raise NotAuthenticated("unknown or revoked API key")
    return found


def principal_from_env_keys(authorization: str, env_keys: list[EnvKey]) -> Principal | None:
    """The caller, if the header holds a key of SPECDEC_API_KEYS (no database needed)."""
    return _env_principal(_bearer(authorization), env_keys)


def reader(principal: Principal) -> Principal:
    """`principal` if it may read windows (any key but a metrics key), else 403."""
    if principal.role is KeyRole.METRICS:
        raise NotAllowed("a metrics key reads /metrics only")
    return principal


def writer(principal: Principal) -> Principal:
    """`principal` if it may start and stop windows (a write or admin key), else 403."""
    if principal.role is KeyRole.READ:
        raise NotAllowed("a read key cannot start or stop windows")
    return reader(principal)


def admin(principal: Principal) -> Principal:
    """`principal` if it holds an admin key, else 403."""
    if principal.role is not KeyRole.ADMIN:
        raise NotAllowed("only admin keys may do this")
    return principal


def team_scope(principal: Principal, team: str | None) -> str:
    """The team a call acts in: the key's, or for an admin key the one `?team=` names."""
    if team is None or team == principal.team:
        return principal.team
    if principal.role is not KeyRole.ADMIN:
        raise NotAllowed("only admin keys may name another team")
    return team
