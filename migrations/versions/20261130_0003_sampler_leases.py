"""Sampler leases: which replica samples an open window, and until when.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("window", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sampler_owner", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("sampler_lease_until", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("window", schema=None) as batch_op:
        batch_op.drop_column("sampler_lease_until")
        batch_op.drop_column("sampler_owner")
