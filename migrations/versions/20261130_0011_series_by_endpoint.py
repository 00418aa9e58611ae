"""The series catalogue keyed by endpoint: one row per series a scraped URL has shown,
shared by every window that reads it, where `target_series` held one per window target.

The catalogue was 45-60 % of a stopped window's bytes, and every start read and wrote it
again for each target. Every `target_series` row becomes (or joins) the `endpoint_series`
row of its target's URL, family and labels, and every stored snapshot's counters are
renumbered to the new ids: what each window reads is unchanged. The downgrade gives each
window target its own rows again.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from specdec_collector.store.snapshot_counters import renumber, snapshots

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TARGET_SERIES = sa.table(
    "target_series",
    sa.column("id", sa.Integer()),
    sa.column("target_id", sa.Integer()),
    sa.column("family", sa.String(32)),
    sa.column("labels", sa.Text()),
    sa.column("labels_digest", sa.String(64)),
)
ENDPOINT_SERIES = sa.table(
    "endpoint_series",
    sa.column("id", sa.Integer()),
    sa.column("endpoint", sa.String(2048)),
    sa.column("family", sa.String(32)),
    sa.column("labels", sa.Text()),
    sa.column("labels_digest", sa.String(64)),
)
WINDOW_TARGET = sa.table("window_target", sa.column("id", sa.Integer()), sa.column("url"))


def upgrade() -> None:
    op.create_table(
        "endpoint_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("endpoint", sa.String(length=2048), nullable=False),
        sa.Column("family", sa.String(length=32), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("labels_digest", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_endpoint_series")),
        sa.UniqueConstraint(
            "endpoint", "family", "labels_digest", name=op.f("uq_endpoint_series_endpoint")
        ),
    )
    connection = op.get_bind()
    old = connection.execute(
        sa.select(
            TARGET_SERIES.c.id,
            TARGET_SERIES.c.target_id,
            WINDOW_TARGET.c.url,
            TARGET_SERIES.c.family,
            TARGET_SERIES.c.labels,
            TARGET_SERIES.c.labels_digest,
        ).join(WINDOW_TARGET, WINDOW_TARGET.c.id == TARGET_SERIES.c.target_id)
    ).all()
    distinct: dict[tuple[str, str, str], dict[str, str]] = {}
    for _, _, url, family, labels, digest in old:
        distinct.setdefault(
            (url, family, digest),
            {"endpoint": url, "family": family, "labels": labels, "labels_digest": digest},
        )
    if distinct:
        connection.execute(ENDPOINT_SERIES.insert(), list(distinct.values()))
    stored = {
        (endpoint, family, digest): series_id
        for series_id, endpoint, family, digest in connection.execute(
            sa.select(
                ENDPOINT_SERIES.c.id,
                ENDPOINT_SERIES.c.endpoint,
                ENDPOINT_SERIES.c.family,
                ENDPOINT_SERIES.c.labels_digest,
            )
        )
    }
    new_id = {
        (target_id, old_id): stored[(url, family, digest)]
        for old_id, target_id, url, family, _, digest in old
    }
    renumber(connection, lambda target_id, old_id: new_id[(target_id, old_id)])
    with op.batch_alter_table("target_series", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_target_series_target_id"))
    op.drop_table("target_series")


def downgrade() -> None:
    op.create_table(
        "target_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("family", sa.String(length=32), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("labels_digest", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["target_id"],
            ["window_target.id"],
            name=op.f("fk_target_series_target_id_window_target"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_target_series")),
        sa.UniqueConstraint(
            "target_id", "family", "labels_digest", name=op.f("uq_target_series_target_id")
        ),
    )
    with op.batch_alter_table("target_series", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_target_series_target_id"), ["target_id"], unique=False)
    connection = op.get_bind()
    catalogue = {
        series_id: (family, labels, digest)
        for series_id, family, labels, digest in connection.execute(
            sa.select(
                ENDPOINT_SERIES.c.id,
                ENDPOINT_SERIES.c.family,
                ENDPOINT_SERIES.c.labels,
                ENDPOINT_SERIES.c.labels_digest,
            )
        )
    }
    used = sorted(
        {(target_id, int(row[0])) for batch in snapshots(connection)
         for _, target_id, counters in batch for row in counters}
    )  # fmt: skip
    if used:
        connection.execute(
            TARGET_SERIES.insert(),
            [
                dict(zip(("target_id", "family", "labels", "labels_digest"),
                         (target_id, *catalogue[series_id]), strict=True))
                for target_id, series_id in used
            ],
        )  # fmt: skip
    by_key = {
        (target_id, family, digest): series_id
        for series_id, target_id, family, digest in connection.execute(
            sa.select(
                TARGET_SERIES.c.id,
                TARGET_SERIES.c.target_id,
                TARGET_SERIES.c.family,
                TARGET_SERIES.c.labels_digest,
            )
        )
    }
    renumber(
        connection,
        lambda target_id, series_id: by_key[
            (target_id, catalogue[series_id][0], catalogue[series_id][2])
        ],
    )
    op.drop_table("endpoint_series")
