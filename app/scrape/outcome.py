"""What one scrape produced, and the error texts as AISBench words them."""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from app.models import utcnow
from app.promtext import Series
from app.safetext import safe_error_text
from app.targets import Target


class ScrapeErrorKind(StrEnum):
    """Why a scrape failed; the value is the `reason` label of `specdec_scrape_errors_total`."""

    HTTP_STATUS = "http_status"  # the endpoint answered, but not 200
    TIMEOUT = "timeout"
    REFUSED = "refused"  # the target policy does not allow the address
    DNS = "dns"
    TOO_LARGE = "too_large"
    NOT_PROMETHEUS = "not_prometheus"  # an HTML page (a login page, a proxy's error page)
    CONNECT = "connect"
    INVALID_PAYLOAD = "invalid_payload"  # not UTF-8, bad gzip, cut off, malformed, not a count
    TRANSPORT = "transport"  # any other network or protocol failure
    INTERNAL = "internal"  # a fault of the collector's own: the scrape is `na`, the stop closes
    WRONG_ENDPOINT = "wrong_endpoint"  # a server's other endpoint: the answer says which to use


@dataclass(frozen=True, slots=True)
class ScrapeOutcome:
    """What one scrape produced: the series, or the kind and AISBench text of its error; and
    when it finished."""

    target: Target
    taken_at: datetime
    series: Series | None = None
    error: str | None = None
    kind: ScrapeErrorKind | None = None

    def for_target(self, target: Target) -> "ScrapeOutcome":
        """The same outcome under `target` (a scrape shared with another of the same endpoint)."""
        return ScrapeOutcome(target, self.taken_at, self.series, self.error, self.kind)


def timed_out(target: Target, timeout_s: float) -> ScrapeOutcome:
    """A scrape that did not end within its whole timeout."""
    return failure(target, ScrapeErrorKind.TIMEOUT, f"timed out after {timeout_s:g} s")


def failure(target: Target, kind: ScrapeErrorKind, detail: str) -> ScrapeOutcome:
    """A failed scrape, its error text as AISBench words it (`detail` says what happened).

    Every error text passes through here: a configured header value never appears in it, and
    it is one bounded line without control characters, whatever the target answered.
    """
    if kind is ScrapeErrorKind.HTTP_STATUS:
        error = f"Metrics endpoint returned HTTP {detail}"
    else:
        error = f"Failed to fetch metrics from {target.url}: {detail}"
    return ScrapeOutcome(target, utcnow(), error=safe_error_text(error, target.headers), kind=kind)
