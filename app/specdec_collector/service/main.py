"""The FastAPI application and its lifespan, which owns the database, client and scheduler."""

import gc
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import SQLAlchemyError

from specdec_collector import __version__
from specdec_collector.config import Settings, get_settings
from specdec_collector.gcpause import tune_collections
from specdec_collector.schemas import Source
from specdec_collector.service.auth import AnonymousAccess, EnvKey, OpenMode, parse_env_keys
from specdec_collector.service.exception_handlers import add_exception_handlers
from specdec_collector.service.keys import KeyService
from specdec_collector.service.middleware import BodySizeLimit, LoopbackHostOnly
from specdec_collector.service.routes import compare, health, keys, windows
from specdec_collector.service.routes.docs import serve_docs
from specdec_collector.service.sampler import Sampler
from specdec_collector.service.state import Services, State
from specdec_collector.sources.prometheus.api import PrometheusAPI
from specdec_collector.sources.prometheus.source import PrometheusSource
from specdec_collector.sources.scrape import (
    Resolver,
    ScrapeConfig,
    new_client,
    new_query_client,
)
from specdec_collector.sources.scrape.resolver import SystemResolver
from specdec_collector.sources.scrape.source import ScrapeSource
from specdec_collector.store.db import database_unavailable
from specdec_collector.store.store import Store, StoreKnobs
from specdec_collector.telemetry import REGISTRY, DatabaseMetrics
from specdec_collector.windows.budget import ReadBudget
from specdec_collector.windows.cache import MAX_KEPT_VIEW_BYTES, OpenViews, ResultsCache
from specdec_collector.windows.catalogue import set_series_budget
from specdec_collector.windows.rehearsal import rehearse_window
from specdec_collector.windows.service import WindowService

logger = logging.getLogger(__name__)


async def _database_error(request: Request, exc: Exception) -> Response:
    reason = database_unavailable(exc)
    if reason is None:
        raise exc
    return JSONResponse(
        {"detail": f"database unavailable: {reason}; retry later"},
        status_code=503,
        headers={"Retry-After": "5"},
    )


def create_app(
    settings: Settings | None = None,
    *,
    anonymous_allowed: bool = True,
    resolve: Resolver | None = None,
) -> FastAPI:
    """An app for `settings` (default: the environment's).

    `anonymous_allowed` says whether the service may run without keys: `specdec serve` sets
    it from the bind address (loopback) or SPECDEC_ALLOW_ANONYMOUS; see `service.auth.OpenMode`.
    `resolve` replaces the system resolver (as an httpx transport replaces the network).
    """
    settings = settings or get_settings()
    env_keys = parse_env_keys(settings.api_keys)
    scrape = ScrapeConfig.from_settings(settings)
    if resolve is not None:
        scrape = replace(scrape, resolve=resolve)

    lifespan = _lifespan(settings, scrape, env_keys, anonymous_allowed)
    app = FastAPI(
        title="specdec-collector",
        version=__version__,
        summary="Speculative-decoding metrics of vLLM servers over benchmark windows.",
        lifespan=lifespan,
        docs_url=None,  # served offline by `routes.docs`
        redoc_url=None,
    )
    app.add_middleware(
        BodySizeLimit, max_bytes=settings.max_request_bytes, timeout_s=settings.body_timeout_s
    )
    if OpenMode.of(anonymous_allowed, settings.allow_anonymous) is OpenMode.UNTIL_FIRST_KEY:
        app.add_middleware(LoopbackHostOnly)  # bound to loopback, open until the first key
    app.add_exception_handler(SQLAlchemyError, _database_error)
    add_exception_handlers(app)
    app.include_router(health.router)
    app.include_router(windows.router)
    app.include_router(compare.router)
    app.include_router(keys.router)
    serve_docs(app)
    # The dashboard: static files shipped in the package, no external assets.
    app.mount("/ui", StaticFiles(directory=Path(__file__).parent / "ui", html=True), name="ui")
    return app


Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[State]]


def _lifespan(
    settings: Settings, scrape: ScrapeConfig, env_keys: list[EnvKey], anonymous_allowed: bool
) -> Lifespan:
    """The service's parts, made before the first request is accepted and closed after the
    last."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[State]:
        store = await _opened_store(settings)
        client = new_client()
        queries = new_query_client(settings.prometheus_timeout_s)
        scraped = ScrapeSource(client, scrape)
        sampler = _sampler(settings, store, scraped)
        windows = _window_service(settings, store, scraped, queries, sampler)
        open_mode = OpenMode.of(anonymous_allowed, settings.allow_anonymous)
        anonymous = AnonymousAccess(open_mode, env_keys, store)
        services = Services(store, env_keys, anonymous, windows, KeyService(store))
        # Asked once now: its connection opened and its query compiled before the first call
        # without a key, and a database that has a key closes it from the start.
        await anonymous.is_open()
        database_metrics = DatabaseMetrics(store.database)
        REGISTRY.register(database_metrics)
        await sampler.start()
        await _build_routes(app)
        _set_aside_what_lives_on()
        try:
            yield {"services": services}
        finally:
            REGISTRY.unregister(database_metrics)
            await sampler.stop()
            await store.aclose()
            await client.aclose()
            await queries.aclose()
            if isinstance(scrape.resolve, SystemResolver):
                scrape.resolve.close()

    return lifespan


async def _opened_store(settings: Settings) -> Store:
    """The store over the database, migrated first, with a window's statements compiled."""
    knobs = StoreKnobs(
        write_lanes=settings.db_write_lanes,
        writes_together=settings.db_writes_together,
        lookups_on_loop=settings.db_lookups_on_loop,
        on_loop_readings=settings.stop_on_loop_readings,
    )
    store = await Store.open(
        settings.database_url,
        knobs,
        pool_size=settings.db_pool_size,
        statement_timeout_s=settings.db_statement_timeout_s,
        connect_timeout_s=settings.db_connect_timeout_s,
    )
    # Before the first request: its start would otherwise compile every statement it runs.
    try:
        await store.run(rehearse_window)
    except Exception:  # only the first start's speed depends on it
        logger.exception("the rehearsal of a window failed; the first start compiles it")
    set_series_budget(store.database, 2 * settings.max_series_per_target)
    return store


def _sampler(settings: Settings, store: Store, scraped: ScrapeSource) -> Sampler:
    return Sampler(
        store,
        scraped,
        settings.sample_retention_days,
        replica_id=settings.replica_id or f"{socket.gethostname()}:{os.getpid()}",
        scan_interval_s=settings.sampler_scan_s,
        min_free_disk_bytes=settings.min_free_disk_bytes,
    )


def _window_service(
    settings: Settings,
    store: Store,
    scraped: ScrapeSource,
    queries: httpx.AsyncClient,
    sampler: Sampler,
) -> WindowService:
    prometheus = PrometheusAPI(settings, queries) if settings.prometheus_url else None
    per_team = settings.max_target_reads_per_second_per_team
    return WindowService(
        store=store,
        sources={
            Source.SCRAPE: scraped,
            Source.PROMETHEUS: PrometheusSource(prometheus),
        },
        sampler=sampler,
        settings=settings,
        kept_results=ResultsCache(settings.results_cache_windows),
        open_views=OpenViews(settings.open_views_cache_windows, MAX_KEPT_VIEW_BYTES),
        read_budget=ReadBudget(per_team, max(per_team, 2 * settings.max_targets_per_window)),
    )


def _set_aside_what_lives_on() -> None:
    """Everything made so far lives as long as the process: out of the collector's sight, a
    full collection no longer walks it (the first stop after start-up would pay for it). Then
    collections come less often (`gcpause`)."""
    gc.collect()
    gc.freeze()
    tune_collections()


# A path under every router that no route has: its request builds them all and answers 404.
_NO_ROUTE = "/windows/-/-/-/-/-"


async def _build_routes(app: FastAPI) -> None:
    """Build what FastAPI and Starlette build on the first request, before accepting one.

    FastAPI builds a router's routes (the validators of every route's parameters) when the
    first request reaches it, and Starlette its middleware stack on the first request at all,
    which the first window's start of a fresh collector would wait for. A request for a
    path no route has goes through both, runs no route, and answers 404.
    """
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": _NO_ROUTE,
        "raw_path": _NO_ROUTE.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1")],
        "state": {},
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        pass

    await app(scope, receive, send)


#: Set by `specdec serve --workers N` for its workers: whether the service may run without
#: keys (decided once, from the address it binds; see `create_app`).
ANONYMOUS_ALLOWED_ENV = "SPECDEC_SERVE_ANONYMOUS_ALLOWED"


def configure_logging(settings: Settings) -> None:
    """The service's log format and levels (in every worker process too)."""
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per scrape and per Alembic plugin is noise at INFO; keep their warnings.
    for noisy in ("httpx", "alembic.runtime.plugins"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # APScheduler logs every run of every job at INFO (the lease scan runs four times a
    # second: 1.5 KB/s idle) and a skipped run of a slow target's sampling at WARNING, every
    # interval; the sampler logs what goes wrong itself.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)


def create_worker_app() -> FastAPI:
    """The app of one worker of `specdec serve --workers N` (uvicorn imports it by name)."""
    settings = get_settings()
    if settings.replica_id:
        # Each worker is a replica of its own: one name for all would let them all hold a
        # window's sampler lease at once.
        settings = settings.model_copy(
            update={"replica_id": f"{settings.replica_id}:{os.getpid()}"}
        )
    configure_logging(settings)
    return create_app(settings, anonymous_allowed=os.environ.get(ANONYMOUS_ALLOWED_ENV) == "1")
