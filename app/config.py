"""Settings, read once from `SPECDEC_*` environment variables."""

import os
from functools import lru_cache
from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _usable_cores() -> int:
    """The cores this process may run on (Linux: its affinity; elsewhere: the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class Settings(BaseSettings):
    """Every setting of the service; docs/deployment.md lists them with their defaults."""

    # A field's description is its docstring where it has one.
    model_config = SettingsConfigDict(
        env_prefix="SPECDEC_", extra="ignore", use_attribute_docstrings=True
    )

    database_url: str = Field(
        default="sqlite:///./data/specdec.db",
        description="SQLAlchemy URL of the store; SQLite files get their folder created.",
    )
    db_pool_size: int = Field(default=10, ge=1, le=1000, description="PostgreSQL pool size.")
    db_statement_timeout_s: float = Field(
        default=10, gt=0, description="PostgreSQL statement timeout; SQLite's busy timeout."
    )
    db_connect_timeout_s: float = Field(default=5, gt=0, description="Database connect timeout.")
    scrape_timeout_s: float = Field(
        default=5.0, gt=0, le=300, description="Timeout of one /metrics scrape (connect + read)."
    )
    max_metrics_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="Largest /metrics answer read, counted after gzip decoding.",
    )
    max_series_per_target: Annotated[int, Field(ge=1, le=1_000_000)] = 4096
    """Most spec-decode series read from one answer; more make the scrape `na`."""
    max_series_label_chars: Annotated[int, Field(ge=64, le=1_000_000)] = 2048
    """Longest label set of one spec-decode series; longer make the scrape `na`."""
    sample_retention_days: float = Field(
        default=30,
        gt=0,
        description="Samples of windows closed longer ago than this are deleted (results stay).",
    )
    min_free_disk_bytes: Annotated[int, Field(ge=0)] = 64 * 1024 * 1024
    """Below this room on a SQLite file's disk no sample is taken (starts and stops go on)."""
    log_level: str = Field(default="info", description="Log level of the service.")
    workers: int = Field(
        default_factory=_usable_cores,
        ge=1,
        le=256,
        description="Processes `specdec serve` runs (default: one per core); each is a replica.",
    )
    replica_id: str | None = Field(
        default=None,
        max_length=128,
        description="This replica's name in sampler leases; default: host name and process id.",
    )
    metrics_latest_windows: int = Field(
        default=20, ge=0, le=1000, description="Closed windows whose results /metrics exports."
    )
    sampler_scan_s: float = Field(
        default=0.25, gt=0, le=60, description="How often a replica looks for windows to sample."
    )

    # --- Prometheus as a source ------------------------------------------------------------
    prometheus_url: str | None = Field(
        default=None,
        description="Base URL of the Prometheus HTTP API (Prometheus, Thanos, Mimir, "
        "VictoriaMetrics) that windows with source prometheus read.",
    )
    prometheus_bearer_token: str | None = Field(default=None, description="Sent as a Bearer.")
    prometheus_username: str | None = Field(default=None, description="Basic auth user.")
    prometheus_password: str | None = Field(default=None, description="Basic auth password.")
    prometheus_timeout_s: float = Field(
        default=10.0, gt=0, le=300, description="Timeout of one query (also Prometheus' own)."
    )
    prometheus_max_bytes: int = Field(
        default=32 * 1024 * 1024, ge=1024, description="Largest query answer read."
    )
    prometheus_wait_max_s: float = Field(
        default=60.0,
        ge=0,
        le=600,
        description="Longest a stop waits for a sample at or after its time (two scrape "
        "intervals, as the samples' own spacing shows, within this bound).",
    )
    prometheus_max_span_s: Annotated[float, Field(gt=0, le=90 * 86400)] = 86400.0
    """Longest window read from Prometheus: an older `at` is refused (422), a longer window
    is `na` for every target. Its samples are read in 15-minute chunks."""
    prometheus_max_points: Annotated[int, Field(ge=16, le=1_000_000)] = 2000
    """Most scrapes of one target kept from Prometheus: every one where a series came, went
    or was reset, both ends, and evenly spaced others (the result is that of all of them)."""

    # --- shared deployments ---------------------------------------------------------------
    api_keys: str = Field(
        default="",
        description="Comma-separated `team:role:key` entries (roles: read, write, admin).",
    )
    allow_anonymous: bool = Field(
        default=False,
        description="Serve without keys on a non-loopback address (one team `default`).",
    )
    allowed_targets: str = Field(
        default="",
        description="Comma-separated CIDRs, host names and `*.suffix` patterns scrapes may reach; "
        "empty: anywhere but link-local, 0.0.0.0/8 and multicast.",
    )
    max_targets_per_window: int = Field(default=256, ge=1, le=10_000)
    max_open_windows_per_team: int = Field(default=100, ge=1)
    max_scrapes_per_second_per_team: float = Field(
        default=200,
        gt=0,
        description="Background scrapes a team's open sampled windows may make per second "
        "(targets / interval, summed); a start past it is a 429.",
    )
    max_target_reads_per_second_per_team: Annotated[float, Field(gt=0)] = 500.0
    """Targets a team's starts and stops may read per second (a start past it is a 429; a
    stop always passes); bursts of two of the largest windows pass."""
    results_cache_windows: Annotated[int, Field(ge=0)] = 1024
    """Closed windows whose results are kept in memory for reads (0: none)."""
    open_views_cache_windows: Annotated[int, Field(ge=0)] = 1024
    """Open windows whose view (targets, baselines) is kept in memory for reads (0: none)."""
    max_request_bytes: int = Field(default=1024 * 1024, ge=1024)
    header_timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    """Longest a request's head (request line and headers) may take to arrive, from the
    connection's opening or its previous answer; then the connection is closed."""
    body_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    """Longest a request's body may take to arrive; then the answer is 408."""
    max_connections: Annotated[int | None, Field(ge=1)] = None
    """Connections a process accepts at once (default: half its open-files limit); more are
    answered 503 and closed."""
    max_connections_per_client: Annotated[int, Field(ge=0)] = 256
    """Connections one client address may hold at once (0: no bound); behind a reverse proxy,
    every client is the proxy's address."""
    max_labels_per_window: int = Field(default=32, ge=0, le=1000)
    max_label_chars: int = Field(
        default=128, ge=1, le=4096, description="Longest label key or value."
    )


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (cached; tests build their own `Settings`)."""
    return Settings()
