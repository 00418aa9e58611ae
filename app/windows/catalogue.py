"""The series catalogue: every spec-decode series an endpoint has shown, by id.

A snapshot stores its counters as `[series id, value, created]` rows; the id names the
series' family and label set in `endpoint_series`, one row per (endpoint, family, labels)
shared by every window that reads the endpoint. Rows are only ever added, never changed or
deleted, so each process remembers the ones it has read or written (`KnownSeries`, one per
database): a scrape of a server seen before costs no catalogue query at all, and a
stop reads back only the series it does not know yet.
"""

import threading
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import event
from sqlalchemy import select as sa_select
from sqlmodel import Session, col

from specdec_collector.core.counters import Role, ServingEngine
from specdec_collector.core.exposition import (
    Series,
    SeriesKey,
    SeriesValue,
    labels_digest,
    labels_from_text,
    labels_to_text,
)
from specdec_collector.core.readings import Failure, FailureKind, Reading
from specdec_collector.store.db import MAX_IN_LIST, PerEngine, upsert_insert
from specdec_collector.store.tables import TABLES, EndpointSeries
from specdec_collector.windows.stored import NO_BASELINE, StoredSnapshot

#: Entries each process keeps per database before starting over: a hostile endpoint whose
#: labels change on every scrape adds catalogue rows, and must not grow the memory too.
MAX_KNOWN_SERIES = 200_000


@lru_cache(maxsize=4096)
def family_of(key: SeriesKey) -> str:
    """The stored `family` of a series: its role, prefixed by its engine unless vLLM (whose
    series were stored before there were other engines)."""
    if key.engine is ServingEngine.VLLM:
        return key.role.value
    return f"{key.engine.value}:{key.role.value}"


def series_key(family: str, labels: tuple[tuple[str, str], ...]) -> SeriesKey:
    """The inverse of `family_of`, with the series' labels."""
    database, sep, role = family.rpartition(":")
    return SeriesKey(Role(role), labels, ServingEngine(database) if sep else ServingEngine.VLLM)


class KnownSeries:
    """The catalogue rows one process has met, both ways: (endpoint, series) -> id, id -> series."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, SeriesKey], int] = {}
        self.keys: dict[int, SeriesKey] = {}
        self._lock = threading.Lock()

    def remember(self, rows: Iterable[tuple[int, str, SeriesKey]]) -> None:
        with self._lock:
            if len(self.keys) > MAX_KNOWN_SERIES:
                self.ids, self.keys = {}, {}
            for series_id, endpoint, key in rows:
                self.ids[(endpoint, key)] = series_id
                self.keys[series_id] = key


# Each process's memory of each database's catalogue.
_KNOWN = PerEngine(KnownSeries)


def _known(session: Session) -> KnownSeries:
    return _KNOWN.of(session)


#: A catalogue row as stored: id, endpoint, family, labels.
_ROWS = sa_select(
    col(EndpointSeries.id),
    col(EndpointSeries.endpoint),
    col(EndpointSeries.family),
    col(EndpointSeries.labels),
)


def _rows_where(session: Session, *conditions: Any) -> list[tuple[int, str, SeriesKey]]:
    """(id, endpoint, series) of the stored rows that meet `conditions`."""
    return [
        (series_id, endpoint, series_key(family, labels_from_text(labels)))
        for series_id, endpoint, family, labels in session.execute(_ROWS.where(*conditions))
    ]


def _stored_rows(
    session: Session, endpoints: Iterable[str], digests: Iterable[str]
) -> list[tuple[int, str, str, str]]:
    """The rows (`_ROWS`) of these endpoints with these label digests."""
    wanted_endpoints, wanted_digests = list(set(endpoints)), list(set(digests))
    rows: list[tuple[int, str, str, str]] = []
    for first in range(0, len(wanted_digests), MAX_IN_LIST):
        rows += session.execute(
            _ROWS.where(
                col(EndpointSeries.endpoint).in_(wanted_endpoints),
                col(EndpointSeries.labels_digest).in_(wanted_digests[first : first + MAX_IN_LIST]),
            )
        ).all()
    return rows


def series_ids(
    session: Session, wanted: Mapping[str, Iterable[SeriesKey]]
) -> dict[tuple[str, SeriesKey], int]:
    """Ids of the series in `wanted` (by endpoint), adding the ones never stored.

    Known series cost nothing; the others one insert that returns the ids of those never
    stored, and one read of those stored before (by another process, or before a restart).
    """
    known = _known(session)
    found: dict[tuple[str, SeriesKey], int] = {}
    missing: list[tuple[str, SeriesKey]] = []
    for endpoint, keys in wanted.items():
        for key in keys:
            series_id = known.ids.get((endpoint, key))
            if series_id is None:
                missing.append((endpoint, key))
            else:
                found[(endpoint, key)] = series_id
    if not missing:
        return found
    texts = {key: labels_to_text(key.labels) for _, key in missing}
    digests = {text: labels_digest(text) for text in texts.values()}
    # What each missing series' row holds: the rows read or added are matched to their series
    # through it, not parsed back from their text.
    as_stored = {(endpoint, family_of(key), texts[key]): key for endpoint, key in missing}

    def matched(rows: Iterable[tuple[int, str, str, str]]) -> list[tuple[int, str, SeriesKey]]:
        return [
            (series_id, endpoint, key)
            for series_id, endpoint, family, labels in rows
            if (key := as_stored.get((endpoint, family, labels))) is not None
        ]

    def read() -> None:
        rows = matched(_stored_rows(session, (e for e, _ in missing), digests.values()))
        _remember(session, rows, added=False)
        found.update({(endpoint, key): series_id for series_id, endpoint, key in rows})

    # Inserted first, read after: a series this process does not know is most often new (a
    # server seen for the first time), and its insert returns its id; one stored already (by
    # another process, or before a restart) inserts nothing and is read.
    insert = upsert_insert(session.get_bind().dialect.name)
    table = TABLES["endpoint_series"]
    # Core executemany, not a multi-row VALUES: its statement is compiled once and cached,
    # where one of N rows was compiled anew for every window.
    added = matched(
        session.execute(
            insert(table)
            .on_conflict_do_nothing(index_elements=["endpoint", "family", "labels_digest"])
            .returning(table.c.id, table.c.endpoint, table.c.family, table.c.labels),
            [
                {"endpoint": endpoint, "family": family_of(key), "labels": texts[key],
                 "labels_digest": digests[texts[key]]}
                for endpoint, key in missing
            ],
        )
    )  # fmt: skip
    _remember(session, added, added=True)
    found.update({(endpoint, key): series_id for series_id, endpoint, key in added})
    if len(added) < len(missing):
        read()
    return found


def _remember(session: Session, rows: list[tuple[int, str, SeriesKey]], added: bool) -> None:
    """Remember rows this session read or (`added`) inserted.

    Once a session has inserted rows, everything it reads may be its own uncommitted work,
    which a rollback takes back (and SQLite may then give the ids to other rows): such rows
    are remembered only when the session commits.
    """
    pending: list[tuple[int, str, SeriesKey]] | None = session.info.get("added_series")
    if pending is None and not added:
        _known(session).remember(rows)
        return
    if pending is None:
        pending = session.info["added_series"] = []

        def committed(session: Session) -> None:
            _known(session).remember(session.info.pop("added_series", ()))

        def rolled_back(session: Session, previous_transaction: object) -> None:
            session.info.pop("added_series", None)

        event.listen(session, "after_commit", committed, once=True)
        event.listen(session, "after_soft_rollback", rolled_back, once=True)
    pending.extend(rows)


def keys_of(
    session: Session, chains: Mapping[int, Sequence[StoredSnapshot]]
) -> dict[int, SeriesKey]:
    """The series (by id) the counters of these snapshots (by target) name.

    A snapshot commits with (or after) the series it names, so every one is there to read.
    """
    known = _known(session)
    ids = {
        int(row[0])
        for chain in chains.values()
        for snapshot in chain
        for row in snapshot.counters or ()
        if row[0] is not None
    }
    found = {series_id: known.keys[series_id] for series_id in ids if series_id in known.keys}
    unknown = sorted(ids - found.keys())
    for first in range(0, len(unknown), MAX_IN_LIST):
        rows = _rows_where(
            session, col(EndpointSeries.id).in_(unknown[first : first + MAX_IN_LIST])
        )
        _remember(session, rows, added=False)
        found.update({series_id: key for series_id, _, key in rows})
    return found


def reading_of(snapshot: StoredSnapshot | None, catalog: Mapping[int, SeriesKey]) -> Reading:
    """What a stored snapshot read (`NO_BASELINE` for a `before` that was never stored)."""
    if snapshot is None:
        return NO_BASELINE
    if snapshot.counters is None:
        return Failure(
            snapshot.error_kind or FailureKind.UNRECORDED, snapshot.error or "scrape failed"
        )
    series: Series = {}
    for series_id, value, created in snapshot.counters:
        assert series_id is not None
        # Counters are stored as integers where they are (see `store_snapshots`).
        series[catalog[int(series_id)]] = SeriesValue(
            None if value is None else float(value), created
        )
    return series
