"""What a source read of one target at one moment, typed: its series, or a failure with a kind.

Every source (a scrape, a Prometheus query) hands the arithmetic and the store a `Reading`;
the store keeps a failure's kind beside its text (`snapshot.error_kind`), so the kind that a
scrape knew is still known when a stored window is read back.
"""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from specdec_collector.core.exposition import Series
from specdec_collector.core.targets import Target


class SnapshotPhase(StrEnum):
    """When a snapshot of a window was taken: its baseline, a background sample, or its end."""

    BEFORE = "before"
    SAMPLE = "sample"
    AFTER = "after"


class FailureKind(StrEnum):
    """Why a reading failed. A scrape's kinds are the `reason` label of
    `specdec_scrape_errors_total`; the last five come from elsewhere than a scrape."""

    HTTP_STATUS = "http_status"  # the endpoint answered, but not 200
    TIMEOUT = "timeout"
    REFUSED = "refused"  # the target policy does not allow the address
    DNS = "dns"
    TOO_LARGE = "too_large"
    NOT_PROMETHEUS = "not_prometheus"  # an HTML page (a login page, a proxy's error page)
    CONNECT = "connect"
    INVALID_PAYLOAD = "invalid_payload"  # not UTF-8, bad gzip, cut off, malformed, not a count
    TRANSPORT = "transport"  # any other network or protocol failure
    INTERNAL = "internal"  # a fault of the collector's own: the reading is `na`, the stop closes
    WRONG_ENDPOINT = "wrong_endpoint"  # a server's other endpoint: the answer says which to use
    PROMETHEUS = "prometheus"  # the deployment's Prometheus could not give the samples
    NOT_STORED = "not_stored"  # a baseline that was never stored (a crash during the start)
    FORCE_CLOSED = "force_closed"  # an admin closed the window: no final reading was taken
    UNRECORDED = "unrecorded"  # stored before kinds were kept, and its text says none
    SERIES_CHURN = "series_churn"  # labels that change on every scrape: the series budget is spent


def series_churn_text(url: str, budget: int) -> str:
    """The failure of a reading whose endpoint would name more series than `budget`."""
    return (
        f"Failed to store the metrics of {url}: its labels change on every scrape (it would "
        f"name more than {budget} spec-decode series; SPECDEC_MAX_SERIES_PER_TARGET)"
    )


@dataclass(frozen=True, slots=True)
class Failure:
    """A reading that failed: why (`kind`) and the text a result shows (AISBench's words)."""

    kind: FailureKind
    text: str


Reading = Series | Failure
"""What one reading of a target gave: its series, or why there are none."""


@dataclass(frozen=True, slots=True)
class TargetReading:
    """What a source read of `target`, and when (a scrape: when it finished)."""

    target: Target
    taken_at: datetime
    reading: Reading

    @property
    def series(self) -> Series | None:
        """The series read, or None if the reading failed."""
        return None if isinstance(self.reading, Failure) else self.reading

    @property
    def error(self) -> str | None:
        """The failure's text, or None if it read its series."""
        return self.reading.text if isinstance(self.reading, Failure) else None

    @property
    def kind(self) -> FailureKind | None:
        """Why the reading failed, or None."""
        return self.reading.kind if isinstance(self.reading, Failure) else None

    def for_target(self, target: Target) -> "TargetReading":
        """The same outcome under `target` (a scrape shared by targets of one endpoint)."""
        return TargetReading(target, self.taken_at, self.reading)
