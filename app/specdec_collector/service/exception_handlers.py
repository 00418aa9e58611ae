"""HTTP answers of the domain errors in `exceptions`: each error's own status, one body shape."""

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from specdec_collector.exceptions import InvalidInput, SpecdecError


def invalid_input_body(error: InvalidInput) -> dict[str, object]:
    """The 422 body, in the shape of FastAPI's own validation answers."""
    return {"detail": [{"loc": error.loc, "msg": str(error), "type": "value_error"}]}


async def _specdec_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SpecdecError)
    body = invalid_input_body(exc) if isinstance(exc, InvalidInput) else {"detail": str(exc)}
    return JSONResponse(body, status_code=exc.status_code, headers=dict(exc.headers) or None)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422, without the `input` and `ctx` it echoes.

    The input of a bad target holds its headers (secrets), and an input of `NaN` or `1e999`
    could not even be written as JSON (the answer would be a 500). `loc` and `msg` say what is
    wrong.
    """
    assert isinstance(exc, RequestValidationError)
    detail = [
        {"loc": list(error["loc"]), "msg": error["msg"], "type": error["type"]}
        for error in exc.errors()
    ]
    return JSONResponse({"detail": detail}, status_code=422)


def add_exception_handlers(app: FastAPI) -> None:
    """Register the answer of every domain error, and of FastAPI's validation, on `app`."""
    app.add_exception_handler(SpecdecError, _specdec_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
