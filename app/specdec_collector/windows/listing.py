"""A team's windows, filtered and paged by an opaque cursor."""

import base64
import binascii
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import exists
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from specdec_collector.core.arithmetic import as_number
from specdec_collector.exceptions import InvalidInput
from specdec_collector.schemas import TargetSummary, WindowSummary
from specdec_collector.store.db import read_session
from specdec_collector.store.tables import Window, WindowTarget, as_utc
from specdec_collector.windows.views import header_fields


@dataclass(frozen=True, slots=True)
class WindowFilter:
    """What `GET /windows` narrows the team's windows to; every field is optional."""

    state: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    target: str | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None
    min_acceptance_rate: float | None = None
    max_acceptance_rate: float | None = None


# A target's summary, as `TargetSummary` names each field, from its columns.
_SUMMARY_OF: dict[str, Any] = {
    "target": WindowTarget.target,
    "status": WindowTarget.status,
    "acceptance_rate": WindowTarget.acceptance_rate,
    "acceptance_length": WindowTarget.acceptance_length,
    "num_drafts": WindowTarget.num_drafts,
    "engine": WindowTarget.result_engine,
    "exact": WindowTarget.exact,
    "restarts": WindowTarget.restarts,
}
_SUMMARY_FIELDS = tuple(_SUMMARY_OF)
_SUMMARY_COLUMNS = tuple(col(column) for column in _SUMMARY_OF.values())


def _encode_cursor(started_at: datetime, pk: int) -> str:
    """An opaque cursor: the (start time, row id) of the last window of a page."""
    raw = json.dumps([as_utc(started_at).isoformat(), pk]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, int]:
    """The inverse of `_encode_cursor`; `InvalidInput` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        started, pk = json.loads(raw)
        moment = datetime.fromisoformat(started)
        # What `_encode_cursor` writes, and nothing a database could not compare with.
        if type(pk) is not int or not 0 <= pk < 2**63 or moment.tzinfo is None:
            raise ValueError("not a cursor of this service")
        return moment, pk
    except (ValueError, TypeError, OverflowError, binascii.Error) as exc:
        raise InvalidInput(["query", "cursor"], "cursor is not one this service gave") from exc


def _filtered(query: Any, team: str, where: WindowFilter) -> Any:
    query = query.where(Window.team == team)
    if where.state is not None:
        query = query.where(Window.state == where.state)
    for name, value in where.labels:
        query = query.where(col(Window.labels)[name].as_string() == value)
    if where.started_after is not None:
        query = query.where(col(Window.started_at) >= where.started_after)
    if where.started_before is not None:
        query = query.where(col(Window.started_at) < where.started_before)
    target_conditions = []
    if where.target is not None:
        target_conditions.append(col(WindowTarget.target) == where.target)
    if where.min_acceptance_rate is not None:
        target_conditions.append(col(WindowTarget.acceptance_rate) >= where.min_acceptance_rate)
    if where.max_acceptance_rate is not None:
        target_conditions.append(col(WindowTarget.acceptance_rate) <= where.max_acceptance_rate)
    if target_conditions:
        # Windows with one target that meets every target condition at once.
        query = query.where(
            exists().where(col(WindowTarget.window_pk) == col(Window.id), *target_conditions)
        )
    return query


def list_windows(
    database: Engine,
    team: str,
    limit: int,
    where: WindowFilter | None = None,
    *,
    oldest_first: bool = False,
    cursor: str | None = None,
) -> tuple[list[WindowSummary], str | None]:
    """A page of the team's windows (newest first by default) and the cursor of the next page.

    Two queries whatever the page size: the windows, then all their targets' summaries.
    """
    query = _filtered(select(Window), team, where or WindowFilter())
    started, pk = col(Window.started_at), col(Window.id)
    if cursor is not None:
        after_started, after_pk = _decode_cursor(cursor)
        if oldest_first:
            query = query.where(
                (started > after_started) | ((started == after_started) & (pk > after_pk))
            )
        else:
            query = query.where(
                (started < after_started) | ((started == after_started) & (pk < after_pk))
            )
    order = (started.asc(), pk.asc()) if oldest_first else (started.desc(), pk.desc())
    with read_session(database) as session:
        windows = list(session.exec(query.order_by(*order).limit(limit + 1)).all())
        more = len(windows) > limit
        windows = windows[:limit]
        # The summary columns only: the stored results and headers are not needed here.
        rows = session.execute(
            sa_select(
                col(WindowTarget.window_pk),
                *_SUMMARY_COLUMNS,
            )
            .where(col(WindowTarget.window_pk).in_([w.id for w in windows]))
            .order_by(col(WindowTarget.window_pk), col(WindowTarget.ordinal))
        ).all()
    by_window: dict[int, list[TargetSummary]] = defaultdict(list)
    for window_pk, *columns in rows:
        summary = dict(zip(_SUMMARY_FIELDS, columns, strict=True))
        if summary["num_drafts"] is not None:
            summary["num_drafts"] = as_number(summary["num_drafts"])
        by_window[window_pk].append(TargetSummary(**summary))
    page = [WindowSummary(**header_fields(w), targets=by_window[w.id or 0]) for w in windows]
    next_cursor = _encode_cursor(windows[-1].started_at, windows[-1].id or 0) if more else None
    return page, next_cursor
