"""Room for every engine's stored family names: `endpoint_series.family` is 64 characters
(`lmdeploy:lifetime_acceptance_rate` is 33).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("endpoint_series") as batch:
        batch.alter_column(
            "family", existing_type=sa.String(length=32), type_=sa.String(length=64),
            existing_nullable=False,
        )  # fmt: skip


def downgrade() -> None:
    with op.batch_alter_table("endpoint_series") as batch:
        batch.alter_column(
            "family", existing_type=sa.String(length=64), type_=sa.String(length=32),
            existing_nullable=False,
        )  # fmt: skip
