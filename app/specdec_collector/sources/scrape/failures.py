"""A failed scrape's reading, its error text as AISBench words it; a refusal's short message."""

import json

from specdec_collector.core.readings import Failure, FailureKind, TargetReading
from specdec_collector.core.safetext import safe_error_text
from specdec_collector.core.targets import Target
from specdec_collector.store.tables import utcnow


def timed_out(target: Target, timeout_s: float) -> TargetReading:
    """A scrape that did not end within its whole timeout."""
    return failure(target, FailureKind.TIMEOUT, f"timed out after {timeout_s:g} s")


def failure(target: Target, kind: FailureKind, detail: str) -> TargetReading:
    """A failed scrape, its error text as AISBench words it (`detail` says what happened).

    Every error text passes through here: a configured header value never appears in it, and
    it is one bounded line without control characters, whatever the target answered.
    """
    if kind is FailureKind.HTTP_STATUS:
        error = f"Metrics endpoint returned HTTP {detail}"
    else:
        error = f"Failed to fetch metrics from {target.url}: {detail}"
    return TargetReading(target, utcnow(), Failure(kind, safe_error_text(error, target.headers)))


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
                (
                    m
                    for m in (
                        error.get("message") if isinstance(error, dict) else error,
                        answer.get("message"),
                        answer.get("detail"),
                    )
                    if isinstance(m, str) and m.strip()
                ),
                None,
            )
    if not isinstance(message, str) or not message.strip():
        return None
    message = " ".join("".join(c if c.isprintable() else " " for c in message).split())
    if len(message) > REFUSAL_MESSAGE_CHARS:
        message = message[: REFUSAL_MESSAGE_CHARS - 1] + "…"
    return message
