"""Liveness and readiness."""

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from app.db import EngineDep, database_unavailable

router = APIRouter(tags=["health"])


def _ping(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))


@router.get(
    "/healthz",
    responses={503: {"description": "the database does not answer"}},
)
async def healthz(engine: EngineDep) -> JSONResponse:
    """200 while the service and its database answer, else 503 saying why."""
    try:
        await run_in_threadpool(_ping, engine)
    except SQLAlchemyError as exc:
        reason = database_unavailable(exc) or type(exc).__name__
        return JSONResponse(
            {"status": "unavailable", "detail": f"database unavailable: {reason}"}, status_code=503
        )
    return JSONResponse({"status": "ok"})
