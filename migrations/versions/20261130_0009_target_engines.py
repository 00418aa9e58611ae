"""Engines: what a start body tells of a target's engine, and the engine and exactness of its
result as summary columns (lists show them without reading the results).

`named_engine` and `draft_tokens_per_step` come from the start body (`core.targets.EngineHints`);
`result_engine` and `exact` are copied from the result at stop. Results stored before this
revision were all vLLM's and exact: their summaries say so.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.add_column(sa.Column("named_engine", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("draft_tokens_per_step", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("result_engine", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("exact", sa.Boolean(), nullable=True))
    target = sa.table(
        "window_target",
        sa.column("status", sa.String()),
        sa.column("result_engine", sa.String()),
        sa.column("exact", sa.Boolean()),
    )
    op.execute(
        target.update().where(target.c.status == "ok").values(result_engine="vllm", exact=sa.true())
    )


def downgrade() -> None:
    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.drop_column("exact")
        batch_op.drop_column("result_engine")
        batch_op.drop_column("draft_tokens_per_step")
        batch_op.drop_column("named_engine")
