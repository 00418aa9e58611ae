"""Settings, read once from `SPECDEC_*` environment variables."""

import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: cgroup v2's CPU limit of this process's group ("max 100000", or quota and period in µs).
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
#: cgroup v1's quota and period (a quota of -1: none).
CFS_QUOTA = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
CFS_PERIOD = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")


def cores_allowed(affinity: int, cpu_max: str | None, cfs: tuple[str, str] | None = None) -> int:
    """The cores a process may use: its affinity, bounded by its cgroup's CPU quota rounded up
    (a container given 1.5 CPUs of a 32-core node may use 2, not 32). `cpu_max` is cgroup v2's
    `cpu.max` text, `cfs` cgroup v1's quota and period; None or unreadable: no quota."""
    quota = period = None
    try:
        if cpu_max is not None:
            parts = cpu_max.split()
            if parts and parts[0] != "max":
                quota = int(parts[0])
                period = int(parts[1]) if len(parts) > 1 else 100_000
        elif cfs is not None and int(cfs[0]) > 0:
            quota, period = int(cfs[0]), int(cfs[1])
    except ValueError:
        quota = None
    if quota is None or period is None or quota <= 0 or period <= 0:
        return max(1, affinity)
    return max(1, min(affinity, math.ceil(quota / period)))


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _usable_cores() -> int:
    """The cores this process may run on: its affinity (Linux; elsewhere the machine's),
    within its container's CPU quota."""
    if hasattr(os, "sched_getaffinity"):
        affinity = len(os.sched_getaffinity(0))
    else:
        affinity = os.cpu_count() or 1
    v1 = (_read(CFS_QUOTA), _read(CFS_PERIOD))
    cfs = (v1[0], v1[1]) if v1[0] is not None and v1[1] is not None else None
    return cores_allowed(affinity, _read(CPU_MAX), cfs)


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
    db_write_lanes: int = Field(
        default=1,
        ge=1,
        le=32,
        description="PostgreSQL: the lanes each replica's writes of starts and stops take turns "
        "in, side by side (more for a database a few milliseconds away); SQLite has one.",
    )
    # Parts that exist for speed, each with the setting that turns it off (docs/performance.md
    # says what each buys, as `bench_knobs` measures it).
    db_writes_together: Annotated[int, Field(ge=1, le=1024)] = 64
    """Most writes of starts and stops one transaction takes, of those waiting in a lane
    (group commit); 1: each in a transaction of its own."""
    db_lookups_on_loop: bool = True
    """Reads of a few rows (a window's row, a stored key, the lease scan) on the event loop
    where the database is at hand (SQLite, a PostgreSQL near); false: in threads."""
    stop_on_loop_readings: Annotated[int, Field(ge=0, le=4096)] = 64
    """SQLite: the most readings an unsampled stop may have for its results to be computed on
    the event loop; 0: every stop's in the computations lane."""
    stop_write_at_once: bool = True
    """PostgreSQL: a stop of known series closes its window, stores its snapshots and its
    results in one statement; false: in three."""
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
        description="Processes `specdec serve` runs (default: one per core it may use, within "
        "a container's CPU quota); each is a replica.",
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
