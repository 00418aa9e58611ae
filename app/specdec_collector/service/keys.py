"""The keys stored in the database: created, listed, revoked, every change audited.

A change and its `key_event` row are written in one transaction, so the trail holds every
change or the change did not happen. The functions are synchronous (the CLI calls them on a
database of its own); `KeyService` is what the routes call, with the thread hops done here.
"""

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from specdec_collector.exceptions import KeyNotFound
from specdec_collector.schemas import KeyAction, KeyEventView, KeyRole, KeyView, NewKey
from specdec_collector.service.auth import check_role, check_team, hash_key, new_key
from specdec_collector.store.db import read_session
from specdec_collector.store.store import Store
from specdec_collector.store.tables import ApiKey, KeyEvent, as_utc, utcnow

# The newest events `GET /keys/events` answers with at most.
EVENTS_SHOWN = 1000


def _event(row: ApiKey, action: KeyAction, actor: str, at: datetime) -> KeyEvent:
    assert row.id is not None
    return KeyEvent(
        at=at, action=action, key_id=row.id, team=row.team, role=row.role, actor=actor[:128]
    )


def create_key(database: Engine, team: str, role: str, actor: str) -> tuple[ApiKey, str]:
    """Store a new key of `team` with `role`, made by `actor`; the key itself is returned once,
    never stored (its SHA-256 is)."""
    key = new_key()
    row = ApiKey(
        team=check_team(team), role=check_role(role), key_hash=hash_key(key), prefix=key[:8]
    )
    with Session(database) as session:
        session.add(row)
        session.flush()
        session.add(_event(row, KeyAction.CREATED, actor, row.created_at))
        session.commit()
        session.refresh(row)
    return row, key


def list_keys(database: Engine) -> list[ApiKey]:
    """Every key, revoked ones included, oldest first."""
    with read_session(database) as session:
        return list(session.exec(select(ApiKey).order_by(col(ApiKey.id))).all())


def revoke_key(database: Engine, key_id: int, actor: str, now: datetime | None = None) -> bool:
    """Revoke a key, by `actor`; `False` if there is no such key or it was revoked already."""
    with Session(database) as session:
        row = session.get(ApiKey, key_id, with_for_update=True)
        if row is None or row.revoked_at is not None:
            return False
        row.revoked_at = now or utcnow()
        session.add(row)
        session.add(_event(row, KeyAction.REVOKED, actor, row.revoked_at))
        session.commit()
        return True


def get_key(database: Engine, key_id: int) -> ApiKey | None:
    with read_session(database) as session:
        return session.get(ApiKey, key_id)


def key_events(database: Engine, limit: int = EVENTS_SHOWN) -> list[KeyEvent]:
    """The newest `limit` changes to the keys, oldest first."""
    with read_session(database) as session:
        newest = session.exec(select(KeyEvent).order_by(col(KeyEvent.id).desc()).limit(limit))
        return list(reversed(newest.all()))


def _view(row: ApiKey) -> KeyView:
    return KeyView(
        id=row.id or 0,
        team=row.team,
        role=KeyRole(row.role),
        prefix=row.prefix,
        created_at=as_utc(row.created_at),
        revoked_at=None if row.revoked_at is None else as_utc(row.revoked_at),
    )


@dataclass(frozen=True, slots=True)
class KeyService:
    """The key calls of the routes, answering the API's models (the routes' dependency checks
    that the caller holds an admin key)."""

    store: Store

    async def create(self, team: str, role: KeyRole, actor: str) -> NewKey:
        row, key = await self.store.run(create_key, team, role, actor)
        return NewKey(**_view(row).model_dump(), key=key)

    async def all(self) -> list[KeyView]:
        return [_view(row) for row in await self.store.run(list_keys)]

    async def revoke(self, key_id: int, actor: str) -> KeyView:
        """The key, revoked (now, or before: revoking twice changes nothing); 404 if none."""
        await self.store.run(revoke_key, key_id, actor)
        row = await self.store.run(get_key, key_id)
        if row is None:
            raise KeyNotFound(key_id)
        return _view(row)

    async def events(self) -> list[KeyEventView]:
        return [
            KeyEventView(
                at=as_utc(event.at),
                action=event.action,
                key_id=event.key_id,
                team=event.team,
                role=KeyRole(event.role),
                actor=event.actor,
            )
            for event in await self.store.run(key_events)
        ]
