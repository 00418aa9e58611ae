"""Windows side by side: the A/B view of two speculative configurations."""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder
from starlette.concurrency import run_in_threadpool

from app.auth import ReaderDep, TeamQuery, team_scope
from app.exceptions import InvalidInput
from app.routes import error_responses
from app.routes.windows import CollectorDep
from app.targets import WINDOW_ID_PATTERN
from app.windows import read_comparison

router = APIRouter(tags=["compare"], responses=error_responses(400, 401, 403, 404, 422))

_ID = WINDOW_ID_PATTERN.strip("^$")


@router.get("/compare")
async def compare(
    collector: CollectorDep,
    principal: ReaderDep,
    windows: Annotated[
        str,
        Query(
            max_length=2600,
            pattern=rf"^{_ID}(,{_ID}){{1,19}}$",
            description="2-20 window ids, comma-separated; the first is the baseline",
        ),
    ],
    team: TeamQuery = None,
) -> dict[str, Any]:
    """The windows per target, with the differences of each from the first."""
    scope = team_scope(principal, team)
    ids = windows.split(",")
    if len(set(ids)) != len(ids):
        raise InvalidInput(["query", "windows"], "a window is named twice")
    comparison = await run_in_threadpool(read_comparison, collector.engine, scope, ids)
    result: dict[str, Any] = jsonable_encoder(comparison)
    return result
