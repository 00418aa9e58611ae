"""Full floats in stored results, as AISBench writes them: results stored before this revision
had `acceptance_rate` rounded to 2 decimals and `acceptance_length` to 3. Both are recomputed
from the window's counts, which were stored exactly; per-position rates keep their 4 decimals.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TARGET = sa.table(
    "window_target",
    sa.column("id", sa.Integer()),
    sa.column("result", sa.JSON()),
    sa.column("acceptance_rate", sa.Float()),
    sa.column("acceptance_length", sa.Float()),
)

Figures = Callable[[dict[str, Any]], tuple[float, float]]


def _exact(data: dict[str, Any]) -> tuple[float, float]:
    accepted = data["accepted_tokens"]
    return accepted / data["draft_tokens"] * 100, 1 + accepted / data["num_drafts"]


def _rounded(data: dict[str, Any]) -> tuple[float, float]:
    return round(data["acceptance_rate"], 2), round(data["acceptance_length"], 3)


def _rewrite(figures: Figures) -> None:
    """Set every ok result's rate and length (in the result and its summary columns)."""
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(TARGET.c.id, TARGET.c.result).where(TARGET.c.result.is_not(None))
    ).all()
    for row_id, result in rows:
        data = result.get("data")
        if (
            result.get("status") != "ok"
            or not data
            or not data.get("num_drafts")
            or not data.get("draft_tokens")
            or "accepted_tokens" not in data
        ):
            continue  # no counts to recompute from
        rate, length = figures(data)
        changed = {**result, "data": {**data, "acceptance_rate": rate, "acceptance_length": length}}
        connection.execute(
            TARGET.update()
            .where(TARGET.c.id == row_id)
            .values(result=changed, acceptance_rate=rate, acceptance_length=length)
        )


def upgrade() -> None:
    _rewrite(_exact)


def downgrade() -> None:
    _rewrite(_rounded)
