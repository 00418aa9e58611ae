"""How a target verifies drafts, as its start body told (`window_target.verification`).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("window_target", sa.Column("verification", sa.String(length=16), nullable=True))


def downgrade() -> None:
    # In place, on SQLite too (3.35 on): a batch copy would recreate `window_target`, and
    # dropping the old table deletes every snapshot of it (ON DELETE CASCADE).
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE window_target DROP COLUMN verification")
    else:
        op.drop_column("window_target", "verification")
