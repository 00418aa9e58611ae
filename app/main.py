"""The FastAPI application and its lifespan, which owns the engine, client and scheduler."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from app import __version__
from app.config import Settings, get_settings
from app.db import create_db_engine, upgrade_database
from app.routes import health, windows
from app.sampler import Sampler
from app.scrape import new_client


def create_app(settings: Settings | None = None) -> FastAPI:
    """An app for `settings` (default: the environment's)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Migrations run before the first request is accepted.
        await run_in_threadpool(upgrade_database, settings.database_url)
        app.state.settings = settings
        app.state.engine = create_db_engine(settings.database_url)
        app.state.client = new_client(settings.scrape_timeout_s)
        app.state.sampler = Sampler(app.state.engine, app.state.client, settings)
        await app.state.sampler.start()
        try:
            yield
        finally:
            app.state.sampler.shutdown()
            await app.state.client.aclose()
            app.state.engine.dispose()

    app = FastAPI(
        title="specdec-collector",
        version=__version__,
        summary="Speculative-decoding metrics of vLLM servers over benchmark windows.",
        lifespan=lifespan,
    )
    app.include_router(health.router)
    app.include_router(windows.router)
    return app
