"""Restarts as a summary column: lists and their CSV show a result's engine restarts without
reading the results. Stopped windows are carried over: each stored result's `restarts` is
copied into the column (results stored before restarts were counted have none: null).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.add_column(sa.Column("restarts", sa.Integer(), nullable=True))
    target = sa.table(
        "window_target",
        sa.column("id", sa.Integer()),
        sa.column("result", sa.JSON()),
        sa.column("restarts", sa.Integer()),
    )
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(target.c.id, target.c.result).where(target.c.result.is_not(None))
    )
    counted = [
        {"target_id": row.id, "count": row.result["restarts"]}
        for row in rows
        if isinstance(row.result, dict) and isinstance(row.result.get("restarts"), int)
    ]
    if counted:
        connection.execute(
            target.update()
            .where(target.c.id == sa.bindparam("target_id"))
            .values(restarts=sa.bindparam("count")),
            counted,
        )


def downgrade() -> None:
    # Not a batch: on SQLite a batch copies the table, and dropping the old one with foreign
    # keys on deletes every row that references it (snapshots). Both stores drop a column in
    # place (SQLite since 3.35).
    op.execute("ALTER TABLE window_target DROP COLUMN restarts")
