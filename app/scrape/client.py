"""The HTTP client of every scrape: explicit timeouts, proxies from the environment, no
redirects, and a small connection pool per origin."""

import urllib.request

import httpx

from app.scrape.transport import AiohttpTransport

# Ask for the classic text format: every vLLM version serves it, and OpenMetrics answers
# (some proxies rewrite the negotiation) are read by the same extraction.
ACCEPT = "text/plain;version=0.0.4;q=1.0,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
# gzip only, decoded here: httpx's own decoders have no output limit per chunk.
ACCEPT_ENCODING = "gzip, identity"


def new_client(timeout_s: float) -> httpx.AsyncClient:
    """The shared client: explicit timeouts, proxies from the environment, no redirects.

    Direct connections go through `AiohttpTransport`; a scheme with a proxy in the
    environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY) keeps httpx's own proxy transport and
    NO_PROXY rules.
    """
    proxies = urllib.request.getproxies()
    pools = AiohttpTransport()
    mounts: dict[str, httpx.AsyncBaseTransport | None] = {
        f"{scheme}://": pools
        for scheme in ("http", "https")
        if not proxies.get(scheme) and not proxies.get("all")
    }
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s),
        limits=httpx.Limits(max_connections=512, max_keepalive_connections=64),
        mounts=mounts,
        follow_redirects=False,
        trust_env=True,
        headers={"Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING},
    )
