"""Benchmark windows: start, stop, read, results and the console report."""

from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Request, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool

from app.config import Settings
from app.db import EngineDep
from app.models import WindowCreate, WindowPublic
from app.report import render_report, timeline_csv
from app.sampler import Sampler
from app.targets import WINDOW_ID_PATTERN, parse_target_key
from app.windows import (
    WindowConflict,
    WindowNotFound,
    WindowOpen,
    read_results,
    read_timeline,
    read_window,
    start_window,
    stop_window,
)

router = APIRouter(prefix="/windows", tags=["windows"])

WindowId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=WINDOW_ID_PATTERN,
        description="1-128 characters of A-Za-z0-9._:-, starting with a letter or digit",
    ),
]


def get_client(request: Request) -> httpx.AsyncClient:
    """The shared scrape client the lifespan owns."""
    client: httpx.AsyncClient = request.app.state.client
    return client


def get_app_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    settings: Settings = request.app.state.settings
    return settings


def get_sampler(request: Request) -> Sampler:
    """The background sampler the lifespan owns."""
    sampler: Sampler = request.app.state.sampler
    return sampler


ClientDep = Annotated[httpx.AsyncClient, Depends(get_client)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
SamplerDep = Annotated[Sampler, Depends(get_sampler)]


def _not_found(window_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"window {window_id} not found")


def _still_open(window_id: str) -> HTTPException:
    return HTTPException(
        status.HTTP_409_CONFLICT, f"window {window_id} is still open; results come with its stop"
    )


@router.post(
    "/{window_id}/start",
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": WindowPublic, "description": "a retry: the window already exists"}},
)
async def start(
    window_id: WindowId,
    body: Annotated[WindowCreate, Body()],
    response: Response,
    engine: EngineDep,
    client: ClientDep,
    settings: SettingsDep,
    sampler: SamplerDep,
) -> WindowPublic:
    """Open a window, take every target's baseline scrape, start its sampling."""
    try:
        created, window = await start_window(engine, client, settings, sampler, window_id, body)
    except WindowConflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    if not created:
        response.status_code = status.HTTP_200_OK
    return window


@router.post("/{window_id}/stop")
async def stop(
    window_id: WindowId,
    engine: EngineDep,
    client: ClientDep,
    settings: SettingsDep,
    sampler: SamplerDep,
) -> WindowPublic:
    """Take the final scrapes, store every target's result and close the window."""
    try:
        return await stop_window(engine, client, settings, sampler, window_id)
    except WindowNotFound:
        raise _not_found(window_id) from None


@router.get("/{window_id}")
async def get_window(window_id: WindowId, engine: EngineDep) -> WindowPublic:
    """The window with its targets and their results."""
    try:
        return await run_in_threadpool(read_window, engine, window_id)
    except WindowNotFound:
        raise _not_found(window_id) from None


@router.get("/{window_id}/results/{target}")
async def get_result(
    window_id: WindowId,
    target: Annotated[str, Path(description="host:port of the target, IPv6 in brackets")],
    engine: EngineDep,
) -> dict[str, Any]:
    """One target's result in the AISBench `spec_decode_<host>_<port>.json` shape."""
    try:
        key = parse_target_key(target)
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"target: {exc}") from None
    try:
        results = dict(await run_in_threadpool(read_results, engine, window_id))
    except WindowNotFound:
        raise _not_found(window_id) from None
    except WindowOpen:
        raise _still_open(window_id) from None
    if key not in results:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"window {window_id} has no target {key}")
    return results[key]


@router.get("/{window_id}/report", response_class=PlainTextResponse)
async def get_report(window_id: WindowId, engine: EngineDep) -> str:
    """The AISBench console blocks of every target."""
    try:
        results = await run_in_threadpool(read_results, engine, window_id)
    except WindowNotFound:
        raise _not_found(window_id) from None
    except WindowOpen:
        raise _still_open(window_id) from None
    return render_report(results)


@router.get(
    "/{window_id}/samples",
    responses={200: {"content": {"text/csv": {}}, "description": "JSON, or CSV on request"}},
)
async def get_samples(
    window_id: WindowId,
    request: Request,
    engine: EngineDep,
    target: Annotated[str | None, Query(description="host:port; all targets when absent")] = None,
    format: Annotated[
        Literal["json", "csv"] | None, Query(description="or Accept: text/csv")
    ] = None,
) -> Response:
    """Every snapshot of the window's targets over time (live while the window is open)."""
    key = None
    if target is not None:
        try:
            key = parse_target_key(target)
        except ValueError as exc:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"target: {exc}") from None
    try:
        series = await run_in_threadpool(read_timeline, engine, window_id, key)
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
