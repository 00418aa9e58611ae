"""Scraping targets: configuration, where a scrape may connect, the HTTP client, one scrape,
its failures, and the source over them (`source`). Each job has its module; the names other
modules use are here."""

from specdec_collector.sources.scrape.client import (
    ACCEPT,
    ACCEPT_ENCODING,
    QueryClient,
    ScrapeClient,
    new_client,
    new_query_client,
)
from specdec_collector.sources.scrape.config import (
    LARGE_ANSWERS_AT_ONCE,
    OFF_LOOP_BYTES,
    Resolver,
    ScrapeConfig,
)
from specdec_collector.sources.scrape.failures import failure
from specdec_collector.sources.scrape.fetch import (
    DYNAMO_FRONTEND,
    JSON_METRICS,
    scrape_all,
    scrape_target,
)
from specdec_collector.sources.scrape.pinning import Allowed, Pin, Refused, pin, pins
from specdec_collector.sources.scrape.transport import (
    AiohttpTransport,
    Answer,
    HttpxTransport,
    ScrapeTransport,
)

__all__ = [
    "ACCEPT",
    "ACCEPT_ENCODING",
    "DYNAMO_FRONTEND",
    "JSON_METRICS",
    "LARGE_ANSWERS_AT_ONCE",
    "OFF_LOOP_BYTES",
    "AiohttpTransport",
    "Allowed",
    "Answer",
    "HttpxTransport",
    "Pin",
    "QueryClient",
    "Refused",
    "Resolver",
    "ScrapeClient",
    "ScrapeConfig",
    "ScrapeTransport",
    "failure",
    "new_client",
    "new_query_client",
    "pin",
    "pins",
    "scrape_all",
    "scrape_target",
]
