"""What a start body tells of a target's engine: its name and the draft tokens per step.

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
        batch_op.add_column(sa.Column("engine", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("draft_tokens_per_step", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.drop_column("draft_tokens_per_step")
        batch_op.drop_column("engine")
