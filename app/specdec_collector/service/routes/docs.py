"""The API's own documentation served offline, and `/` leading to the dashboard.

FastAPI's `/docs` loads Swagger UI from a CDN, so it is blank without internet (and on a
network that blocks the CDN). Here its assets come from a package (`fastapi-swagger`, Swagger
UI 5, which reads OpenAPI 3.1), served by the collector itself. ReDoc, CDN-only, is not served.
"""

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

router = APIRouter(include_in_schema=False)

#: Where Swagger UI's files are served from.
ASSETS = "/docs/assets"

#: How a request shows its key: `Authorization: Bearer <key>` (`service.auth`).
SECURITY_SCHEMES = {
    "apiKey": {
        "type": "http",
        "scheme": "bearer",
        "description": "a team's API key (`specdec keys create`); none in open mode",
    }
}


@router.get("/")
async def home() -> RedirectResponse:
    """The dashboard."""
    return RedirectResponse("/ui/")


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI over the service's OpenAPI schema, from the collector's own files."""
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url,
        title=f"{request.app.title} API",
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
    )


def serve_docs(app: FastAPI) -> None:
    """Serve `router` and Swagger UI's files on `app`, whose schema then declares the key."""
    app.include_router(router)
    folder = Path(str(files("fastapi_swagger") / "resources"))
    app.mount(ASSETS, StaticFiles(directory=folder), name="docs-assets")

    def openapi() -> dict[str, object]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
            # A key where the service asks for one; none for health, metrics and open mode.
            schema["security"] = [{}, {"apiKey": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
