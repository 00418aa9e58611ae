"""The series catalogue shared by every endpoint: one row per series (family and labels),
where there was one per endpoint that showed it.

Servers of one deployment show the same series (the same model, engines, positions): 64
servers of one model held 64 copies of each, and the first window over them wrote ~900
catalogue rows where ~14 differ. The rows of a series are merged into its oldest, and every
stored snapshot's counters are renumbered to it: what each window reads is unchanged. A row
keeps the endpoint that first showed it (`endpoint`, now indexed): an endpoint's budget counts
the series it added. The downgrade gives each endpoint its own rows again.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from specdec_collector.store.snapshot_counters import renumber, snapshots

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ENDPOINT_SERIES = sa.table(
    "endpoint_series",
    sa.column("id", sa.Integer()),
    sa.column("endpoint", sa.String(2048)),
    sa.column("family", sa.String(64)),
    sa.column("labels", sa.Text()),
    sa.column("labels_digest", sa.String(64)),
)
WINDOW_TARGET = sa.table("window_target", sa.column("id", sa.Integer()), sa.column("url"))


def upgrade() -> None:
    connection = op.get_bind()
    kept: dict[tuple[str, str], int] = {}  # (family, digest) -> the series' oldest row
    merged: dict[int, int] = {}  # a newer row -> the oldest of its series
    for series_id, family, digest in connection.execute(
        sa.select(
            ENDPOINT_SERIES.c.id, ENDPOINT_SERIES.c.family, ENDPOINT_SERIES.c.labels_digest
        ).order_by(ENDPOINT_SERIES.c.id)
    ):
        oldest = kept.setdefault((family, digest), series_id)
        if oldest != series_id:
            merged[series_id] = oldest
    if merged:
        renumber(connection, lambda _, series_id: merged.get(series_id, series_id))
        for first in range(0, len(merged), 1000):
            connection.execute(
                ENDPOINT_SERIES.delete().where(
                    ENDPOINT_SERIES.c.id.in_(list(merged)[first : first + 1000])
                )
            )
    with op.batch_alter_table("endpoint_series", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_endpoint_series_endpoint"), type_="unique")
        batch_op.create_unique_constraint(
            batch_op.f("uq_endpoint_series_labels_digest"), ["labels_digest", "family"]
        )
        batch_op.create_index(batch_op.f("ix_endpoint_series_endpoint"), ["endpoint"])


def downgrade() -> None:
    connection = op.get_bind()
    with op.batch_alter_table("endpoint_series", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_endpoint_series_endpoint"))
        batch_op.drop_constraint(batch_op.f("uq_endpoint_series_labels_digest"), type_="unique")
    catalogue = {
        series_id: (endpoint, family, labels, digest)
        for series_id, endpoint, family, labels, digest in connection.execute(
            sa.select(
                ENDPOINT_SERIES.c.id,
                ENDPOINT_SERIES.c.endpoint,
                ENDPOINT_SERIES.c.family,
                ENDPOINT_SERIES.c.labels,
                ENDPOINT_SERIES.c.labels_digest,
            )
        )
    }
    url_of = dict(connection.execute(sa.select(WINDOW_TARGET.c.id, WINDOW_TARGET.c.url)).all())
    # Each (endpoint, series) a snapshot names whose row is another endpoint's: a row of its own.
    wanted = sorted(
        {
            (url_of[target_id], int(row[0]))
            for batch in snapshots(connection)
            for _, target_id, counters in batch
            for row in counters
            if catalogue[int(row[0])][0] != url_of[target_id]
        }
    )
    own: dict[tuple[str, int], int] = {}
    for url, series_id in wanted:
        _, family, labels, digest = catalogue[series_id]
        inserted = connection.execute(
            ENDPOINT_SERIES.insert()
            .values(endpoint=url, family=family, labels=labels, labels_digest=digest)
            .returning(ENDPOINT_SERIES.c.id)
        ).scalar_one()
        own[(url, series_id)] = inserted
    if own:
        renumber(
            connection,
            lambda target_id, series_id: own.get((url_of[target_id], series_id), series_id),
        )
    with op.batch_alter_table("endpoint_series", schema=None) as batch_op:
        batch_op.create_unique_constraint(
            batch_op.f("uq_endpoint_series_endpoint"), ["endpoint", "family", "labels_digest"]
        )
