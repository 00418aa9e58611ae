"""One scrape against real HTTP servers, and respx at the transport for the failures hard to
make real."""

import asyncio
import gzip
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

import aiohttp
import httpx
import pytest
import respx

from specdec_collector.core.exposition import ExtractionLimits, extract_spec_decode
from specdec_collector.core.readings import FailureKind, TargetReading
from specdec_collector.core.safetext import MAX_ERROR_CHARS, safe_error_text
from specdec_collector.core.targets import Target, TargetPolicy, parse_target
from specdec_collector.sources.scrape import (
    ACCEPT,
    ACCEPT_ENCODING,
    DYNAMO_FRONTEND,
    JSON_METRICS,
    AiohttpTransport,
    Allowed,
    HttpxTransport,
    Refused,
    Resolver,
    ScrapeClient,
    ScrapeConfig,
    new_client,
    new_query_client,
    pins,
    scrape_all,
    scrape_target,
)
from specdec_collector.sources.scrape.routes import RoutedTransport
from tests.support.metrics_server import free_port, serve_metrics
from tests.support.payloads import InstanceCounters, fixture, vllm_payload
from tests.support.waiting import wait_for

MAX = 1 << 20
pytestmark = pytest.mark.anyio


async def refusals(
    targets: list[Target], config: ScrapeConfig, allowed: Allowed | None = None
) -> list[str | None]:
    """Why each target is refused, as a start's check finds it (`pins`)."""
    found = await pins(targets, config, allowed)
    return [str(pinned) if isinstance(pinned, Refused) else None for pinned in found]


@pytest.fixture
async def client() -> AsyncIterator[ScrapeClient]:
    async with new_client() as shared:
        yield shared


async def scrape(client: ScrapeClient, target: str, max_bytes: int = MAX) -> TargetReading:
    return await scrape_target(client, parse_target(target), ScrapeConfig(2.0, max_bytes))


async def test_reads_a_vllm_payload_and_asks_for_text(client: ScrapeClient) -> None:
    text = fixture("vllm_v1_dp8_k5.txt")
    with serve_metrics(body=text.encode()) as server:
        outcome = await scrape(client, server.target)
    assert outcome.error is None
    assert outcome.series == extract_spec_decode(text)
    assert server.requests[0]["accept"].startswith("text/plain;version=0.0.4")
    assert server.requests[0]["path"] == "/metrics"


async def test_reads_gzip(client: ScrapeClient) -> None:
    text = fixture("vllm_v1_dp1_k5.txt")
    with serve_metrics(body=text.encode(), gzip=True) as server:
        outcome = await scrape(client, server.target)
    assert outcome.series == extract_spec_decode(text)


async def test_reads_openmetrics(client: ScrapeClient) -> None:
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0"} 5.0\n'
        'vllm:spec_decode_num_drafts_created{engine="0"} 1.7e+09\n# EOF\n'
    )
    content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8"
    with serve_metrics(body=text.encode(), content_type=content_type) as server:
        outcome = await scrape(client, server.target)
    assert outcome.series == extract_spec_decode(text)
    assert len(outcome.series or {}) == 1


async def test_http_500(client: ScrapeClient) -> None:
    with serve_metrics(body=b"oops", status=500) as server:
        outcome = await scrape(client, server.target)
    assert outcome.error == "Metrics endpoint returned HTTP 500: oops"
    with serve_metrics(body=b"<html><body>Bad gateway</body></html>", status=502) as server:
        outcome = await scrape(client, server.target)
    assert outcome.error == "Metrics endpoint returned HTTP 502"  # a page says nothing short


async def test_llamacpp_without_metrics_keeps_its_message(client: ScrapeClient) -> None:
    """llama-server without `--metrics` answers 501 with a JSON error naming the flag
    (`tools/server/server-context.cpp`, `format_error_response`)."""
    body = json.dumps({"error": {
        "code": 501, "type": "not_supported_error",
        "message": "This server does not support metrics endpoint. Start it with `--metrics`",
    }}).encode()  # fmt: skip
    with serve_metrics(body=body, status=501, content_type="application/json") as server:
        outcome = await scrape(client, server.target)
    assert outcome.error == (
        "Metrics endpoint returned HTTP 501: This server does not support metrics endpoint. "
        "Start it with `--metrics`"
    )
    hostile = json.dumps({"message": "\x00line\nbreak " + "x" * 1500}).encode()
    with serve_metrics(body=hostile, status=503) as server:
        outcome = await scrape(client, server.target)
    assert outcome.error is not None and len(outcome.error) < 300
    assert outcome.error.startswith("Metrics endpoint returned HTTP 503: line break xxx")
    cut = json.dumps({"message": "x" * 5000}).encode()  # past the bytes read: not quoted
    with serve_metrics(body=cut, status=503) as server:
        outcome = await scrape(client, server.target)
    assert outcome.error == "Metrics endpoint returned HTTP 503"


async def test_redirect_is_not_followed(client: ScrapeClient) -> None:
    with serve_metrics(status=302, extra_headers={"Location": "http://169.254.169.254/"}) as server:
        outcome = await scrape(client, server.target)
    assert outcome.error == "Metrics endpoint returned HTTP 302"
    assert server.count() == 1


async def test_connection_refused(client: ScrapeClient) -> None:
    port = free_port()
    outcome = await scrape(client, f"127.0.0.1:{port}")
    assert outcome.error is not None
    assert outcome.error.startswith(
        f"Failed to fetch metrics from http://127.0.0.1:{port}/metrics: "
    )
    assert "ConnectError" in outcome.error


async def test_html_page(client: ScrapeClient) -> None:
    with serve_metrics(
        body=b"<html>login</html>", content_type="text/html; charset=utf-8"
    ) as server:
        outcome = await scrape(client, server.target)
    assert (
        outcome.error
        == f"Failed to fetch metrics from {server.url}: not a Prometheus exposition: text/html"
    )


@pytest.mark.parametrize("compressed", [False, True])
async def test_answer_over_the_cap(client: ScrapeClient, compressed: bool) -> None:
    body = fixture("vllm_v1_dp1_k5.txt").encode() * 4  # ~240 KB, over a 100 KB cap
    with serve_metrics(body=body, gzip=compressed) as server:
        outcome = await scrape(client, server.target, max_bytes=100_000)
    assert (
        outcome.error
        == f"Failed to fetch metrics from {server.url}: answer larger than 100000 bytes"
    )


async def test_gzip_bomb_is_stopped_at_the_cap(client: ScrapeClient) -> None:
    bomb = b"# padding\n" * 5_000_000  # 50 MB that gzip turns into ~50 KB
    with serve_metrics() as server:
        server.body = gzip.decompress(gzip.compress(bomb))  # plain body for the control below
        server.body = bomb
        server.gzip = True
        outcome = await scrape(client, server.target, max_bytes=MAX)
    assert (
        outcome.error
        == f"Failed to fetch metrics from {server.url}: answer larger than {MAX} bytes"
    )


async def test_not_utf8_and_cut_payload(client: ScrapeClient) -> None:
    with serve_metrics(body=b"vllm:spec_decode_num_drafts_total \xff\xfe\n") as server:
        outcome = await scrape(client, server.target)
    assert outcome.error is not None and "not UTF-8" in outcome.error
    with serve_metrics(body=b'vllm:spec_decode_num_drafts_total{engine="0",mo') as server:
        outcome = await scrape(client, server.target)
    assert outcome.error == (
        f"Failed to fetch metrics from {server.url}: payload cut off mid-line (no final newline)"
    )


async def test_all_targets_are_scraped_at_once(client: ScrapeClient) -> None:
    text = fixture("vllm_v1_dp1_k5.txt").encode()
    with serve_metrics(body=text, delay_s=1.0) as server:
        targets = [parse_target(f"http://{server.target}/metrics?n={n}") for n in range(32)]
        outcomes = await scrape_all(client, targets, ScrapeConfig(5.0, MAX))
    assert [o.error for o in outcomes] == [None] * 32
    # Every request was in flight at the same time: the scrapes did not queue.
    assert server.max_in_flight == 32


# respx at the transport, the seam under every scrape: the scrape above it is production's.


async def _mocked_scrape(router: respx.MockRouter, target: str) -> TargetReading:
    transport = HttpxTransport(httpx.MockTransport(router.async_handler))
    async with new_client(transport=transport) as client:
        return await scrape_target(client, parse_target(target), ScrapeConfig(2.0, MAX))


async def test_timeout_is_an_error_naming_the_target() -> None:
    router = respx.MockRouter()
    router.get("http://10.9.9.9:8000/metrics").mock(side_effect=httpx.ReadTimeout("read timed out"))
    outcome = await _mocked_scrape(router, "10.9.9.9:8000")
    assert outcome.error == (
        "Failed to fetch metrics from http://10.9.9.9:8000/metrics: timed out after 2 s (ReadTimeout)"
    )


async def test_connection_reset() -> None:
    router = respx.MockRouter()
    router.get("http://10.9.9.9:8000/metrics").mock(
        side_effect=httpx.ReadError("[Errno 104] Connection reset by peer")
    )
    outcome = await _mocked_scrape(router, "10.9.9.9:8000")
    assert outcome.error == (
        "Failed to fetch metrics from http://10.9.9.9:8000/metrics: "
        "ReadError: [Errno 104] Connection reset by peer"
    )


async def test_a_mocked_answer_is_shared_capped_and_read_as_production_reads_one() -> None:
    """A test double at the seam sees the request production sends (the scrape's headers) and
    its answer is read by the same path: gzip decoded, series extracted."""
    router = respx.MockRouter()
    route = router.get("http://10.9.9.9:8000/metrics").mock(
        return_value=httpx.Response(
            200,
            content=gzip.compress(fixture("vllm_v1_dp1_k5.txt").encode()),
            headers={"Content-Encoding": "gzip"},
        )
    )
    outcome = await _mocked_scrape(router, "10.9.9.9:8000")
    assert outcome.error is None and outcome.series
    (call,) = route.calls
    assert call.request.headers["accept"] == ACCEPT
    assert call.request.headers["accept-encoding"] == ACCEPT_ENCODING
    assert call.request.headers["host"] == "10.9.9.9:8000"


@pytest.mark.parametrize("when", ["before the head", "mid-answer"])
async def test_a_server_that_resets_the_connection_is_a_transport_failure(when: str) -> None:
    """Straight to the server (aiohttp under the scrape): a reset, before the answer's head or
    in its body, is told as httpx would name it, never raised."""

    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if when == "mid-answer":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n# x\n")
            await writer.drain()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # closed with a reset (RST), not a FIN

    server, port = await _listening(reset)
    async with server, new_client() as client:
        outcome = await scrape_target(
            client, parse_target(f"127.0.0.1:{port}"), ScrapeConfig(2.0, MAX)
        )
    prefix = f"Failed to fetch metrics from http://127.0.0.1:{port}/metrics: "
    assert outcome.kind is FailureKind.TRANSPORT, outcome.error
    assert (outcome.error or "").startswith(prefix + "ReadError: "), outcome.error
    assert "Connection reset by peer" in (outcome.error or "")


async def _listening(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    context: ssl.SSLContext | None = None,
) -> tuple[asyncio.Server, int]:
    """A raw server on a free loopback port running `handler` for each connection."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=context)
    return server, server.sockets[0].getsockname()[1]


async def test_slow_trickle_is_bounded_by_the_total_timeout() -> None:
    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n"
        )
        for _ in range(100):
            writer.write(b"# x\n")
            await writer.drain()
            await asyncio.sleep(0.1)
        writer.close()

    server, port = await _listening(trickle)
    async with server, new_client() as client:
        outcome = await scrape_target(
            client, parse_target(f"127.0.0.1:{port}"), ScrapeConfig(0.5, MAX)
        )
    assert (
        outcome.error
        == f"Failed to fetch metrics from http://127.0.0.1:{port}/metrics: timed out after 0.5 s"
    )


async def test_an_answer_that_stops_arriving_ends_at_the_total_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No timeout per read (the scrape's total ends first, and a per-read one cost a timer for
    every piece that arrived): a server that goes silent mid-answer still ends the scrape."""
    seen: list[dict[str, float | None]] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n# x\n")
        await writer.drain()
        await asyncio.sleep(5)
        writer.close()

    server, port = await _listening(silent)
    async with server, new_client() as client:
        assert isinstance(client.transport, RoutedTransport)
        direct = client.transport.direct
        send = direct._send

        async def recording(*args: Any) -> Any:
            steps: aiohttp.ClientTimeout = args[-1]
            seen.append({"connect": steps.connect, "sock_connect": steps.sock_connect,
                         "sock_read": steps.sock_read, "total": steps.total})  # fmt: skip
            return await send(*args)

        monkeypatch.setattr(direct, "_send", recording)
        outcome = await scrape_target(
            client, parse_target(f"127.0.0.1:{port}"), ScrapeConfig(0.5, MAX)
        )
    assert outcome.error == (
        f"Failed to fetch metrics from http://127.0.0.1:{port}/metrics: timed out after 0.5 s"
    )
    assert seen == [{"connect": 0.5, "sock_connect": 0.5, "sock_read": None, "total": None}]


PROXY_CHECK = """
import asyncio, sys
from specdec_collector.sources.scrape import ScrapeConfig, new_client, scrape_target
from specdec_collector.core.safetext import MAX_ERROR_CHARS, safe_error_text
from specdec_collector.core.targets import TargetPolicy, parse_target
async def main():
    async with new_client() as client:
        outcome = await scrape_target(client, parse_target(sys.argv[1]), ScrapeConfig(2.0, 1 << 20))
    print(outcome.error or len(outcome.series))
asyncio.run(main())
"""


def test_proxy_from_the_environment_is_honoured() -> None:
    text = fixture("vllm_v1_dp1_k5.txt").encode()
    with serve_metrics(body=text) as proxy, serve_metrics(body=b"") as direct:
        env = {**os.environ, "HTTP_PROXY": f"http://{proxy.target}", "NO_PROXY": ""}
        # The target does not exist: only a proxy that is used can answer for it.
        run = subprocess.run(
            [sys.executable, "-c", PROXY_CHECK, "metrics.invalid:9100"],
            env=env, capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        # 8 spec-decode series, 6 witnesses (tokens, requests, latency, first tokens, steps)
        assert run.stdout.strip() == "14"
        assert proxy.requests[0]["path"] == "http://metrics.invalid:9100/metrics"
        env["NO_PROXY"] = "127.0.0.1"
        run = subprocess.run(
            [sys.executable, "-c", PROXY_CHECK, direct.target],
            env=env, capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert direct.count() == 1
        assert len(proxy.requests) == 1


# --- where scrapes may go -------------------------------------------------------------------


def resolver(table: dict[str, list[list[str]]]) -> Resolver:
    """A resolver whose answers for a name change from one call to the next (DNS rebinding)."""
    calls: dict[str, int] = {}

    async def resolve(host: str, port: int) -> list[str]:
        answers = table[host]
        index = calls.get(host, 0)
        calls[host] = index + 1
        return answers[min(index, len(answers) - 1)]

    return resolve


async def test_connection_goes_to_the_checked_address_with_the_original_host() -> None:
    text = fixture("vllm_v1_dp1_k5.txt")
    with serve_metrics(body=text.encode()) as server:
        config = ScrapeConfig(
            2.0, MAX, TargetPolicy.parse("127.0.0.0/8"), resolver({"metrics.test": [["127.0.0.1"]]})
        )
        async with new_client() as client:
            outcome = await scrape_target(
                client, parse_target(f"metrics.test:{server.port}"), config
            )
    assert outcome.error is None
    assert server.requests[0]["host"] == f"metrics.test:{server.port}"


async def test_dns_rebinding_to_a_denied_address_is_refused() -> None:
    with serve_metrics(body=b"") as server:
        # Checked at start: 127.0.0.1. At the scrape, the name now points at cloud metadata.
        config = ScrapeConfig(
            2.0, MAX, TargetPolicy(), resolver({"flip.test": [["127.0.0.1"], ["169.254.169.254"]]})
        )
        target = parse_target(f"flip.test:{server.port}")
        assert await refusals([target], config) == [None]
        async with new_client() as client:
            outcome = await scrape_target(client, target, config)
    assert outcome.error == (
        f"Failed to fetch metrics from http://flip.test:{server.port}/metrics: refused: address "
        "169.254.169.254 is link-local (cloud metadata); list it in SPECDEC_ALLOWED_TARGETS to allow it"
    )
    assert server.count() == 0


async def test_every_resolved_address_is_checked() -> None:
    config = ScrapeConfig(
        2.0,
        MAX,
        TargetPolicy.parse("127.0.0.0/8"),
        resolver({"two.test": [["127.0.0.1", "10.1.2.3"]]}),
    )
    assert await refusals([parse_target("two.test:80")], config) == [
        "two.test (10.1.2.3) is not in SPECDEC_ALLOWED_TARGETS"
    ]


async def test_suffix_and_name_rules() -> None:
    table = {
        "vllm-0.svc.test": [["10.1.2.3"]],
        "other.test": [["10.1.2.4"]],
        "exact": [["10.1.2.5"]],
    }
    config = ScrapeConfig(2.0, MAX, TargetPolicy.parse("*.svc.test, exact"), resolver(table))
    targets = [parse_target(f"{name}:80") for name in table]
    assert await refusals(targets, config) == [
        None,
        "other.test (10.1.2.4) is not in SPECDEC_ALLOWED_TARGETS",
        None,
    ]


async def test_unresolvable_name_is_not_refused_but_fails_the_scrape() -> None:
    async def nxdomain(host: str, port: int) -> list[str]:
        raise OSError(-2, "Name or service not known")

    config = ScrapeConfig(2.0, MAX, TargetPolicy(), nxdomain)
    target = parse_target("gone.test:80")
    assert await refusals([target], config) == [None]
    async with new_client() as client:
        outcome = await scrape_target(client, target, config)
    assert outcome.error == (
        "Failed to fetch metrics from http://gone.test:80/metrics: cannot resolve gone.test: "
        "[Errno -2] Name or service not known"
    )


async def test_target_headers_are_sent() -> None:
    with serve_metrics(body=b"") as server:
        target = parse_target(
            {"url": f"http://{server.target}/metrics", "headers": {"Authorization": "Bearer t0ken"}}
        )
        async with new_client() as client:
            await scrape_target(client, target, ScrapeConfig(2.0, MAX))
    assert server.requests[0]["authorization"] == "Bearer t0ken"


# --- connection pools -----------------------------------------------------------------------


async def test_each_origin_keeps_its_own_connection() -> None:
    body = fixture("vllm_v1_dp1_k5.txt").encode()
    transport = AiohttpTransport()
    with serve_metrics(body=body) as a, serve_metrics(body=body) as b:
        async with httpx.AsyncClient(transport=transport) as http:
            for server in (a, a, b, a, b):
                answer = await http.get(server.url)
                assert (answer.status_code, await answer.aread()) == (200, body)
    # Keep-alive within each origin: a's three requests came on one connection, b's two on one.
    assert len({request["_peer"] for request in a.requests}) == 1
    assert len({request["_peer"] for request in b.requests}) == 1
    assert len(a.requests) == 3 and len(b.requests) == 2


async def _opened_ahead(transport: AiohttpTransport, url: str) -> None:
    opening = transport.connect_ahead(url, {}, 2.0)
    assert opening is not None
    await opening


async def _checked_connecting_ahead(
    client: ScrapeClient, targets: list[Target], config: ScrapeConfig
) -> list[str | None]:
    """`refusals` as a start asks it: each target not refused has its connection opened ahead
    (one is started for each; all are awaited)."""
    openings: list[asyncio.Task[None]] = []

    def allowed(url: str, extensions: dict[str, Any]) -> None:
        opening = client.connect_ahead(url, extensions, config.timeout_s)
        assert opening is not None
        openings.append(opening)

    reasons = await refusals(targets, config, allowed)
    await asyncio.gather(*openings)
    return reasons


async def test_a_connection_opened_ahead_is_the_one_its_request_takes() -> None:
    body = fixture("vllm_v1_dp1_k5.txt").encode()
    transport = AiohttpTransport()
    with serve_metrics(body=body) as ahead, serve_metrics(body=body) as used:
        async with httpx.AsyncClient(transport=transport) as http:
            await _opened_ahead(transport, ahead.url)
            wait_for(lambda: ahead.connections or None, "the connection opened ahead")
            assert ahead.count() == 0  # opened, nothing asked
            assert (await http.get(ahead.url)).status_code == 200
            # An origin just used has its connection: none is opened ahead.
            assert (await http.get(used.url)).status_code == 200
            assert transport.connect_ahead(used.url, {}, 2.0) is None
    assert (ahead.connections, ahead.count(), used.connections, used.count()) == (1, 1, 1, 1)


async def test_a_request_waits_for_the_connection_being_opened_ahead_for_it() -> None:
    body = fixture("vllm_v1_dp1_k5.txt").encode()
    transport = AiohttpTransport()
    with serve_metrics(body=body) as a, serve_metrics(body=body) as b:
        async with httpx.AsyncClient(transport=transport) as http:
            for server in (a, b):
                assert transport.connect_ahead(server.url, {}, 2.0) is not None
            # Sent at once: each request takes the connection being opened for its origin.
            answers = await asyncio.gather(http.get(a.url), http.get(b.url), http.get(a.url))
            assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert (a.connections, b.connections) in ((1, 1), (2, 1))  # a's two requests were at once
    assert (a.count(), b.count()) == (2, 1)


async def test_a_connection_that_cannot_be_opened_ahead_leaves_its_scrape_to_say_why() -> None:
    port = free_port()  # nothing listens
    async with new_client() as client:
        opening = client.connect_ahead(f"http://127.0.0.1:{port}/metrics", {}, 2.0)
        assert opening is not None
        await opening  # no exception
        outcome = await scrape(client, f"127.0.0.1:{port}")
    assert outcome.kind is FailureKind.CONNECT


async def test_checked_targets_are_connected_ahead_where_their_scrapes_connect() -> None:
    """A name is pinned to its checked address with its Host header: the scrape takes the
    connection opened for that address when the target was checked (one connection each)."""
    text = fixture("vllm_v1_dp1_k5.txt")
    with serve_metrics(body=text.encode()) as named, serve_metrics(body=text.encode()) as plain:
        config = ScrapeConfig(
            2.0, MAX, TargetPolicy.parse("127.0.0.0/8"), resolver({"metrics.test": [["127.0.0.1"]]})
        )
        targets = [parse_target(f"metrics.test:{named.port}"), parse_target(plain.target)]
        async with new_client() as client:
            assert await _checked_connecting_ahead(client, targets, config) == [None, None]
            wait_for(lambda: (named.connections and plain.connections) or None, "both connections")
            outcomes = await scrape_all(client, targets, config)
    assert [outcome.error for outcome in outcomes] == [None, None]
    assert named.requests[0]["host"] == f"metrics.test:{named.port}"
    assert (named.connections, plain.connections, named.count(), plain.count()) == (1, 1, 1, 1)


async def test_new_origins_share_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the CA bundle costs ~40 ms of CPU: once per service, not once per new target."""
    loads: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def counted(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(context)
        original(context, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    body = fixture("vllm_v1_dp1_k5.txt").encode()
    with (
        serve_metrics(body=body) as a,
        serve_metrics(body=body) as b,
        serve_metrics(body=body) as c,
    ):
        async with httpx.AsyncClient(transport=AiohttpTransport()) as http:
            for server in (a, b, c):
                assert (await http.get(server.url)).status_code == 200
    assert len(loads) == 1


async def test_every_failure_has_a_kind_and_the_aisbench_text(client: ScrapeClient) -> None:
    """The kind labels `specdec_scrape_errors_total`; the text is what AISBench would write."""
    nospec = fixture("vllm_v1_dp1_nospec.txt").encode()
    with (
        serve_metrics(status=503) as unavailable,
        serve_metrics(body=b"<html></html>", content_type="text/html") as html,
        serve_metrics(body=b"x" * 4096) as huge,
        serve_metrics(body=nospec + b"vllm:spec_decode_num_drafts_total -1\n") as negative,
    ):
        closed = f"127.0.0.1:{free_port()}"
        targets = {
            FailureKind.HTTP_STATUS: unavailable.target,
            FailureKind.NOT_PROMETHEUS: html.target,
            FailureKind.TOO_LARGE: huge.target,
            FailureKind.INVALID_PAYLOAD: negative.target,
            FailureKind.CONNECT: closed,
        }
        outcomes = {
            kind: await scrape(client, target, 2048 if kind is FailureKind.TOO_LARGE else MAX)
            for kind, target in targets.items()
        }
    assert {kind: outcome.kind for kind, outcome in outcomes.items()} == {k: k for k in targets}
    assert outcomes[FailureKind.HTTP_STATUS].error == "Metrics endpoint returned HTTP 503"
    for kind, outcome in outcomes.items():
        assert outcome.series is None
        if kind is not FailureKind.HTTP_STATUS:
            assert outcome.error is not None
            assert outcome.error.startswith(
                f"Failed to fetch metrics from http://{targets[kind]}/metrics: "
            )
    assert outcomes[FailureKind.TOO_LARGE].error.endswith("answer larger than 2048 bytes")  # type: ignore[union-attr]


# --- hostile targets and the collector's own faults (issue 15) -------------------------------

SECRET = "tok-s3cret-never-shown"


def test_error_texts_are_redacted_one_line_and_bounded() -> None:
    headers = [("Authorization", f"Bearer {SECRET}"), ("X-Short", "ab")]
    text = f"h11 said: Illegal header value b'Bearer {SECRET}'\x00\nand {SECRET} again " + "x" * 900
    safe = safe_error_text(text, headers)
    assert SECRET not in safe and "[redacted]" in safe
    assert "\x00" not in safe and "\n" not in safe
    assert len(safe) == MAX_ERROR_CHARS and safe.endswith("…")
    assert safe_error_text("ab cd", headers) == "ab cd"  # values under 4 characters are kept


async def test_a_target_that_echoes_a_header_into_a_broken_answer_never_stores_it() -> None:
    """h11 quotes the malformed status line it read: here, the target's copy of our header."""
    listener = socket.create_server(("127.0.0.1", free_port()))

    def answer_once() -> None:
        client, _ = listener.accept()
        with client:
            request = client.recv(65536)
            echoed = next(line for line in request.split(b"\r\n") if b"Bearer" in line)
            client.sendall(b"HTTP/1.1 2OO " + echoed + b"\r\n\r\n")

    thread = threading.Thread(target=answer_once, daemon=True)
    thread.start()
    target = parse_target(
        {"url": f"http://127.0.0.1:{listener.getsockname()[1]}/metrics",
         "headers": {"Authorization": f"Bearer {SECRET}"}}
    )  # fmt: skip
    async with new_client() as client:
        outcome = await scrape_target(client, target, ScrapeConfig(2.0, MAX))
    listener.close()
    assert outcome.kind is FailureKind.TRANSPORT
    assert outcome.error is not None and "RemoteProtocolError" in outcome.error
    assert SECRET not in outcome.error and "[redacted]" in outcome.error


async def test_a_fault_inside_the_collector_is_an_internal_failure_never_an_exception() -> None:
    async def broken(host: str, port: int) -> list[str]:
        raise RuntimeError(f"a bug that quotes {SECRET}")

    config = ScrapeConfig(2.0, MAX, TargetPolicy(), broken)
    target = parse_target({"url": "http://name.test:80/", "headers": {"A": SECRET}})
    async with new_client() as client:
        outcome = await scrape_target(client, target, config)
        assert await refusals([target], config) == [None]  # its scrape says why, not the start
    assert outcome.kind is FailureKind.INTERNAL
    assert outcome.error == (
        "Failed to fetch metrics from http://name.test:80/: "
        "internal error of the collector (RuntimeError)"
    )


async def test_limits_on_series_and_label_sets_make_the_scrape_na(
    client: ScrapeClient,
) -> None:
    many = vllm_payload([InstanceCounters(1, 3, [1], engine=str(i)) for i in range(20)])
    long = vllm_payload([InstanceCounters(1, 3, [1], extra_labels={"pod": "p" * 300})])
    limits = ExtractionLimits(max_series=50, max_label_chars=256)
    config = ScrapeConfig(2.0, MAX, limits=limits)
    with serve_metrics(body=many.encode()) as server, serve_metrics(body=long.encode()) as other:
        too_many = await scrape_target(client, parse_target(server.target), config)
        too_long = await scrape_target(client, parse_target(other.target), config)
        fine = await scrape_target(client, parse_target(server.target), ScrapeConfig(2.0, MAX))
    assert too_many.kind is too_long.kind is FailureKind.INVALID_PAYLOAD
    assert too_many.error is not None and too_many.error.endswith(
        "more than 50 spec-decode series (SPECDEC_MAX_SERIES_PER_TARGET)"
    )
    assert too_long.error is not None and "more than 256 (SPECDEC_MAX_SERIES_LABEL_CHARS)" in (
        too_long.error
    )
    # and the six witnesses of the payload's engine 0 (generated and prompt tokens, finished
    # requests, decode seconds, first tokens, steps)
    assert fine.series is not None and len(fine.series) == 20 * 4 + 6


class _CountingSlots(asyncio.Semaphore):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.taken = self.held = self.most_held = 0

    async def acquire(self) -> Literal[True]:
        await super().acquire()
        self.taken += 1
        self.held += 1
        self.most_held = max(self.most_held, self.held)
        return True

    def release(self) -> None:
        self.held -= 1
        super().release()


async def test_large_answers_are_read_a_few_at_a_time(client: ScrapeClient) -> None:
    padding = b"# padding\n" * 300_000  # 3 MB: over OFF_LOOP_BYTES
    body = padding + fixture("vllm_v1_dp1_k5.txt").encode()
    slots = _CountingSlots(1)
    config = ScrapeConfig(2.0, 8 << 20, large_answers=slots)
    with serve_metrics(body=body) as large, serve_metrics(body=body[-5000:]) as small:
        targets = [parse_target(t) for t in (large.target, small.target, large.target)]
        outcomes = await scrape_all(client, targets, config)
    assert [outcome.error for outcome in outcomes] == [None, None, None]
    assert outcomes[0].series == outcomes[2].series == extract_spec_decode(body.decode())
    assert (slots.taken, slots.most_held, slots.held) == (2, 1, 0)  # the small one needs none


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"# TYPE dynamo_frontend_requests_total counter\ndynamo_frontend_requests_total 5\n",
         DYNAMO_FRONTEND),
        (b'[{"gpuMemUsage": 1, "iter": 3}]', JSON_METRICS),  # TensorRT-LLM's /metrics
    ],
)  # fmt: skip
async def test_a_known_servers_other_endpoint_says_which_to_use(
    client: ScrapeClient, body: bytes, reason: str
) -> None:
    with serve_metrics(body=body) as server:
        outcome = await scrape(client, server.target)
    assert outcome.kind is FailureKind.WRONG_ENDPOINT
    assert outcome.error == f"Failed to fetch metrics from {server.url}: {reason}"


# --- TLS through the pinned address ---------------------------------------------------------


async def _tls_server(
    certificate: Any, body: bytes, seen: dict[str, Any]
) -> tuple[asyncio.Server, int]:
    """An HTTPS server on loopback presenting `certificate`; records the SNI and Host it got."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    certificate.configure_cert(context)

    def record_sni(_socket: Any, server_name: str | None, _context: Any) -> None:
        seen["sni"] = server_name
        seen.setdefault("handshakes", []).append(server_name)

    context.sni_callback = record_sni

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            writer.close()
            return
        seen["host"] = next(
            line.split(":", 1)[1].strip()
            for line in head.split("\r\n")
            if line.lower().startswith("host:")
        )
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n")
        writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    return await _listening(answer, context)


@pytest.mark.parametrize("ahead", [False, True], ids=["connected-by-the-scrape", "ahead"])
@pytest.mark.parametrize("certified", ["metrics.test", "other.test"])
async def test_https_is_pinned_to_the_checked_address_and_verified_for_the_name(
    certified: str, ahead: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name resolves (here) to loopback; the request goes to that address with the name as
    TLS server name and Host, and the certificate is checked for the name: one for another
    name is a connect failure that says why. Connected ahead (as a start checks its targets),
    the scrape takes that connection; one that failed its check leaves the scrape to say why."""
    import trustme

    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # a private CA, as users set it
    body = vllm_payload([InstanceCounters(5, 15, [3, 2, 1])]).encode()
    seen: dict[str, Any] = {}
    server, port = await _tls_server(authority.issue_cert(certified), body, seen)
    looked_up: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        looked_up.append(host)
        return ["127.0.0.1"]

    config = ScrapeConfig(2.0, MAX, resolve=resolve)
    target = parse_target(f"https://metrics.test:{port}/metrics")
    try:
        async with new_client() as client:
            if ahead:
                assert await _checked_connecting_ahead(client, [target], config) == [None]
            outcome = await scrape_target(client, target, config)
    finally:
        server.close()
    assert looked_up == ["metrics.test"] * (2 if ahead else 1)
    assert set(seen["handshakes"]) == {"metrics.test"}  # the name, on every connection
    if certified == "metrics.test":
        assert outcome.error is None and outcome.series == extract_spec_decode(body.decode())
        assert seen["host"] == f"metrics.test:{port}"
        assert len(seen["handshakes"]) == 1  # connected ahead: the scrape took that connection
    else:
        assert outcome.kind is FailureKind.CONNECT and outcome.error is not None
        assert "ConnectError" in outcome.error and "metrics.test" in outcome.error
        assert "certificate" in outcome.error.lower(), outcome.error


async def test_a_target_setting_cookies_never_reaches_other_targets(
    client: ScrapeClient,
) -> None:
    """Cookies are per host, not per port: a target that sets one (a hostile team's server)
    would have the shared client send it to every other server on that host, and grow the
    client's jar without bound. Scrapes keep no cookies, nor does the Prometheus API's
    client."""
    body = fixture("vllm_v1_dp1_k5.txt").encode()
    cookie = {"Set-Cookie": "session=from-a-hostile-target; Path=/; Max-Age=3600"}
    with (
        serve_metrics(body=body, extra_headers=cookie) as hostile,
        serve_metrics(body=body) as other,
    ):
        for server in (hostile, other, hostile, other):
            assert (await scrape(client, server.target)).error is None
        async with new_query_client(2.0, {}) as queries:
            for server in (hostile, other):
                assert (await queries.get(server.url)).status_code == 200
            assert len(queries.cookies.jar) == 0
    sent = [request.get("cookie") for request in hostile.requests + other.requests]
    assert sent == [None] * 6
