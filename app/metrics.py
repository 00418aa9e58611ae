"""The collector's own Prometheus metrics, served at `/metrics`.

Aggregates only (no team's window ids or targets), so Prometheus may scrape it without a key.
Error reasons are a small fixed set of kinds, which keeps the label cardinality bounded.
"""

from collections.abc import Callable

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

SCRAPE_SECONDS = Histogram(
    "specdec_scrape_duration_seconds",
    "Time one /metrics scrape of a target took, extraction included.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
SCRAPE_ERRORS = Counter(
    "specdec_scrape_errors_total", "Target scrapes that failed, by kind of reason.", ["reason"]
)
OPEN_WINDOWS = Gauge("specdec_open_windows", "Windows open now, all teams together.")

_KINDS = (
    ("Metrics endpoint returned HTTP", "http_status"),
    ("timed out", "timeout"),
    ("refused:", "refused"),
    ("cannot resolve", "dns"),
    ("answer larger than", "too_large"),
    ("not a Prometheus exposition", "not_prometheus"),
    ("ConnectError", "connect"),
    ("not UTF-8", "invalid_payload"),
    ("cut off", "invalid_payload"),
    ("counter value", "invalid_payload"),
    ("series given twice", "invalid_payload"),
    ("malformed", "invalid_payload"),
    ("gzip", "invalid_payload"),
)


def error_kind(error: str) -> str:
    """The kind of a scrape error text, for the `reason` label."""
    for needle, kind in _KINDS:
        if needle in error:
            return kind
    return "transport"


def track_open_windows(count: Callable[[], int]) -> None:
    """Report `count()` as the open windows each time `/metrics` is read."""
    OPEN_WINDOWS.set_function(count)


__all__ = ["REGISTRY", "SCRAPE_ERRORS", "SCRAPE_SECONDS", "error_kind", "track_open_windows"]
