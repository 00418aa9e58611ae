"""Initial schema: windows, their targets, the series they show, and scrape snapshots.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "window",
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("sample_interval_s", sa.Float(), nullable=True),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("window_id", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_sampled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_window")),
        sa.UniqueConstraint("window_id", name=op.f("uq_window_window_id")),
    )
    op.create_table(
        "window_target",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("window_pk", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(length=300), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["window_pk"],
            ["window.id"],
            name=op.f("fk_window_target_window_pk_window"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_window_target")),
        sa.UniqueConstraint("window_pk", "target", name=op.f("uq_window_target_window_pk")),
    )
    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_window_target_window_pk"), ["window_pk"], unique=False)

    op.create_table(
        "snapshot",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("counters", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["target_id"],
            ["window_target.id"],
            name=op.f("fk_snapshot_target_id_window_target"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_snapshot")),
    )
    with op.batch_alter_table("snapshot", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_snapshot_target_id"), ["target_id"], unique=False)

    op.create_table(
        "target_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("family", sa.String(length=32), nullable=False),
        sa.Column("labels", sa.String(length=4096), nullable=False),
        sa.ForeignKeyConstraint(
            ["target_id"],
            ["window_target.id"],
            name=op.f("fk_target_series_target_id_window_target"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_target_series")),
        sa.UniqueConstraint(
            "target_id", "family", "labels", name=op.f("uq_target_series_target_id")
        ),
    )
    with op.batch_alter_table("target_series", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_target_series_target_id"), ["target_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("target_series", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_target_series_target_id"))

    op.drop_table("target_series")
    with op.batch_alter_table("snapshot", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_snapshot_target_id"))

    op.drop_table("snapshot")
    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_window_target_window_pk"))

    op.drop_table("window_target")
    op.drop_table("window")
