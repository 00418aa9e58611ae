"""An index on `window.stopped_at`: overlaps read the windows stopped after a moment, and
without it that read grows with every window ever stored.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("window", schema=None) as batch_op:
        batch_op.create_index("ix_window_stopped_at", ["stopped_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("window", schema=None) as batch_op:
        batch_op.drop_index("ix_window_stopped_at")
