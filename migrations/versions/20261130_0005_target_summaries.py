"""Target summaries: status and acceptance copied out of each result, for lists and filters;
an index for paging a team's windows newest first.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("window", schema=None) as batch_op:
        batch_op.create_index(
            "ix_window_team_started_at_id", ["team", "started_at", "id"], unique=False
        )

    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.add_column(sa.Column("status", sa.String(length=8), nullable=True))
        batch_op.add_column(sa.Column("acceptance_rate", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("acceptance_length", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("num_drafts", sa.Float(), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_window_target_acceptance_rate"), ["acceptance_rate"], unique=False
        )

    # Fill the new columns from the results already stored.
    target = sa.table(
        "window_target",
        sa.column("id", sa.Integer()),
        sa.column("result", sa.JSON()),
        sa.column("status", sa.String()),
        sa.column("acceptance_rate", sa.Float()),
        sa.column("acceptance_length", sa.Float()),
        sa.column("num_drafts", sa.Float()),
    )
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(target.c.id, target.c.result).where(target.c.result.is_not(None))
    )
    for row_id, result in rows.all():
        data = result.get("data") or {}
        connection.execute(
            target.update()
            .where(target.c.id == row_id)
            .values(
                status=result.get("status"),
                acceptance_rate=data.get("acceptance_rate"),
                acceptance_length=data.get("acceptance_length"),
                num_drafts=data.get("num_drafts"),
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_window_target_acceptance_rate"))
        batch_op.drop_column("num_drafts")
        batch_op.drop_column("acceptance_length")
        batch_op.drop_column("acceptance_rate")
        batch_op.drop_column("status")

    with op.batch_alter_table("window", schema=None) as batch_op:
        batch_op.drop_index("ix_window_team_started_at_id")
