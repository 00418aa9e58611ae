"""Every domain error has an HTTP answer, in one body shape."""

import asyncio
import re

import httpx
from fastapi import FastAPI

from specdec_collector.exceptions import (
    InvalidInput,
    NotAllowed,
    NotAuthenticated,
    SpecdecError,
    TargetNotInWindow,
    TooManyWindows,
    WindowNotFound,
    WindowOpen,
)
from specdec_collector.service.exception_handlers import add_exception_handlers


def _kinds(root: type[SpecdecError]) -> list[type[SpecdecError]]:
    return [kind for sub in root.__subclasses__() for kind in (sub, *_kinds(sub))]


def test_every_domain_error_has_a_client_status_of_its_own() -> None:
    kinds = _kinds(SpecdecError)
    assert kinds  # the tree is not empty
    assert [k.__name__ for k in kinds if not 400 <= k.status_code < 500] == []


def test_the_drawn_tree_says_each_errors_status() -> None:
    import specdec_collector.exceptions as exceptions

    drawn = dict(re.findall(r"── (\w+) +(\d{3}) ", exceptions.__doc__ or ""))
    assert drawn == {k.__name__: str(int(k.status_code)) for k in _kinds(SpecdecError)}


def test_answers_carry_the_error_text_as_detail() -> None:
    errors: dict[str, SpecdecError] = {
        "target": TargetNotInWindow("w", "h:1"),
        "anonymous": NotAuthenticated("an API key is required: Authorization: Bearer <key>"),
        "reader": NotAllowed("a read key cannot start or stop windows"),
        "missing": WindowNotFound("w"),
        "open": WindowOpen("w"),
        "full": TooManyWindows("team t has 2 open windows"),
        "invalid": InvalidInput(["query", "cursor"], "cursor is not one this service gave"),
    }
    app = FastAPI()
    add_exception_handlers(app)

    @app.get("/{name}")
    async def fail(name: str) -> None:
        raise errors[name]

    async def ask_all() -> dict[str, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return {name: await client.get(f"/{name}") for name in errors}

    answers = asyncio.run(ask_all())
    assert {name: answer.status_code for name, answer in answers.items()} == {
        "target": 404, "anonymous": 401, "reader": 403, "missing": 404, "open": 409, "full": 429, "invalid": 422,
    }  # fmt: skip
    assert answers["target"].json() == {"detail": "window w has no target h:1"}
    assert answers["anonymous"].headers["www-authenticate"] == "Bearer"  # RFC 9110: the scheme
    assert "www-authenticate" not in answers["reader"].headers
    assert answers["missing"].json() == {"detail": "window w not found"}
    assert answers["open"].json() == {
        "detail": "window w is still open; results come with its stop"
    }
    assert answers["invalid"].json() == {
        "detail": [
            {"loc": ["query", "cursor"], "msg": "cursor is not one this service gave",
             "type": "value_error"}
        ]
    }  # fmt: skip
