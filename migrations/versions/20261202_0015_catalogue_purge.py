"""How many times the series catalogue's unused rows were deleted: `catalogue_purge`.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "catalogue_purge",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("purges", sa.Integer(), nullable=False),
        sa.Column("purged_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_catalogue_purge")),
    )


def downgrade() -> None:
    op.drop_table("catalogue_purge")
