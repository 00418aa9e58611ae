"""Where a window's counters come from: `scrape` (every window before this revision) or
`prometheus`.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("window", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("source", sa.String(length=16), nullable=False, server_default="scrape")
        )


def downgrade() -> None:
    with op.batch_alter_table("window", schema=None) as batch_op:
        batch_op.drop_column("source")
