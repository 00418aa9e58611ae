"""Liveness, readiness and the collector's own metrics."""

import asyncio

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from specdec_collector.schemas import KeyRole
from specdec_collector.service.deps import HealthDep, OptionalReaderDep, StoreDep, WindowsDep
from specdec_collector.service.state import Health
from specdec_collector.store.db import (
    DatabaseBusy,
    database_unavailable,
    short_write,
    upsert_insert,
)
from specdec_collector.store.store import Store
from specdec_collector.store.tables import Heartbeat, utcnow
from specdec_collector.windows.service import WindowService

router = APIRouter(tags=["health"])


# How long a health check waits for the write lock, and for how long after the last beat that
# landed a busy database still counts as healthy (it is busy writing, not broken).
BEAT_WAIT_S = 1.0
BUSY_GRACE_S = 30.0
# Checks this close to the last one get its answer: at most one heartbeat write a second per
# replica, however many anonymous callers ask.
ANSWER_KEPT_S = 1.0
# How long a check waits for the heartbeat before it answers what the last one found (the
# heartbeat goes on: a long write holds SQLite's lock for up to BEAT_WAIT_S).
ANSWER_WAIT_S = 0.05


def beat(database: Engine, replica_id: str) -> None:
    """Write this replica's heartbeat: proves the database answers and takes writes.

    A read alone would pass on a read-only file or a full disk. `DatabaseBusy` when another
    write holds the database for more than `BEAT_WAIT_S`.
    """
    with short_write(database, BEAT_WAIT_S) as connection:
        insert = upsert_insert(database.dialect.name)
        now = utcnow()
        connection.execute(
            insert(Heartbeat)
            .values(replica_id=replica_id, beat_at=now)
            .on_conflict_do_update(index_elements=["replica_id"], set_={"beat_at": now})
        )


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def metrics(principal: OptionalReaderDep, windows: WindowsDep) -> Response:
    """The collector's own Prometheus metrics: aggregates without a key; with one, also the
    latest closed windows' results of the key's team (of every team for an admin or metrics
    key)."""
    team = None
    if principal is not None and principal.role not in (KeyRole.ADMIN, KeyRole.METRICS):
        team = principal.team
    body = await windows.metrics_text(with_results=principal is not None, team=team)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


@router.get("/livez")
async def livez() -> JSONResponse:
    """200 while the process answers, whatever its database does: a liveness probe (a
    database outage must not restart every replica; readiness takes them out of service)."""
    return JSONResponse({"status": "alive"})


@router.get(
    "/readyz",
    responses={503: {"description": "the database does not answer or takes no writes"}},
)
async def readyz(store: StoreDep, windows: WindowsDep, health: HealthDep) -> JSONResponse:
    """`/healthz` under the name Kubernetes' readiness probes use."""
    return await healthz(store, windows, health)


@router.get(
    "/healthz",
    responses={503: {"description": "the database does not answer or takes no writes"}},
)
async def healthz(store: StoreDep, windows: WindowsDep, health: HealthDep) -> JSONResponse:
    """200 while the service can serve (its database answers and takes writes), else 503.

    Under a long write (SQLite has one writer at a time) it answers within about a second:
    200 with `"database": "busy"` while a heartbeat landed in the last 30 s, else 503. Checks
    within a second of the last one get its answer; a check whose heartbeat waits for the write
    lock answers what the last one found after 50 ms, and the heartbeat's answer is the next.
    """
    answer = health.recent_answer(ANSWER_KEPT_S)
    if answer is None:
        check = health.check
        if check is None or check.done():
            check = health.check = asyncio.get_running_loop().create_task(
                _check_and_keep(store, windows, health)
            )
        done, _ = await asyncio.wait((check,), timeout=ANSWER_WAIT_S)
        last = health.recent_answer(float("inf"))
        if done or last is None:
            answer = await asyncio.shield(check)
        else:  # the heartbeat waits for the write lock: what the last one found, meanwhile
            answer = last
    status, body = answer
    return JSONResponse(body, status_code=status)


async def _check_and_keep(
    store: Store, windows: WindowService, health: Health
) -> tuple[int, dict[str, str]]:
    answer = await _check(store, windows, health)
    health.answered(*answer)
    return answer


async def _check(
    store: Store, windows: WindowService, health: Health
) -> tuple[int, dict[str, str]]:
    """One check: the heartbeat written, or why not."""
    try:
        await store.run(beat, windows.sampler.replica_id)
    except DatabaseBusy as exc:
        since = health.seconds_since_beat()
        if since is not None and since <= BUSY_GRACE_S:
            return 200, {"status": "ok", "database": "busy"}
        return 503, {"status": "unavailable", "detail": f"database unavailable: {exc}"}
    except SQLAlchemyError as exc:
        reason = database_unavailable(exc) or type(exc).__name__
        return 503, {"status": "unavailable", "detail": f"database unavailable: {reason}"}
    health.beat_landed()
    return 200, {"status": "ok"}
