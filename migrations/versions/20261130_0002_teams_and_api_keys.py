"""Teams and API keys: windows are unique per team, record who started and stopped them;
targets may carry headers.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_key",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("team", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_key")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_key_key_hash")),
    )
    with op.batch_alter_table("window", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("team", sa.String(length=64), nullable=False, server_default="default")
        )
        batch_op.add_column(
            sa.Column(
                "started_by", sa.String(length=64), nullable=False, server_default="anonymous"
            )
        )
        batch_op.add_column(sa.Column("stopped_by", sa.String(length=64), nullable=True))
        batch_op.drop_constraint(batch_op.f("uq_window_window_id"), type_="unique")
        batch_op.create_index(batch_op.f("ix_window_state"), ["state"], unique=False)
        batch_op.create_unique_constraint(batch_op.f("uq_window_team"), ["team", "window_id"])

    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.add_column(sa.Column("headers", sa.JSON(), nullable=True))
        batch_op.create_index(batch_op.f("ix_window_target_target"), ["target"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_window_target_target"))
        batch_op.drop_column("headers")

    with op.batch_alter_table("window", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_window_team"), type_="unique")
        batch_op.drop_index(batch_op.f("ix_window_state"))
        batch_op.create_unique_constraint(batch_op.f("uq_window_window_id"), ["window_id"])
        batch_op.drop_column("stopped_by")
        batch_op.drop_column("started_by")
        batch_op.drop_column("team")

    op.drop_table("api_key")
