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
    with op.batch_alter_table("window_target") as batch:
        batch.add_column(sa.Column("verification", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("window_target") as batch:
        batch.drop_column("verification")
