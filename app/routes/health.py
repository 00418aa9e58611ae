"""Liveness, readiness and the collector's own metrics."""

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from app.db import database_unavailable, upsert_insert, write_session
from app.deps import EngineDep, WindowsDep
from app.models import Heartbeat, utcnow

router = APIRouter(tags=["health"])


def beat(engine: Engine, replica_id: str) -> None:
    """Write this replica's heartbeat: proves the database answers and takes writes.

    A read alone would pass on a read-only file or a full disk.
    """
    with write_session(engine) as session:
        insert = upsert_insert(engine.dialect.name)
        now = utcnow()
        session.execute(
            insert(Heartbeat)
            .values(replica_id=replica_id, beat_at=now)
            .on_conflict_do_update(index_elements=["replica_id"], set_={"beat_at": now})
        )
        session.commit()


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def metrics() -> Response:
    """The collector's own Prometheus metrics (aggregates only; no key needed)."""
    # Some gauges read the database: off the event loop.
    body = await run_in_threadpool(generate_latest, REGISTRY)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/healthz",
    responses={503: {"description": "the database does not answer or takes no writes"}},
)
async def healthz(engine: EngineDep, windows: WindowsDep) -> JSONResponse:
    """200 while the service can serve (its database answers and takes writes), else 503."""
    try:
        await run_in_threadpool(beat, engine, windows.sampler.replica_id)
    except SQLAlchemyError as exc:
        reason = database_unavailable(exc) or type(exc).__name__
        return JSONResponse(
            {"status": "unavailable", "detail": f"database unavailable: {reason}"}, status_code=503
        )
    return JSONResponse({"status": "ok"})
