"""What one scrape produced, and the error texts as AISBench words them."""

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from specdec_collector.core.exposition import Series
from specdec_collector.core.safetext import safe_error_text
from specdec_collector.core.targets import Target
from specdec_collector.store.tables import utcnow


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


#: How much of a refusal's body is read for its message, and how much of that message is kept.
REFUSAL_BODY_BYTES = 2048
REFUSAL_MESSAGE_CHARS = 200


def refusal_message(body: bytes) -> str | None:
    """The short message a server gave with a status other than 200, to keep in the reason
    (llama-server without `--metrics`: 501 with `{"error": {"message": "... Start it with
    `--metrics`"}}`). JSON's `error.message`, `message`, `detail` or `error`; else a short
    plain text. None for anything else (a page, an exposition payload, a cut body)."""
    text = body[:REFUSAL_BODY_BYTES].decode("utf-8", errors="replace").strip()
    if not text or text.startswith("<"):
        return None
    message: object = None
    try:
        answer = json.loads(text)
    except ValueError:
        if text.startswith(("{", "[", "#")) or len(text) > REFUSAL_MESSAGE_CHARS:
            return None  # cut or broken JSON, a payload, a page: nothing short to quote
        message = text
    else:
        if isinstance(answer, dict):
            error = answer.get("error")
            message = next(
                (m for m in (
                    error.get("message") if isinstance(error, dict) else error,
                    answer.get("message"), answer.get("detail"),
                ) if isinstance(m, str) and m.strip()),
                None,
            )  # fmt: skip
    if not isinstance(message, str) or not message.strip():
        return None
    message = " ".join("".join(c if c.isprintable() else " " for c in message).split())
    if len(message) > REFUSAL_MESSAGE_CHARS:
        message = message[: REFUSAL_MESSAGE_CHARS - 1] + "…"
    return message
