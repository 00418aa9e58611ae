"""The service's domain errors. Routes and the window functions raise them; one handler each in
`service.exception_handlers` turns them into HTTP answers, so no route catches to translate.
Each class carries its own HTTP status (`status_code`, drawn beside it below), so a new error
cannot be left without one; its text is the answer's `detail`.

    SpecdecError
    ├── NotAuthenticated    401  no key, or an unknown or revoked one (says: Bearer)
    ├── NotAllowed          403  the key's role does not allow the call
    ├── InvalidInput        422  a field breaks a rule; `loc` names it as FastAPI's own 422 does
    ├── WindowNotFound      404  no window of this id in the team (another team's looks the same)
    ├── TargetNotInWindow   404  the window exists but has no such target
    ├── KeyNotFound         404  no stored API key of this id
    ├── WindowOpen          409  the window has no results yet: they come with its stop
    ├── WindowConflict      409  the call contradicts the stored window
    ├── TooManyWindows      429  the team has as many open windows as it may
    ├── OverScrapeBudget    429  the team's sampled windows would scrape more often than it may
    └── OverReadBudget      429  the team's starts and stops read more targets a second than it may
"""

from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import ClassVar


class SpecdecError(Exception):
    """Every domain error; its text is the answer's `detail` and never holds a secret."""

    status_code: ClassVar[HTTPStatus] = HTTPStatus.INTERNAL_SERVER_ERROR
    # Headers the answer carries (a 401 names the scheme the client should use).
    headers: ClassVar[Mapping[str, str]] = {}


class NotAuthenticated(SpecdecError):
    """The call has no key, or one the service does not know (or that was revoked)."""

    status_code = HTTPStatus.UNAUTHORIZED
    headers: ClassVar[Mapping[str, str]] = {"WWW-Authenticate": "Bearer"}  # RFC 9110


class NotAllowed(SpecdecError):
    """The key's role does not allow the call."""

    status_code = HTTPStatus.FORBIDDEN


class InvalidInput(SpecdecError):
    """A field of the request breaks a rule: `loc` is its place (`["query", "cursor"]`)."""

    status_code = HTTPStatus.UNPROCESSABLE_ENTITY

    def __init__(self, loc: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.loc = list(loc)


class WindowNotFound(SpecdecError):
    """No window has this id in the team."""

    status_code = HTTPStatus.NOT_FOUND

    def __init__(self, window_id: str) -> None:
        super().__init__(f"window {window_id} not found")
        self.window_id = window_id


class TargetNotInWindow(SpecdecError):
    """The window has no target of this `host:port`."""

    status_code = HTTPStatus.NOT_FOUND

    def __init__(self, window_id: str, target: str) -> None:
        super().__init__(f"window {window_id} has no target {target}")


class KeyNotFound(SpecdecError):
    """No API key of this id is stored."""

    status_code = HTTPStatus.NOT_FOUND

    def __init__(self, key_id: int) -> None:
        super().__init__(f"key {key_id} not found")


class WindowOpen(SpecdecError):
    """The window has no results yet: it is still open."""

    status_code = HTTPStatus.CONFLICT

    def __init__(self, window_id: str) -> None:
        super().__init__(f"window {window_id} is still open; results come with its stop")


class WindowConflict(SpecdecError):
    """The call contradicts the stored window (other targets, or already stopped)."""

    status_code = HTTPStatus.CONFLICT


class TooManyWindows(SpecdecError):
    """The team has as many open windows as it may."""

    status_code = HTTPStatus.TOO_MANY_REQUESTS


class OverScrapeBudget(SpecdecError):
    """The team's open sampled windows would scrape more targets per second than it may."""

    status_code = HTTPStatus.TOO_MANY_REQUESTS


class OverReadBudget(SpecdecError):
    """The team's starts and stops read more targets per second than it may."""

    status_code = HTTPStatus.TOO_MANY_REQUESTS
    headers: ClassVar[Mapping[str, str]] = {"Retry-After": "1"}
