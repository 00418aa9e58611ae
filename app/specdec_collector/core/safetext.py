"""Text fit to store, log and show: no secrets, no control characters, bounded.

Error texts come from targets (a hostile one chooses them) and from libraries that quote what
they were given (a header value, a URL). Everything such a text reaches (PostgreSQL's TEXT
refuses NUL; a log line, a CSV cell, the dashboard) gets it through `safe_error_text`.
"""

import re
from collections.abc import Sequence

MAX_ERROR_CHARS = 500
_REDACTED = "[redacted]"
# Control characters (NUL among them: PostgreSQL's text refuses it) never reach the store,
# nor lone surrogates (JSON's `"\udc00"`): UTF-8 cannot encode them, so neither PostgreSQL
# nor an answer could hold them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def has_control_characters(text: str) -> bool:
    """Whether `text` holds a control character (NUL among them) or a lone surrogate, which no
    store takes whole."""
    return _CONTROL.search(text) is not None


def redact(text: str, headers: Sequence[tuple[str, str]]) -> str:
    """`text` without any configured header value, nor any word of one (a bearer's token)."""
    secrets = {value.strip() for _, value in headers}
    secrets |= {word for _, value in headers for word in value.split() if len(word) >= 4}
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, _REDACTED)
    return text


def safe_error_text(text: str, headers: Sequence[tuple[str, str]] = ()) -> str:
    """An error text fit to store, log and show: secrets redacted, one line, bounded."""
    text = _CONTROL.sub(" ", redact(text, headers))
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
