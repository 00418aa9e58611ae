"""The series catalogue: every spec-decode series an endpoint has shown, by id.

A snapshot stores its counters as `[series id, value, created]` rows; the id names the
series' family and label set in `endpoint_series`, one row per (family, labels) shared by
every endpoint that shows it and every window that reads one: the servers of a deployment
show the same series, so the servers of one model add few rows between them, and those are
written on the first start's critical path. Rows are never changed, so each process
remembers the ones it has read or written (`KnownSeries`, one per database): a scrape of
series seen before costs one small read (the purge count) and no catalogue query, and a stop
reads back only the series it does not know yet.

An endpoint adds at most `KnownSeries.budget` series (each row keeps the endpoint that added
it): one whose labels change on every scrape would otherwise add rows without end, many
with each scrape. Past it, its reading is stored as a failure saying so, and adds nothing.
Series another endpoint added first cost it nothing.

Rows no snapshot names, added by endpoints no open window reads, are deleted by the daily
purge (`purge_catalogue`); it counts itself in `catalogue_purge`, and a process that
remembers rows from before a purge forgets them first. On PostgreSQL the purge and the
writers of snapshots exclude each other with an advisory lock (writers share it); SQLite's
writers take turns.
"""

import hashlib
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache, partial
from typing import Any

from sqlalchemy import func, text
from sqlalchemy import select as sa_select
from sqlalchemy.engine import CursorResult, Engine
from sqlmodel import Session, col

from specdec_collector.core.counters import Role, ServingEngine
from specdec_collector.core.exposition import (
    Series,
    SeriesKey,
    SeriesValue,
)
from specdec_collector.core.readings import Failure, FailureKind, Reading
from specdec_collector.store.db import (
    MAX_IN_LIST,
    PerEngine,
    upsert_insert,
    write_session,
)
from specdec_collector.store.tables import TABLES, EndpointSeries, utcnow
from specdec_collector.store.transaction import WriteTransaction
from specdec_collector.windows.stored import NO_BASELINE, StoredSnapshot

#: Entries each process keeps per database before starting over: a hostile endpoint whose
#: labels change on every scrape adds catalogue rows, and must not grow the memory too.
MAX_KNOWN_SERIES = 200_000

#: Series an endpoint may name by default: twice the series one answer may hold
#: (SPECDEC_MAX_SERIES_PER_TARGET sets both).
DEFAULT_SERIES_BUDGET = 2 * 4096

#: The advisory lock the purge takes alone and the writers of snapshots share (PostgreSQL).
_PURGE_LOCK = 0x5EC0CA7A


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


@lru_cache(maxsize=8192)  # every target of a server repeats its label sets
def labels_to_text(labels: tuple[tuple[str, str], ...]) -> str:
    """Canonical text of a sorted label set, for storage and comparison."""
    return json.dumps(labels, ensure_ascii=False, separators=(",", ":"))


def labels_digest(text: str) -> str:
    """SHA-256 (hex) of a label set's canonical text: its unique key in the store."""
    return hashlib.sha256(text.encode()).hexdigest()


@lru_cache(maxsize=8192)
def labels_from_text(text: str) -> tuple[tuple[str, str], ...]:
    """The inverse of `labels_to_text` (cached: every target of a server repeats its label sets)."""
    return tuple((str(name), str(value)) for name, value in json.loads(text))


class KnownSeries:
    """The catalogue rows one process has met, both ways: series -> id, id -> series."""

    def __init__(self) -> None:
        self.ids: dict[SeriesKey, int] = {}
        self.keys: dict[int, SeriesKey] = {}
        self.budget = DEFAULT_SERIES_BUDGET
        self.purges = 0  # the purges of the database the rows remembered are from after
        self._lock = threading.Lock()

    def forget(self, purges: int) -> None:
        """Forget every row: the database purged its catalogue since they were met."""
        with self._lock:
            self.ids, self.keys, self.purges = {}, {}, purges

    def remember(self, rows: Iterable[tuple[int, SeriesKey]]) -> None:
        with self._lock:
            if len(self.keys) > MAX_KNOWN_SERIES:
                self.ids, self.keys = {}, {}
            for series_id, key in rows:
                self.ids[key] = series_id
                self.keys[series_id] = key


# Each process's memory of each database's catalogue.
_KNOWN = PerEngine(KnownSeries)


def _known(session: Session) -> KnownSeries:
    return _KNOWN.of(session)


def set_series_budget(database: Engine, budget: int) -> None:
    """The series an endpoint of `database` may name, in this process (from the settings)."""
    with Session(database) as session:
        _known(session).budget = budget


_PURGES = text("SELECT purges FROM catalogue_purge WHERE id = 1")
_PURGES_SHARED = text(
    "SELECT pg_advisory_xact_lock_shared(:lock), (SELECT purges FROM catalogue_purge WHERE id = 1)"
)


def _current(session: Session) -> KnownSeries:
    """This process's memory of the catalogue, forgotten first if a purge came since.

    Read once per write transaction: no purge comes until it ends (on PostgreSQL it holds the
    shared purge lock from the first read; on SQLite the writers, the purge among them, take
    turns). A group of writes (`store.lanes`) would otherwise read it for each write, each
    read a round trip to PostgreSQL in the writes' lane, where the writes queue."""
    known = _known(session)
    transaction = WriteTransaction.of(session)
    if transaction is not None and transaction.purges_read:
        return known
    if session.get_bind().dialect.name == "postgresql":
        purges = session.execute(_PURGES_SHARED, {"lock": _PURGE_LOCK}).one()[1]
    else:
        purges = session.execute(_PURGES).scalar_one_or_none()
    if (purges or 0) != known.purges:
        known.forget(purges or 0)
    if transaction is not None:  # it holds its locks to its end
        transaction.purges_read = True
    return known


#: A catalogue row as stored: id, family, labels.
_ROWS = sa_select(col(EndpointSeries.id), col(EndpointSeries.family), col(EndpointSeries.labels))


def _rows_where(session: Session, *conditions: Any) -> list[tuple[int, SeriesKey]]:
    """(id, series) of the stored rows that meet `conditions`."""
    return [
        (series_id, series_key(family, labels_from_text(labels)))
        for series_id, family, labels in session.execute(_ROWS.where(*conditions))
    ]


def _stored_rows(session: Session, digests: Iterable[str]) -> list[tuple[int, str, str]]:
    """The rows (`_ROWS`) with these label digests."""
    wanted = list(set(digests))
    rows: list[tuple[int, str, str]] = []
    for first in range(0, len(wanted), MAX_IN_LIST):
        rows += session.execute(
            _ROWS.where(col(EndpointSeries.labels_digest).in_(wanted[first : first + MAX_IN_LIST]))
        ).all()
    return rows


def _known_and_missing(
    known: KnownSeries, wanted: Mapping[str, Iterable[SeriesKey]]
) -> tuple[dict[SeriesKey, int], list[tuple[str, SeriesKey]]]:
    """The ids of the series of `wanted` this process knows, and the (endpoint, series) of
    those it does not, in one pass over one dict (`forget` replaces it, another thread may
    meanwhile)."""
    ids = known.ids
    found: dict[SeriesKey, int] = {}
    missing: list[tuple[str, SeriesKey]] = []
    for endpoint, keys in wanted.items():
        for key in keys:
            series_id = ids.get(key)
            if series_id is None:
                missing.append((endpoint, key))
            else:
                found[key] = series_id
    return found, missing


def endpoints_over_budget(
    session: Session, wanted: Mapping[str, Iterable[SeriesKey]]
) -> dict[str, int]:
    """The endpoints of `wanted` whose series would not all be stored (see `series_ids`),
    each with its budget: nothing is written."""
    known = _current(session)
    _, missing = _known_and_missing(known, wanted)
    return _over_budget(session, missing, known.budget) if missing else {}


def all_known(session: Session, wanted: Iterable[SeriesKey]) -> bool:
    """Whether this process knows every series of `wanted`: their snapshots then add nothing
    to the catalogue, and no endpoint goes past its budget."""
    known = _current(session).ids
    return all(key in known for key in wanted)


def series_ids(
    session: Session, wanted: Mapping[str, Iterable[SeriesKey]]
) -> tuple[dict[SeriesKey, int], dict[str, int]]:
    """Ids of the series in `wanted` (by endpoint), adding the ones never stored; and the
    endpoints refused, each with its budget, that would add more series than it (nothing of
    theirs is added).

    Known series cost nothing; the others one insert that returns the ids of those never
    stored, and one read of those stored before (by another process, or before a restart).
    """
    known = _current(session)
    found, missing = _known_and_missing(known, wanted)
    if not missing:
        return found, {}
    refused = _over_budget(session, missing, known.budget)
    # Each new series once, added by the first endpoint that shows it.
    adder: dict[SeriesKey, str] = {}
    for endpoint, key in missing:
        if endpoint not in refused:
            adder.setdefault(key, endpoint)
    if not adder:
        return found, refused
    texts = {key: labels_to_text(key.labels) for key in adder}
    digests = {key: labels_digest(text) for key, text in texts.items()}
    # What each missing series' row holds: the rows read or added are matched to their series
    # through it, not parsed back from their text.
    as_stored = {(family_of(key), texts[key]): key for key in adder}

    def matched(rows: Iterable[tuple[int, str, str]]) -> list[tuple[int, SeriesKey]]:
        return [
            (series_id, key)
            for series_id, family, labels in rows
            if (key := as_stored.get((family, labels))) is not None
        ]

    # Inserted first, read after: a series this process does not know is most often new (a
    # deployment seen for the first time), and its insert returns its id; one stored already
    # (by another process, or before a restart) inserts nothing and is read.
    added = matched(
        _insert_returning(
            session,
            [
                (endpoint, family_of(key), texts[key], digests[key])
                for key, endpoint in adder.items()
            ],
        )
    )
    _remember(session, added, added=True)
    found.update({key: series_id for series_id, key in added})
    if len(added) < len(adder):
        rows = matched(_stored_rows(session, (digests[k] for k in adder if k not in found)))
        _remember(session, rows, added=False)
        found.update({key: series_id for series_id, key in rows})
    return found, refused


#: Catalogue rows per insert statement (four values each: within every bound on a statement's
#: values of SQLite from 3.32 and of PostgreSQL).
ROWS_PER_INSERT = 1000


@lru_cache(maxsize=64)
def _insert_sql(rows: int, placeholder: str) -> str:
    row = "(" + ",".join([placeholder] * 4) + ")"
    return (
        f"INSERT INTO {EndpointSeries.__tablename__} (endpoint, family, labels, labels_digest) "
        "VALUES " + ",".join([row] * rows) + " ON CONFLICT (labels_digest, family) DO NOTHING"
        " RETURNING id, family, labels"
    )


def _insert_returning(
    session: Session, rows: Sequence[tuple[str, str, str, str]]
) -> list[tuple[int, str, str]]:
    """Insert catalogue rows (endpoint, family, labels, digest), those not stored yet; the
    rows (`_ROWS`) inserted.

    One statement of many rows in the driver's own SQL, with the values as one flat list:
    SQLAlchemy's `executemany` builds each row's parameters on its own, and this write is on a
    window's first start's critical path. A statement of N rows built by SQLAlchemy would be
    compiled anew for every N.
    """
    placeholder = "?" if session.get_bind().dialect.paramstyle == "qmark" else "%s"
    connection = session.connection()
    added: list[tuple[int, str, str]] = []
    for first in range(0, len(rows), ROWS_PER_INSERT):
        batch = rows[first : first + ROWS_PER_INSERT]
        values = [value for row in batch for value in row]
        result = connection.exec_driver_sql(_insert_sql(len(batch), placeholder), tuple(values))
        added += [(int(row[0]), row[1], row[2]) for row in result]
    return added


def _over_budget(
    session: Session,
    missing: Sequence[tuple[str, SeriesKey]],
    budget: int,
) -> dict[str, int]:
    """The endpoints whose unknown series would bring them past `budget` series added
    (counting those stored already, by any endpoint, as adding nothing)."""
    new_of: dict[str, int] = {}
    for endpoint, _ in missing:
        new_of[endpoint] = new_of.get(endpoint, 0) + 1
    counts = dict(
        session.execute(
            sa_select(col(EndpointSeries.endpoint), func.count())
            .where(col(EndpointSeries.endpoint).in_(list(new_of)))
            .group_by(col(EndpointSeries.endpoint))
        ).all()
    )
    refused = {}
    for endpoint, new in new_of.items():
        if counts.get(endpoint, 0) + new <= budget:
            continue
        # Some may be stored already: only the ones that are not count.
        keys = [key for e, key in missing if e == endpoint]
        digests = {labels_digest(labels_to_text(key.labels)) for key in keys}
        stored = {(family, labels) for _, family, labels in _stored_rows(session, digests)}
        unstored = [k for k in keys if (family_of(k), labels_to_text(k.labels)) not in stored]
        if counts.get(endpoint, 0) + len(unstored) > budget:
            refused[endpoint] = budget
    return refused


def _remember(session: Session, rows: list[tuple[int, SeriesKey]], added: bool) -> None:
    """Remember rows this session read or (`added`) inserted.

    Once a write transaction has inserted rows, everything it reads may be its own uncommitted
    work, which a rollback takes back (and SQLite may then give the ids to other rows): such
    rows are remembered only when it commits.
    """
    known = _known(session)
    transaction = WriteTransaction.of(session)
    pending = None if transaction is None else transaction.catalogue_rows
    if pending is None and not added:
        known.remember(rows)
        return
    if pending is None:
        assert transaction is not None, "rows are added in a write transaction"
        pending = transaction.catalogue_rows = []
        transaction.on_commit.append(partial(known.remember, pending))
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
        found.update(dict(rows))
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
        key = catalog.get(int(series_id))
        if key is None:  # never so, unless the database was changed by hand
            return Failure(FailureKind.INTERNAL, "a series of this reading is not in the catalogue")
        # Counters are stored as integers where they are (see `store_snapshots`).
        series[key] = SeriesValue(None if value is None else float(value), created)
    return series


_OPEN_ENDPOINTS = (
    'SELECT window_target.url FROM window_target JOIN "window" '
    """ON "window".id = window_target.window_pk WHERE "window".state = 'open'"""
)
_NAMED = {
    "sqlite": "SELECT CAST(json_extract(item.value, '$[0]') AS INTEGER) AS ref FROM snapshot, "
    "json_each(CASE WHEN json_type(snapshot.counters) = 'array' THEN snapshot.counters "
    "ELSE '[]' END) AS item",
    "postgresql": "SELECT (item ->> 0)::bigint AS ref FROM snapshot, "
    "json_array_elements(CASE WHEN json_typeof(snapshot.counters) = 'array' "
    "THEN snapshot.counters ELSE '[]'::json END) AS item",
}


def purge_catalogue(database: Engine) -> int:
    """Delete the catalogue rows no snapshot names, added by endpoints no open window reads, in
    one statement; count the purge (every process forgets what it remembers of the catalogue).
    The number of rows deleted."""
    dialect = database.dialect.name
    with write_session(database) as transaction:
        session = transaction.session
        if dialect == "postgresql":
            session.execute(text("SELECT pg_advisory_xact_lock(:lock)"), {"lock": _PURGE_LOCK})
        named = _NAMED["postgresql" if dialect == "postgresql" else "sqlite"]
        deleted: CursorResult[Any] = session.execute(  # type: ignore[assignment]
            text(
                "DELETE FROM endpoint_series WHERE endpoint NOT IN (" + _OPEN_ENDPOINTS + ") "
                "AND id NOT IN (SELECT ref FROM (" + named + ") AS named "
                "WHERE ref IS NOT NULL)"
            )
        )
        insert = upsert_insert(dialect)
        table = TABLES["catalogue_purge"]
        session.execute(
            insert(table)
            .values(id=1, purges=1, purged_at=utcnow())
            .on_conflict_do_update(
                index_elements=["id"],
                set_={"purges": table.c.purges + 1, "purged_at": utcnow()},
            )
        )
        transaction.commit()
    return int(deleted.rowcount or 0)
