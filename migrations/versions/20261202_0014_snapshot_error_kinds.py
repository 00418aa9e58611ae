"""A failed reading's kind beside its text: `snapshot.error_kind`.

Snapshots stored before kinds were kept are carried over: the kind is read from the text
where its words say it (the texts are the collector's own, fixed), else `unrecorded`.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The words of each kind's text as the collector wrote them, first match wins. Kept here, not
# imported: a migration must read the texts of its own time whatever the code says later.
_KIND_OF_TEXT = (
    ("Metrics endpoint returned HTTP", "http_status"),
    ("Window force-closed by an admin", "force_closed"),
    ("baseline was never stored", "not_stored"),
    ("Prometheus", "prometheus"),
    (": timed out after", "timeout"),
    (": refused: ", "refused"),
    ("answer larger than", "too_large"),
    ("not a Prometheus exposition", "not_prometheus"),
    ("ConnectError", "connect"),
    ("All connection attempts failed", "connect"),
    ("not UTF-8", "invalid_payload"),
    ("invalid gzip data", "invalid_payload"),
    ("cut off mid-line", "invalid_payload"),
    ("not a finite count", "invalid_payload"),
    ("series given twice", "invalid_payload"),
)


def kind_of(text: str) -> str:
    """The kind a stored error text says, or `unrecorded`."""
    return next((kind for words, kind in _KIND_OF_TEXT if words in text), "unrecorded")


def upgrade() -> None:
    op.add_column("snapshot", sa.Column("error_kind", sa.String(length=32), nullable=True))
    snapshot = sa.table(
        "snapshot",
        sa.column("id", sa.Integer()),
        sa.column("error", sa.Text()),
        sa.column("error_kind", sa.String()),
    )
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(snapshot.c.id, snapshot.c.error).where(snapshot.c.error.is_not(None))
    )
    kinds = [{"snapshot_id": row.id, "kind": kind_of(row.error)} for row in rows]
    if kinds:
        connection.execute(
            snapshot.update()
            .where(snapshot.c.id == sa.bindparam("snapshot_id"))
            .values(error_kind=sa.bindparam("kind")),
            kinds,
        )


def downgrade() -> None:
    # In place, as 0013's: a batch would copy the table on SQLite.
    op.execute("ALTER TABLE snapshot DROP COLUMN error_kind")
