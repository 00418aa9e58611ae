"""The collector's own Prometheus metrics, served at `/metrics`.

Without a key, aggregates only (no team's window ids, targets or figures), so Prometheus may
scrape it without one. With a key, the latest closed windows' results are added: the key's
team's (`WindowResults`), every team's for an admin key. Error reasons are a small fixed set
of kinds, which keeps the label cardinality bounded.
"""

import os
from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from specdec_collector.schemas import WindowState
from specdec_collector.store.db import read_session
from specdec_collector.store.tables import Window, WindowTarget, as_utc

SCRAPE_SECONDS = Histogram(
    "specdec_scrape_duration_seconds",
    "Time one /metrics scrape of a target took, extraction included.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
SCRAPE_ERRORS = Counter(
    "specdec_scrape_errors_total", "Target scrapes that failed, by kind of reason.", ["reason"]
)
SCRAPE_REQUESTS = Counter(
    "specdec_scrape_requests_total",
    "Requests sent to targets for scrapes. Scrapes of a target asked for together share one "
    "(one in flight at a time, ten a second after a burst of ten): fewer than the scrapes.",
)

SAMPLES_SKIPPED = Counter(
    "specdec_samples_skipped_total",
    "Background samples not taken: the database's disk had less room than "
    "SPECDEC_MIN_FREE_DISK_BYTES.",
)


class DatabaseMetrics(Collector):
    """Aggregate gauges read from the database each time `/metrics` is read.

    - `specdec_open_windows`: windows open now, all teams together;
    - `specdec_sampler_lag_seconds`: how far the most overdue sampled window is behind its
      schedule (0 when every window was sampled within its interval).
    """

    def __init__(self, database: Engine) -> None:
        self.database = database

    def collect(self) -> Iterator[Metric]:
        now = datetime.now(UTC)
        with read_session(self.database) as session:
            open_windows = session.exec(
                select(Window.started_at, Window.last_sampled_at, Window.sample_interval_s).where(
                    Window.state == WindowState.OPEN
                )
            ).all()
        yield GaugeMetricFamily(
            "specdec_open_windows", "Windows open now, all teams together.", value=len(open_windows)
        )
        lag = 0.0
        for started_at, last_sampled_at, interval_s in open_windows:
            if interval_s:
                last = as_utc(last_sampled_at or started_at)
                lag = max(lag, (now - last).total_seconds() - interval_s)
        yield GaugeMetricFamily(
            "specdec_sampler_lag_seconds",
            "How far the most overdue sampled window is behind.",
            value=lag,
        )


class WindowResults(Collector):
    """`specdec_window_acceptance_rate` / `_length`: the latest `latest` closed windows'
    results of `team` (every team's when None), labelled team, window and target; `latest`
    bounds the label cardinality. Only served to a caller with a key of that team, or admin."""

    def __init__(self, database: Engine, latest: int, team: str | None) -> None:
        self.database = database
        self.latest = latest
        self.team = team

    def collect(self) -> Iterator[Metric]:
        closed_query = select(Window.id).where(Window.state == WindowState.CLOSED)
        if self.team is not None:
            closed_query = closed_query.where(Window.team == self.team)
        with read_session(self.database) as session:
            closed = session.exec(
                closed_query.order_by(col(Window.stopped_at).desc()).limit(self.latest)
            ).all()
            rows = session.execute(
                sa_select(
                    col(Window.team),
                    col(Window.window_id),
                    col(WindowTarget.target),
                    col(WindowTarget.acceptance_rate),
                    col(WindowTarget.acceptance_length),
                )
                .join(WindowTarget, col(WindowTarget.window_pk) == col(Window.id))
                .where(col(Window.id).in_(list(closed)), col(WindowTarget.status) == "ok")
            ).all()
        labels = ["team", "window", "target"]
        rate = GaugeMetricFamily(
            "specdec_window_acceptance_rate",
            "Acceptance rate (%) of recent closed windows.",
            labels=labels,
        )
        length = GaugeMetricFamily(
            "specdec_window_acceptance_length",
            "Acceptance length of recent closed windows.",
            labels=labels,
        )
        for team, window_id, target, acceptance_rate, acceptance_length in rows:
            if acceptance_rate is None or acceptance_length is None:
                continue  # a result stored by an older version with figures it could not hold
            rate.add_metric([team, window_id, target], acceptance_rate)
            length.add_metric([team, window_id, target], acceptance_length)
        yield rate
        yield length


#: Set by `specdec serve --workers N` (unless already set): where every worker's counters live,
#: so that `/metrics`, whichever worker answers, shows them summed (prometheus_client's
#: multiprocess mode).
MULTIPROCESS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


def aggregates_text(database: Engine) -> bytes:
    """The aggregate metrics: this process's, or with several workers, all of theirs summed."""
    directory = os.environ.get(MULTIPROCESS_DIR_ENV)
    if not directory:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    registry.register(DatabaseMetrics(database))
    return generate_latest(registry)


def window_results_text(database: Engine, latest: int, team: str | None) -> bytes:
    """The exposition of `WindowResults` alone, to append to the aggregates."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WindowResults(database, latest, team))
    return generate_latest(registry)


__all__ = [
    "MULTIPROCESS_DIR_ENV",
    "REGISTRY",
    "SCRAPE_ERRORS",
    "SCRAPE_REQUESTS",
    "SCRAPE_SECONDS",
    "DatabaseMetrics",
    "aggregates_text",
    "window_results_text",
]
