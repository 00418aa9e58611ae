"""Windows side by side: the A/B view of two speculative configurations."""

from typing import Annotated

from fastapi import APIRouter, Query

from specdec_collector.core.targets import WINDOW_ID_PATTERN
from specdec_collector.exceptions import InvalidInput
from specdec_collector.schemas import Comparison
from specdec_collector.service.deps import ReadTeamDep, WindowsDep
from specdec_collector.service.routes import error_responses

router = APIRouter(tags=["compare"], responses=error_responses(400, 401, 403, 404, 422))

_ID = WINDOW_ID_PATTERN.strip("^$")


@router.get("/compare")
async def compare(
    service: WindowsDep,
    scope: ReadTeamDep,
    windows: Annotated[
        str,
        Query(
            max_length=2600,
            pattern=rf"^{_ID}(,{_ID}){{1,19}}$",
            description="2-20 window ids, comma-separated; the first is the baseline",
        ),
    ],
) -> Comparison:
    """The windows per target, with the differences of each from the first."""
    ids = windows.split(",")
    if len(set(ids)) != len(ids):
        raise InvalidInput(["query", "windows"], "a window is named twice")
    return Comparison.model_validate(await service.compare(scope, ids))
