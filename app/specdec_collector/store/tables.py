"""The SQLModel tables (the API's models are `schemas`).

Tables: `window` (one per benchmark window), `window_target` (one per target of a window,
holding its final result once the window is closed), `endpoint_series` (the spec-decode series
an endpoint has shown: family and labels, stored once for every window that reads it) and
`snapshot` (one scrape of one target: the counter values per series, or the reason it
failed); `api_key` and `key_event` (the keys, hashed, and every change to them). Keeping
labels out of the snapshots keeps a sample small. The schema is created only by the Alembic
migrations in `migrations/`; a test checks that the two agree.
"""

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, DateTime, Index, MetaData, Text, UniqueConstraint
from sqlmodel import AutoString, Field, SQLModel

from specdec_collector.core.readings import FailureKind, SnapshotPhase
from specdec_collector.schemas import KeyAction, Source, WindowState

# Alembic and the models name constraints alike (Polar's convention).
SQLModel.metadata.naming_convention = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata: MetaData = SQLModel.metadata
# The tables by name, for Core statements where the ORM's per-row bookkeeping costs too much.
TABLES = metadata.tables


def utcnow() -> datetime:
    """Now, in UTC."""
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """A stored time as an aware UTC datetime (SQLite returns naive ones)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _utc_column(nullable: bool) -> Any:
    return Column(DateTime(timezone=True), nullable=nullable)


class Window(SQLModel, table=True):
    """A window; its id is unique within its team."""

    __tablename__ = "window"
    __table_args__ = (
        UniqueConstraint("team", "window_id"),
        # Lists read a team's windows newest first, page by page.
        Index("ix_window_team_started_at_id", "team", "started_at", "id"),
        # Overlaps read the windows stopped after a moment (or not stopped at all).
        Index("ix_window_stopped_at", "stopped_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    team: str = Field(default="default", max_length=64)
    window_id: str = Field(max_length=128)
    labels: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    sample_interval_s: float | None = Field(default=None)
    state: WindowState = Field(default=WindowState.OPEN, sa_type=AutoString(16), index=True)
    started_by: str = Field(default="anonymous", max_length=64)
    stopped_by: str | None = Field(default=None, max_length=64)
    started_at: datetime = Field(default_factory=utcnow, sa_column=_utc_column(False))
    stopped_at: datetime | None = Field(default=None, sa_column=_utc_column(True))
    last_sampled_at: datetime | None = Field(default=None, sa_column=_utc_column(True))
    # The replica that samples this window, and until when (Unix seconds) its lease holds.
    sampler_owner: str | None = Field(default=None, max_length=128)
    sampler_lease_until: float | None = Field(default=None)
    # Where the counters come from: `scrape` (the collector scrapes each target) or
    # `prometheus` (read from SPECDEC_PROMETHEUS_URL at the stop).
    source: Source = Field(default=Source.SCRAPE, sa_type=AutoString(16))


class WindowTarget(SQLModel, table=True):
    __tablename__ = "window_target"
    __table_args__ = (UniqueConstraint("window_pk", "target"),)

    id: int | None = Field(default=None, primary_key=True)
    # Looked up through the unique index on (window_pk, target): no index of its own.
    window_pk: int = Field(foreign_key="window.id", ondelete="CASCADE")
    ordinal: int
    target: str = Field(max_length=300, index=True)
    url: str = Field(max_length=2048)
    # Sent with every scrape of this target, never returned by the API nor logged.
    headers: dict[str, str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # What the start body told of the target's engine (`core.targets.EngineHints`).
    named_engine: str | None = Field(default=None, max_length=16)
    draft_tokens_per_step: int | None = Field(default=None)
    verification: str | None = Field(default=None, max_length=16)
    result: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # Copied from `result` at stop, so that lists filter and sort on them in SQL.
    status: str | None = Field(default=None, max_length=8)
    acceptance_rate: float | None = Field(default=None, index=True)
    acceptance_length: float | None = Field(default=None)
    num_drafts: float | None = Field(default=None)
    result_engine: str | None = Field(default=None, max_length=64)
    exact: bool | None = Field(default=None)
    restarts: int | None = Field(default=None)


class EndpointSeries(SQLModel, table=True):
    """A series some endpoint has shown, shared by every endpoint that shows it and every
    window that reads one: the role of its family (`core.counters.Role`, prefixed by its
    engine unless vLLM) and canonical label text (`labels`, of any length; unique through its
    SHA-256, `labels_digest`, which a B-tree index holds whatever the length). `endpoint` is
    the URL scraped that showed it first: its budget counts the series it added. Rows are only
    added."""

    __tablename__ = "endpoint_series"
    # The digest first: a series is looked up by it (and its family), one B-tree probe each.
    __table_args__ = (UniqueConstraint("labels_digest", "family"),)

    id: int | None = Field(default=None, primary_key=True)
    endpoint: str = Field(max_length=2048, index=True)
    family: str = Field(max_length=64)
    labels: str = Field(sa_column=Column(Text, nullable=False))
    labels_digest: str = Field(max_length=64)


class Snapshot(SQLModel, table=True):
    """One reading: `counters` rows are `[endpoint_series.id, value, created]`; or an error and
    its kind."""

    __tablename__ = "snapshot"

    id: int | None = Field(default=None, primary_key=True)
    target_id: int = Field(foreign_key="window_target.id", ondelete="CASCADE", index=True)
    phase: SnapshotPhase = Field(sa_type=AutoString(16))
    taken_at: datetime = Field(default_factory=utcnow, sa_column=_utc_column(False))
    error: str | None = Field(default=None)
    # Why the reading failed (`core.readings.FailureKind`), beside its text.
    error_kind: FailureKind | None = Field(default=None, sa_type=AutoString(32))
    counters: list[list[float | None]] | None = Field(
        default=None, sa_column=Column(JSON, nullable=True)
    )


class ApiKey(SQLModel, table=True):
    """An API key of a team, stored as its SHA-256; the key itself is shown once."""

    __tablename__ = "api_key"

    id: int | None = Field(default=None, primary_key=True)
    team: str = Field(max_length=64)
    role: str = Field(max_length=16)
    key_hash: str = Field(max_length=64, unique=True)
    prefix: str = Field(max_length=16)
    created_at: datetime = Field(default_factory=utcnow, sa_column=_utc_column(False))
    revoked_at: datetime | None = Field(default=None, sa_column=_utc_column(True))


class KeyEvent(SQLModel, table=True):
    """One change to the keys (created or revoked): when, by whom, which key; never the key.
    Written in the transaction of the change itself, so no change goes unrecorded."""

    __tablename__ = "key_event"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(default_factory=utcnow, sa_column=_utc_column(False))
    action: KeyAction = Field(sa_type=AutoString(16))
    key_id: int = Field(index=True)
    team: str = Field(max_length=64)
    role: str = Field(max_length=16)
    # Who made the change: an admin key's label (`env:N`, `key:ID`) or `cli:<user>`.
    actor: str = Field(max_length=128)


class Heartbeat(SQLModel, table=True):
    """The last time each replica's health check wrote to the database."""

    __tablename__ = "heartbeat"

    replica_id: str = Field(primary_key=True, max_length=128)
    beat_at: datetime = Field(default_factory=utcnow, sa_column=_utc_column(False))


class CataloguePurge(SQLModel, table=True):
    """How many times the series catalogue's unused rows were deleted (one row): a process
    whose memory of the catalogue (`windows.catalogue.KnownSeries`) is older forgets it."""

    __tablename__ = "catalogue_purge"

    id: int = Field(primary_key=True)
    purges: int = Field(default=0)
    purged_at: datetime = Field(default_factory=utcnow, sa_column=_utc_column(False))
