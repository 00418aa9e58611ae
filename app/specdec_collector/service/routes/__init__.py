"""One router per resource; the error answers they share."""

from typing import Any

from pydantic import BaseModel

from specdec_collector.exceptions import SpecdecError


class Problem(BaseModel):
    """An error answer."""

    detail: str | list[dict[str, Any]]


# Answers that come from before a route (the body's reading and its size), not a domain error.
_BEFORE_A_ROUTE = {
    400: "the body cannot be read (not UTF-8 JSON)",
    413: "the request body is too large",
}


def _leaves(root: type[SpecdecError]) -> list[type[SpecdecError]]:
    return [kind for sub in root.__subclasses__() for kind in (sub, *_leaves(sub))]


def _described(code: int) -> str:
    if code in _BEFORE_A_ROUTE:
        return _BEFORE_A_ROUTE[code]
    said = [
        kind.__doc__ or kind.__name__ for kind in _leaves(SpecdecError) if kind.status_code == code
    ]
    return "; or ".join(text.split("\n")[0].rstrip(".") for text in said)


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for these error status codes, described by the errors that answer them."""
    return {code: {"model": Problem, "description": _described(code)} for code in codes}
