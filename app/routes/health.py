"""Liveness and readiness."""

from fastapi import APIRouter
from sqlalchemy import text

from app.db import SessionDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(session: SessionDep) -> dict[str, str]:
    """200 while the service and its database answer."""
    session.exec(text("SELECT 1"))  # type: ignore[call-overload]
    return {"status": "ok"}
