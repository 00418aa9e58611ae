"""One router per resource; the error answers they share."""

from typing import Any

from pydantic import BaseModel


class Problem(BaseModel):
    """An error answer."""

    detail: str | list[dict[str, Any]]


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for these error status codes."""
    described = {
        400: "the body cannot be read (not UTF-8 JSON)",
        401: "no key, or an unknown or revoked one",
        403: "the key's role does not allow this",
        404: "no such window (or another team's)",
        409: "the window's state does not allow this",
        413: "the request body is too large",
        422: "invalid input; `detail[].loc` names the field",
        429: "the team has too many open windows, or its sampling would scrape too often",
    }
    return {code: {"model": Problem, "description": described[code]} for code in codes}
