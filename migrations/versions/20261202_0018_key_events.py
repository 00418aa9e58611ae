"""The keys' audit trail: one `key_event` row per key created or revoked.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "key_event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("team", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_key_event")),
    )
    op.create_index(op.f("ix_key_event_key_id"), "key_event", ["key_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_key_event_key_id"), table_name="key_event")
    op.drop_table("key_event")
