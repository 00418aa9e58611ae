"""The stored API keys, for admin keys: create one, list them, revoke one, read the audit trail.

Keys of `SPECDEC_API_KEYS` are not stored, so they are neither listed nor revoked here.
"""

from typing import Annotated

from fastapi import APIRouter, Path, status

from specdec_collector.schemas import KeyCreate, KeyEventView, KeyView, NewKey
from specdec_collector.service.deps import AdminDep, KeysDep
from specdec_collector.service.routes import error_responses

router = APIRouter(prefix="/keys", tags=["keys"], responses=error_responses(401, 403, 422))

KeyId = Annotated[int, Path(ge=1, le=2**62, description="the key's id (`GET /keys`)")]


@router.post("", status_code=status.HTTP_201_CREATED, responses=error_responses(400, 413))
async def create_key(body: KeyCreate, keys: KeysDep, caller: AdminDep) -> NewKey:
    """A new key of `team` with `role`. The key is in this answer only: keep it."""
    return await keys.create(body.team, body.role, caller.key)


@router.get("")
async def list_keys(keys: KeysDep, caller: AdminDep) -> list[KeyView]:
    """Every stored key, revoked ones included, oldest first; never a key itself."""
    return await keys.all()


@router.get("/events")
async def key_events(keys: KeysDep, caller: AdminDep) -> list[KeyEventView]:
    """The audit trail: every key created or revoked, by whom and when (the newest 1,000)."""
    return await keys.events()


@router.delete("/{key_id}", responses=error_responses(404))
async def revoke_key(key_id: KeyId, keys: KeysDep, caller: AdminDep) -> KeyView:
    """Revoke a key: from now on it is refused. Revoking a revoked key changes nothing."""
    return await keys.revoke(key_id, caller.key)
