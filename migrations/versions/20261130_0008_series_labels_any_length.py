"""Label sets of any length in the series catalogue.

`target_series.labels` was VARCHAR(4096) and part of a unique index: on PostgreSQL a label set
over 4096 characters, or over a B-tree entry's ~2700 bytes, failed the whole stop. The labels
become TEXT and the unique key holds their SHA-256 (`labels_digest`) instead, filled here for
every stored series.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SERIES = sa.table(
    "target_series",
    sa.column("id", sa.Integer()),
    sa.column("labels", sa.Text()),
    sa.column("labels_digest", sa.String(64)),
)


def upgrade() -> None:
    with op.batch_alter_table("target_series", schema=None) as batch_op:
        batch_op.add_column(sa.Column("labels_digest", sa.String(length=64), nullable=True))
    connection = op.get_bind()
    rows = connection.execute(sa.select(SERIES.c.id, SERIES.c.labels)).all()
    if rows:
        connection.execute(
            SERIES.update().where(SERIES.c.id == sa.bindparam("row_id")),
            [
                {"row_id": row_id, "labels_digest": hashlib.sha256(labels.encode()).hexdigest()}
                for row_id, labels in rows
            ],
        )
    with op.batch_alter_table("target_series", schema=None) as batch_op:
        batch_op.drop_constraint("uq_target_series_target_id", type_="unique")
        batch_op.alter_column("labels_digest", existing_type=sa.String(64), nullable=False)
        batch_op.alter_column(
            "labels", existing_type=sa.String(length=4096), type_=sa.Text(), nullable=False
        )
        batch_op.create_unique_constraint(
            "uq_target_series_target_id", ["target_id", "family", "labels_digest"]
        )


def downgrade() -> None:
    with op.batch_alter_table("target_series", schema=None) as batch_op:
        batch_op.drop_constraint("uq_target_series_target_id", type_="unique")
        batch_op.alter_column(
            "labels", existing_type=sa.Text(), type_=sa.String(length=4096), nullable=False
        )
        batch_op.create_unique_constraint(
            "uq_target_series_target_id", ["target_id", "family", "labels"]
        )
        batch_op.drop_column("labels_digest")
