"""HTTP answers of the domain errors in `exceptions`: a status each, one body shape."""

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from specdec_collector.exceptions import (
    InvalidInput,
    NotAllowed,
    NotAuthenticated,
    OverScrapeBudget,
    SpecdecError,
    TargetNotInWindow,
    TooManyWindows,
    WindowConflict,
    WindowNotFound,
    WindowOpen,
)

STATUS: dict[type[SpecdecError], int] = {
    NotAuthenticated: status.HTTP_401_UNAUTHORIZED,
    NotAllowed: status.HTTP_403_FORBIDDEN,
    WindowNotFound: status.HTTP_404_NOT_FOUND,
    TargetNotInWindow: status.HTTP_404_NOT_FOUND,
    WindowOpen: status.HTTP_409_CONFLICT,
    WindowConflict: status.HTTP_409_CONFLICT,
    TooManyWindows: status.HTTP_429_TOO_MANY_REQUESTS,
    OverScrapeBudget: status.HTTP_429_TOO_MANY_REQUESTS,
}


def invalid_input_body(error: InvalidInput) -> dict[str, object]:
    """The 422 body, in the shape of FastAPI's own validation answers."""
    return {"detail": [{"loc": error.loc, "msg": str(error), "type": "value_error"}]}


async def _specdec_error(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, InvalidInput):
        return JSONResponse(invalid_input_body(exc), status_code=422)
    code = next(code for kind, code in STATUS.items() if isinstance(exc, kind))
    # RFC 9110: a 401 names the scheme the client should use.
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, NotAuthenticated) else None
    return JSONResponse({"detail": str(exc)}, status_code=code, headers=headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422, without the `input` and `ctx` it echoes.

    The input of a bad target holds its headers (secrets), and an input of `NaN` or `1e999`
    could not even be written as JSON (the answer was a 500). `loc` and `msg` say what is wrong.
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
