"""Stored snapshots' counter rows (`[series id, value, created]`) given new series ids, in
batches: for the migrations that change how the catalogue is keyed."""

from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa

SNAPSHOT = sa.table(
    "snapshot",
    sa.column("id", sa.Integer()),
    sa.column("target_id", sa.Integer()),
    sa.column("counters", sa.JSON()),
)
BATCH = 1000  # snapshots rewritten per statement


def snapshots(connection: sa.Connection) -> Iterator[list[tuple[int, int, list[Any]]]]:
    """(id, target id, counters) of every snapshot with counters, in batches by id."""
    after = 0
    while True:
        rows = connection.execute(
            sa.select(SNAPSHOT.c.id, SNAPSHOT.c.target_id, SNAPSHOT.c.counters)
            .where(SNAPSHOT.c.id > after, SNAPSHOT.c.counters.is_not(None))
            .order_by(SNAPSHOT.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        # A JSON column holding JSON null reads back as None: such a row has no counters.
        yield [(row_id, target_id, counters) for row_id, target_id, counters in rows if counters]
        after = rows[-1][0]


def renumber(connection: sa.Connection, new_id: Callable[[int, int], int]) -> None:
    """Give every stored counter row the id `new_id(target id, old id)`; a snapshot whose ids
    all stay is not written."""
    for batch in snapshots(connection):
        updates = []
        for row_id, target_id, counters in batch:
            renumbered = [[new_id(target_id, int(row[0])), *row[1:]] for row in counters]
            if renumbered != counters:
                updates.append({"row_id": row_id, "counters": renumbered})
        if updates:
            connection.execute(
                SNAPSHOT.update().where(SNAPSHOT.c.id == sa.bindparam("row_id")), updates
            )
