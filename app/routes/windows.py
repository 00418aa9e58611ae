"""Benchmark windows: start, stop, read, results, samples and the console report."""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Request, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from app.auth import ReaderDep, TeamQuery, WriterDep, team_scope
from app.models import WindowCreate, WindowPublic, WindowSummary
from app.report import render_report, timeline_csv
from app.targets import WINDOW_ID_PATTERN, parse_target_key
from app.windows import (
    Actor,
    Collector,
    InvalidWindow,
    TooManyWindows,
    WindowConflict,
    WindowNotFound,
    WindowOpen,
    list_windows,
    read_results,
    read_timeline,
    read_window,
    start_window,
    stop_window,
)


class Problem(BaseModel):
    """An error answer."""

    detail: str | list[dict[str, Any]]


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    described = {
        400: "the body cannot be read (not UTF-8 JSON)",
        401: "no key, or an unknown or revoked one",
        403: "the key's role does not allow this",
        404: "no such window (or another team's)",
        409: "the window's state does not allow this",
        413: "the request body is too large",
        422: "invalid input; `detail[].loc` names the field",
        429: "the team has too many open windows",
    }
    return {code: {"model": Problem, "description": described[code]} for code in codes}


router = APIRouter(prefix="/windows", tags=["windows"], responses=_responses(400, 401, 403, 422))

WindowId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=WINDOW_ID_PATTERN,
        description="1-128 characters of A-Za-z0-9._:-, starting with a letter or digit",
    ),
]


def get_collector(request: Request) -> Collector:
    """The engine, client, scrape config, sampler and limits the lifespan owns."""
    collector: Collector = request.app.state.collector
    return collector


CollectorDep = Annotated[Collector, Depends(get_collector)]


def _not_found(window_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"window {window_id} not found")


def _still_open(window_id: str) -> HTTPException:
    return HTTPException(
        status.HTTP_409_CONFLICT, f"window {window_id} is still open; results come with its stop"
    )


def _target_key(target: str) -> str:
    try:
        return parse_target_key(target)
    except ValueError as exc:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["path", "target"], "msg": str(exc), "type": "value_error"}],
        ) from None


@router.get("")
async def list_all(
    collector: CollectorDep,
    principal: ReaderDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    state: Literal["open", "closed"] | None = None,
    team: TeamQuery = None,
) -> list[WindowSummary]:
    """The team's windows, newest first, with a summary of every target."""
    scope = team_scope(principal, team)
    return await run_in_threadpool(list_windows, collector.engine, scope, limit, state)


@router.post(
    "/{window_id}/start",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"model": WindowPublic, "description": "a retry: the window already exists"},
        **_responses(409, 413, 429),
    },
)
async def start(
    window_id: WindowId,
    body: Annotated[WindowCreate, Body()],
    response: Response,
    collector: CollectorDep,
    principal: WriterDep,
    team: TeamQuery = None,
) -> WindowPublic:
    """Open a window, take every target's baseline scrape, start its sampling."""
    actor = Actor(team_scope(principal, team), principal.key)
    try:
        created, window = await start_window(collector, actor, window_id, body)
    except InvalidWindow as exc:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": exc.loc, "msg": str(exc), "type": "value_error"}],
        ) from None
    except WindowConflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except TooManyWindows as exc:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(exc)) from None
    if not created:
        response.status_code = status.HTTP_200_OK
    return window


@router.post("/{window_id}/stop", responses=_responses(404))
async def stop(
    window_id: WindowId, collector: CollectorDep, principal: WriterDep, team: TeamQuery = None
) -> WindowPublic:
    """Take the final scrapes, store every target's result and close the window."""
    actor = Actor(team_scope(principal, team), principal.key)
    try:
        return await stop_window(collector, actor, window_id)
    except WindowNotFound:
        raise _not_found(window_id) from None


@router.get("/{window_id}", responses=_responses(404))
async def get_window(
    window_id: WindowId, collector: CollectorDep, principal: ReaderDep, team: TeamQuery = None
) -> WindowPublic:
    """The window with its targets and their results."""
    scope = team_scope(principal, team)
    try:
        return await run_in_threadpool(read_window, collector.engine, scope, window_id)
    except WindowNotFound:
        raise _not_found(window_id) from None


@router.get("/{window_id}/results/{target}", responses=_responses(404, 409))
async def get_result(
    window_id: WindowId,
    target: Annotated[str, Path(max_length=300, description="host:port, IPv6 in brackets")],
    collector: CollectorDep,
    principal: ReaderDep,
    team: TeamQuery = None,
) -> dict[str, Any]:
    """One target's result in the AISBench `spec_decode_<host>_<port>.json` shape."""
    key = _target_key(target)
    scope = team_scope(principal, team)
    try:
        results = dict(await run_in_threadpool(read_results, collector.engine, scope, window_id))
    except WindowNotFound:
        raise _not_found(window_id) from None
    except WindowOpen:
        raise _still_open(window_id) from None
    if key not in results:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"window {window_id} has no target {key}")
    return results[key]


@router.get(
    "/{window_id}/report",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        **_responses(404, 409),
    },
)
async def get_report(
    window_id: WindowId, collector: CollectorDep, principal: ReaderDep, team: TeamQuery = None
) -> PlainTextResponse:
    """The AISBench console blocks of every target."""
    scope = team_scope(principal, team)
    try:
        results = await run_in_threadpool(read_results, collector.engine, scope, window_id)
    except WindowNotFound:
        raise _not_found(window_id) from None
    except WindowOpen:
        raise _still_open(window_id) from None
    return PlainTextResponse(render_report(results))


@router.get(
    "/{window_id}/samples",
    responses={
        200: {"content": {"text/csv": {}}, "description": "JSON, or CSV on request"},
        **_responses(404),
    },
)
async def get_samples(
    window_id: WindowId,
    request: Request,
    collector: CollectorDep,
    principal: ReaderDep,
    target: Annotated[
        str | None, Query(max_length=300, description="host:port; all targets when absent")
    ] = None,
    format: Annotated[
        Literal["json", "csv"] | None, Query(description="or Accept: text/csv")
    ] = None,
    team: TeamQuery = None,
) -> Response:
    """Every snapshot of the window's targets over time (live while the window is open)."""
    key = None if target is None else _target_key(target)
    scope = team_scope(principal, team)
    try:
        series = await run_in_threadpool(read_timeline, collector.engine, scope, window_id, key)
    except WindowNotFound:
        raise _not_found(window_id) from None
    except LookupError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    wants_csv = format == "csv" or (
        format is None and "text/csv" in request.headers.get("accept", "")
    )
    if wants_csv:
        return Response(timeline_csv(series), media_type="text/csv; charset=utf-8")
    body = {"id": window_id, "series": [{"target": k, "points": rows} for k, rows in series]}
    return JSONResponse(jsonable_encoder(body))
