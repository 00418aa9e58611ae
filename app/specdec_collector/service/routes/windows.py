"""Benchmark windows: start, stop, read, results, samples and the console report."""

import gzip
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Path, Query, Request, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import AwareDatetime, StringConstraints

from specdec_collector.core.report import render_report, results_csv, timeline_csv, windows_csv
from specdec_collector.core.results import TargetResult
from specdec_collector.core.safetext import has_control_characters, safe_error_text
from specdec_collector.core.targets import WINDOW_ID_PATTERN, parse_target_name
from specdec_collector.exceptions import InvalidInput, TargetNotInWindow
from specdec_collector.schemas import (
    BoundedResults,
    BoundedTargetResult,
    WindowCreate,
    WindowPage,
    WindowSamples,
    WindowState,
    WindowStop,
    WindowView,
)
from specdec_collector.service.deps import ActorDep, AdminActorDep, ReadTeamDep, WindowsDep
from specdec_collector.service.routes import error_responses
from specdec_collector.windows.service import WindowFilter

router = APIRouter(
    prefix="/windows", tags=["windows"], responses=error_responses(400, 401, 403, 422)
)

WindowId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=WINDOW_ID_PATTERN,
        description="1-128 characters of A-Za-z0-9._:-, starting with a letter or digit",
    ),
]


def _target_name(target: str, where: str = "path") -> str:
    try:
        return parse_target_name(target)
    except ValueError as exc:
        raise InvalidInput([where, "target"], str(exc)) from None


#: Label filters of one list and the length of each: a window's label at the default
#: `SPECDEC_MAX_LABEL_CHARS` (128), `key=value`, fits, and the longest URL this allows (each
#: character four UTF-8 bytes, percent-encoded) stays under the 64 KiB past which uvicorn
#: answers a plain-text 400 of its own before the service sees the request.
LABEL_FILTERS_MAX = 16
LABEL_FILTER_MAX_CHARS = 2 * 128 + 1


def _label_pairs(labels: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for text in labels:
        name, sep, value = text.partition("=")
        if not sep or not name or has_control_characters(text):
            raise InvalidInput(
                ["query", "label"], f"{safe_error_text(text)!r} is not key=value (printable)"
            )
        pairs.append((name, value))
    return tuple(pairs)


@router.get(
    "",
    responses={200: {"content": {"text/csv": {}}, "description": "JSON, or CSV on request"}},
)
async def list_all(
    request: Request,
    windows: WindowsDep,
    scope: ReadTeamDep,
    state: WindowState | None = None,
    label: Annotated[
        list[Annotated[str, StringConstraints(max_length=LABEL_FILTER_MAX_CHARS)]],
        Query(
            max_length=LABEL_FILTERS_MAX,
            description=f"key=value, at most {LABEL_FILTER_MAX_CHARS} characters; repeat for "
            f"more (at most {LABEL_FILTERS_MAX}, all must match)",
        ),
    ] = [],  # noqa: B006
    target: Annotated[str | None, Query(max_length=300, description="host:port")] = None,
    started_after: datetime | None = None,
    started_before: datetime | None = None,
    min_acceptance_rate: Annotated[float | None, Query(ge=0, le=100)] = None,
    max_acceptance_rate: Annotated[float | None, Query(ge=0, le=100)] = None,
    sort: Literal["-started_at", "started_at"] = "-started_at",
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    format: Annotated[
        Literal["json", "csv"] | None, Query(description="or Accept: text/csv")
    ] = None,
) -> Response:
    """The team's windows, filtered, one page at a time, each target summarised."""
    where = WindowFilter(
        state=state,
        labels=_label_pairs(label),
        target=None if target is None else _target_name(target, "query"),
        started_after=started_after,
        started_before=started_before,
        min_acceptance_rate=min_acceptance_rate,
        max_acceptance_rate=max_acceptance_rate,
    )
    page, next_cursor = await windows.page(
        scope, limit, where, oldest_first=sort == "started_at", cursor=cursor
    )
    if _wants_csv(request, format):
        return Response(windows_csv(page), media_type="text/csv; charset=utf-8")
    body = WindowPage(windows=page, next_cursor=next_cursor)
    return JSONResponse(jsonable_encoder(body))


def _wants_csv(request: Request, format: str | None) -> bool:
    return format == "csv" or (format is None and "text/csv" in request.headers.get("accept", ""))


def _view_response(window: WindowView) -> Response:
    """The window as JSON, encoded by pydantic in one pass: FastAPI's own path (to Python
    objects, then `json.dumps`) is costly on windows whose results list hundreds of
    overlapping windows. The OpenAPI schema comes from the route's `response_model`."""
    return _json(window.model_dump_json().encode())


def _json(encoded: bytes, status_code: int = status.HTTP_200_OK) -> Response:
    return Response(encoded, status_code=status_code, media_type="application/json")


@router.post(
    "/{window_id}/start",
    status_code=status.HTTP_201_CREATED,
    response_model=WindowView,
    responses={
        200: {"model": WindowView, "description": "a retry: the window already exists"},
        **error_responses(409, 413, 429),
    },
)
async def start(
    window_id: WindowId,
    body: Annotated[WindowCreate, Body()],
    windows: WindowsDep,
    actor: ActorDep,
) -> Response:
    """Open a window, take every target's baseline scrape, start its sampling."""
    created, encoded = await windows.start(actor, window_id, body)
    return _json(encoded, status.HTTP_201_CREATED if created else status.HTTP_200_OK)


@router.post("/{window_id}/stop", response_model=WindowView, responses=error_responses(404))
async def stop(
    window_id: WindowId,
    windows: WindowsDep,
    actor: ActorDep,
    body: Annotated[WindowStop | None, Body()] = None,
) -> Response:
    """Take the final scrapes, store every target's result and close the window (a window read
    from Prometheus: read its samples, waiting for one at or after the stop; `at` stops it in
    the past)."""
    return _view_response(await windows.stop(actor, window_id, body.at if body else None))


@router.post(
    "/{window_id}/force-close", response_model=WindowView, responses=error_responses(403, 404)
)
async def force_close(window_id: WindowId, windows: WindowsDep, actor: AdminActorDep) -> Response:
    """Admin only: close an open window at once, without a final scrape (every result `na`)."""
    return _view_response(await windows.force_close(actor, window_id))


@router.get("/{window_id}", response_model=WindowView, responses=error_responses(404))
async def get_window(window_id: WindowId, windows: WindowsDep, scope: ReadTeamDep) -> Response:
    """The window with its targets and their results."""
    return _json(await windows.view(scope, window_id))


@router.get("/{window_id}/results", responses=error_responses(404, 409))
async def get_bounded_results(
    window_id: WindowId,
    start: Annotated[AwareDatetime, Query(description="start of the phase to measure")],
    end: Annotated[AwareDatetime, Query(description="its end")],
    windows: WindowsDep,
    scope: ReadTeamDep,
) -> BoundedResults:
    """Every target's result over the part of a closed window that encloses `start`..`end`
    (a benchmark's own phase): from the last snapshot at or before `start` to the first at or
    after `end`; each result's `bounds` says which. Samples make the bounds tight."""
    if end < start:
        raise InvalidInput(["query", "end"], "end is before start")
    results = await windows.bounded_results(scope, window_id, start, end)
    return BoundedResults(
        targets=[BoundedTargetResult(target=key, result=result) for key, result in results]
    )


@router.get(
    "/{window_id}/results/{target}",
    response_model=TargetResult,
    responses=error_responses(404, 409),
)
async def get_result(
    window_id: WindowId,
    target: Annotated[str, Path(max_length=300, description="host:port, IPv6 in brackets")],
    windows: WindowsDep,
    scope: ReadTeamDep,
) -> Response:
    """One target's result in the AISBench `spec_decode_<host>_<port>.json` shape."""
    key = _target_name(target)
    closed = await windows.results(scope, window_id)
    body = closed.encoded(key)
    if body is None:
        raise TargetNotInWindow(window_id, key)
    return Response(body, media_type="application/json")


@router.get(
    "/{window_id}/report",
    response_class=Response,
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}, "text/csv": {}},
            "description": "the console blocks, or CSV on request",
        },
        **error_responses(404, 409),
    },
)
async def get_report(
    request: Request,
    window_id: WindowId,
    windows: WindowsDep,
    scope: ReadTeamDep,
    format: Annotated[
        Literal["text", "csv"] | None, Query(description="or Accept: text/csv")
    ] = None,
) -> Response:
    """The AISBench console blocks of every target; as CSV, one row per target with the
    figures beside AISBench's (intervals, throughput, flags)."""
    closed = await windows.results(scope, window_id)
    if format != "text" and _wants_csv(request, format):
        return Response(results_csv(closed.results), media_type="text/csv; charset=utf-8")
    return PlainTextResponse(render_report(closed.results))


@router.get(
    "/{window_id}/samples",
    response_model=WindowSamples,
    responses={
        200: {"content": {"text/csv": {}}, "description": "JSON, or CSV on request"},
        **error_responses(404),
    },
)
async def get_samples(
    window_id: WindowId,
    request: Request,
    windows: WindowsDep,
    scope: ReadTeamDep,
    target: Annotated[
        str | None, Query(max_length=300, description="host:port; all targets when absent")
    ] = None,
    format: Annotated[
        Literal["json", "csv"] | None, Query(description="or Accept: text/csv")
    ] = None,
    max_points: Annotated[
        int, Query(ge=2, le=100_000, description="snapshots per target at most (about)")
    ] = 2000,
    after: Annotated[
        AwareDatetime | None,
        Query(description="only snapshots taken after this time (a live view's last one)"),
    ] = None,
) -> Response:
    """Every snapshot of the window's targets over time (live while the window is open); past
    `max_points` of a target, both ends, every restart and evenly spaced others (`thinned`).
    With `after`, only the newer ones: each keeps the figures of the interval before it, so a
    live view appends them to what it has. Gzip-compressed when the client accepts it."""
    key = None if target is None else _target_name(target, "query")
    series = await windows.timelines(scope, window_id, key, max_points)
    if after is not None:
        series = [
            (name, [row for row in rows if _utc(row["taken_at"]) > after], thinned)
            for name, rows, thinned in series
        ]
    if _wants_csv(request, format):
        rows_only = [(name, rows) for name, rows, _ in series]
        text = timeline_csv(rows_only).encode()
        return _maybe_compressed(request, text, "text/csv; charset=utf-8")
    body = WindowSamples.model_validate(
        {
            "id": window_id,
            "series": [
                {"target": name, "points": rows, "thinned": thinned}
                for name, rows, thinned in series
            ],
        }
    )
    return _maybe_compressed(request, body.model_dump_json().encode(), "application/json")


# Below this, gzip saves less than its header and CPU cost.
_COMPRESS_FROM_BYTES = 2048


def _maybe_compressed(request: Request, body: bytes, media_type: str) -> Response:
    """`body`, gzip-compressed when the client accepts it and it is large enough: a window's
    samples are a few hundred bytes a point, and compress well."""
    accepted = request.headers.get("accept-encoding", "")
    headers = {"Vary": "Accept-Encoding"}
    if len(body) >= _COMPRESS_FROM_BYTES and "gzip" in accepted.lower():
        headers["Content-Encoding"] = "gzip"
        body = gzip.compress(body, compresslevel=5)
    return Response(body, media_type=media_type, headers=headers)


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
