"""Drop `ix_window_target_window_pk`: the unique index on (`window_pk`, `target`) serves every
lookup by window (and the cascade from `window`), so the second index only cost bytes and
writes (part of a stopped window's 1.5 KB).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_window_target_window_pk"))


def downgrade() -> None:
    with op.batch_alter_table("window_target", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_window_target_window_pk"), ["window_pk"], unique=False)
