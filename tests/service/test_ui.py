"""The built-in dashboard in a real browser: Playwright driving Chromium, headless."""

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, sync_playwright

from tests.support.collector import Team, serve_simulator, specdec_command
from tests.support.metrics_server import MetricsServer, free_port, serve_metrics
from tests.support.payloads import InstanceCounters, vllm_payload
from tests.support.waiting import wait_for

pytestmark = pytest.mark.chromium

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def payload(drafts: int, accepted: list[int]) -> bytes:
    engine = InstanceCounters(
        drafts=drafts, draft_tokens=len(accepted) * drafts, accepted_per_pos=accepted
    )
    return vllm_payload([engine]).encode()


NO_BROWSER = (
    "the dashboard tests need a Chromium: Debian's (apt-get install chromium) "
    "or Playwright's own (.venv/bin/playwright install chromium)"
)


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = shutil.which("chromium")
        if chromium is None and Path(playwright.chromium.executable_path).exists():
            chromium = playwright.chromium.executable_path
        if chromium is None:
            # CI installs Debian's: there a missing browser is a failure, not a skip.
            if os.environ.get("CI") == "true":
                pytest.fail(NO_BROWSER, pytrace=False)
            pytest.skip(NO_BROWSER)
        launched = playwright.chromium.launch(executable_path=chromium, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def filled(team: Team, api: httpx.Client) -> Iterator[tuple[Team, MetricsServer]]:
    """Two closed windows (EAGLE and n-gram) with samples, and one open window still sampled."""
    with serve_metrics() as server:
        for window_id, method, per_pos in (
            ("eagle-run", "eagle", [90, 70, 50]),
            ("ngram-run", "ngram", [60, 30, 10]),
        ):
            server.replace(payload(0, [0, 0, 0]))
            api.post(
                f"/windows/{window_id}/start",
                json={
                    "targets": [server.target],
                    "labels": {"method": method},
                    "sample_interval_s": 0.5,
                },
            )
            for step in (1, 2):
                server.replace(payload(100 * step, [n * step for n in per_pos]))
                server.wait_served()
            api.post(f"/windows/{window_id}/stop")
        server.replace(payload(1000, [800, 500, 300]))
        api.post(
            "/windows/live-run/start",
            json={
                "targets": [server.target],
                "labels": {"method": "eagle"},
                "sample_interval_s": 0.5,
            },
        )
        yield team, server


def _open(page: Page, base_url: str, route: str) -> None:
    """Go to a dashboard route and wait until that route (not the one before) has drawn."""
    page.goto(f"{base_url}/ui/{route}")
    page.wait_for_function(f"document.body.dataset.ready === {route!r}")


@pytest.mark.slow
def test_dashboard_pages_draw_real_data(
    browser: Browser, filled: tuple[Team, MetricsServer], tmp_path: Path
) -> None:
    team, server = filled
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{team.base_url}/ui/")
    # The key is asked once and kept for the session.
    page.fill("#key-input", team.key)
    page.click("#key-form button")
    page.wait_for_function("document.body.dataset.ready === '#/'")
    assert page.locator("#windows tbody tr").count() == 3
    page.screenshot(path=str(tmp_path / "windows.png"), full_page=True)

    page.fill("input[name=label]", "method=ngram")
    page.click("#filters button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#windows tbody tr').length === 1")
    assert page.locator("#windows tbody tr").get_attribute("data-id") == "ngram-run"

    _open(page, team.base_url, "#/window/eagle-run")
    card = page.locator(".card").first
    assert card.get_attribute("data-target") == server.target
    assert card.locator("dd.rate").inner_text() == "70.00 %"  # (90+70+50)*2 / (3*200)
    assert card.locator("dd.engine").inner_text() == "vllm, exact"
    assert card.locator("ul.notes").count() == 0
    bars = card.locator("svg.positions rect.bar")
    assert bars.count() == 3
    assert [float(bars.nth(i).get_attribute("data-rate") or "nan") for i in range(3)] == [
        0.9,
        0.7,
        0.5,
    ]
    heights = [float(bars.nth(i).get_attribute("height") or "0") for i in range(3)]
    assert heights[0] > heights[1] > heights[2] > 0
    assert int(card.locator(".timeline").get_attribute("data-points") or "0") >= 1
    assert page.evaluate("sessionStorage.getItem('specdec-api-key')") == team.key
    page.screenshot(path=str(tmp_path / "window.png"), full_page=True)

    _open(page, team.base_url, "#/window/live-run")
    before = int(page.locator(".timeline").get_attribute("data-points") or "0")
    server.replace(payload(2000, [1500, 1000, 500]))
    deadline = time.monotonic() + 20
    while (
        int(page.locator(".timeline").get_attribute("data-points") or "0") <= before
    ):  # live refresh
        assert time.monotonic() < deadline, "the open window's chart did not grow"
        page.wait_for_timeout(200)

    _open(page, team.base_url, "#/?state=closed")
    page.check("input[value=eagle-run]")
    page.check("input[value=ngram-run]")
    page.click("#compare")
    # In table order (newest first): n-gram is the baseline the EAGLE run is compared with.
    page.wait_for_function("document.body.dataset.ready === '#/compare/ngram-run,eagle-run'")
    assert page.locator(".card svg.positions rect.bar").count() == 6
    # Accepted / draft tokens of each, shown to 2 decimals.
    eagle, ngram = float(Fraction(210 * 100, 300)), float(Fraction(100 * 100, 300))
    assert f"+{eagle - ngram:.2f}" in page.locator(".card table").inner_text()
    # Each difference judged, or why not: these windows were not sampled.
    verdicts = page.locator(".card ul.verdicts").first.inner_text()
    assert "eagle-run versus ngram-run" in page.locator(".card").first.inner_text()
    assert "acceptance rate" in verdicts and "no verdict" in verdicts
    page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)

    # Another engine: said on its card (with why it is approximate) and in the list.
    trtllm = "trtllm_spec_decode"
    with serve_metrics(body=b"") as other, team.client() as api:
        api.post("/windows/trt-run/start", json={"targets": [other.url]})
        other.replace(
            f"{trtllm}_num_draft_tokens_total 300.0\n{trtllm}_num_accepted_tokens_total 150.0\n"
            f'{trtllm}_drafted_tokens_total{{token_position="0"}} 100.0\n'.encode()
        )
        api.post("/windows/trt-run/stop")
    _open(page, team.base_url, "#/window/trt-run")
    card = page.locator(".card").first
    assert card.locator("dd.rate").inner_text() == "50.00 %"  # 150 / 300
    assert card.locator("dd.engine").inner_text() == "trtllm, approximate"
    assert "finished requests only" in card.locator("ul.notes").inner_text()
    _open(page, team.base_url, "#/")
    assert "trtllm, approximate" in page.locator("#windows tr[data-id=trt-run]").inner_text()
    for name in ("windows", "window", "compare"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000


@pytest.mark.slow
def test_intervals_the_distribution_throughput_and_speedup_are_drawn(
    browser: Browser, team: Team, api: httpx.Client, tmp_path: Path
) -> None:
    """A server without spec decoding, then with it on the same port (the simulator) and
    sampled long enough for intervals: what the dashboard draws against the API's numbers."""
    port = free_port()
    load = ["load", "--requests", "8", "--concurrency", "4", "--max-tokens", "32"]
    with serve_simulator("--no-spec-decoding", "--step-ms", "1", port=port) as url:
        api.post("/windows/ui-plain/start", json={"targets": [url]})
        subprocess.run([*specdec_command(), *load, "--url", url], check=True, timeout=60)
        api.post("/windows/ui-plain/stop")
    with serve_simulator("--step-ms", "1", port=port) as url:
        # The shortest interval a window may have: 22 intervals in ~6 s.
        api.post("/windows/ui-sampled/start", json={"targets": [url], "sample_interval_s": 0.25})
        subprocess.run([*specdec_command(), *load, "--url", url], check=True, timeout=60)
        wait_for(
            lambda: (
                len(api.get("/windows/ui-sampled/samples").json()["series"][0]["points"]) >= 23
                or None
            ),
            "22 sample intervals",
            timeout_s=60,
        )
        result = api.post("/windows/ui-sampled/stop").json()["targets"][0]["result"]
    intervals = result["confidence"]["per_position_acceptance_rates"]
    assert len(intervals) == 5 and result["accepted_distribution"] is not None
    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    page.goto(f"{team.base_url}/ui/")
    page.fill("#key-input", team.key)
    page.click("#key-form button")
    page.wait_for_function("document.body.dataset.ready === '#/'")

    _open(page, team.base_url, "#/window/ui-sampled")
    card = page.locator(".card").first
    whiskers = card.locator("svg.positions path.interval")
    assert whiskers.count() == 5
    for i in range(5):
        drawn = whiskers.nth(i)
        position = drawn.get_attribute("data-position") or ""
        assert float(drawn.get_attribute("data-low") or "nan") == intervals[position]["low"]
        assert float(drawn.get_attribute("data-high") or "nan") == intervals[position]["high"]
    rate = result["confidence"]["acceptance_rate"]
    assert card.locator(".interval[data-figure=acceptance_rate]").inner_text() == (
        f"{rate['low']:.2f} to {rate['high']:.2f} %"
    )
    bars = card.locator("svg.distribution rect.bar")
    assert {
        bars.nth(i).get_attribute("data-accepted"): int(
            bars.nth(i).get_attribute("data-count") or 0
        )
        for i in range(bars.count())
    } == result["accepted_distribution"]
    throughput = result["throughput"]
    assert card.locator("dd.tokens-per-second").inner_text() == (
        f"{throughput['generated_tokens_per_second']:.2f}"
    )
    assert (
        card.locator("dd.latency").inner_text() == f"{throughput['inter_token_latency_ms']:.2f} ms"
    )
    page.screenshot(path=str(tmp_path / "sampled.png"), full_page=True)

    _open(page, team.base_url, "#/compare/ui-plain,ui-sampled")
    compared = api.get("/compare", params={"windows": "ui-plain,ui-sampled"}).json()
    (faster,) = compared["targets"][0]["speedups"]
    shown = page.locator(".card ul.speedups li[data-window=ui-sampled] b.speedup")
    assert shown.inner_text() == f"{faster['generated_tokens_per_second']:.2f}x"
    cells = page.locator(".card td.tokens-per-second")
    plain = compared["targets"][0]["results"][0]["throughput"]["generated_tokens_per_second"]
    assert cells.first.inner_text() == f"{plain:.2f}"
    page.screenshot(path=str(tmp_path / "speedup.png"), full_page=True)


def test_the_api_docs_work_offline_and_slash_leads_to_the_dashboard(
    browser: Browser, team: Team
) -> None:
    """Every request that leaves the collector is refused: Swagger UI still draws the API, from
    the collector's own files, and offers to take the key."""
    page = browser.new_page()
    outside: list[str] = []

    def only_the_collector(route: Route) -> None:
        if route.request.url.startswith(team.base_url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_collector)
    page.goto(f"{team.base_url}/docs")
    page.wait_for_selector(".swagger-ui .info .title")
    assert "specdec-collector" in page.locator(".swagger-ui .info .title").inner_text()
    assert page.locator(".swagger-ui .opblock").count() >= 10  # the operations, drawn
    assert page.locator("button.authorize").count() == 1  # the key, declared
    assert outside == []
    page.goto(f"{team.base_url}/")
    page.wait_for_selector("#key-dialog[open]")  # the dashboard, asking for the team's key
    assert page.url == f"{team.base_url}/ui/"


def _shots(tmp_path: Path) -> Path:
    """Where screenshots go: SPECDEC_SCREENSHOTS (the docs' images are made so), else tmp."""
    folder = Path(os.environ.get("SPECDEC_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _sign_in(page: Page, base_url: str, key: str) -> None:
    page.goto(f"{base_url}/ui/")
    page.fill("#key-input", key)
    page.click("#key-form button")
    page.wait_for_function("document.body.dataset.ready === '#/'")


def _chart(page: Page, target: str, expression: str) -> object:
    return page.evaluate(
        f"(() => {{ const c = window.specdecCharts.get({target!r}); return {expression}; }})()"
    )


@pytest.mark.slow
def test_what_a_person_sees_axes_legends_details_downloads_and_live_refresh(
    browser: Browser, filled: tuple[Team, MetricsServer], tmp_path: Path
) -> None:
    team, server = filled
    shots = _shots(tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    # A wrong key is said to be refused, then the right one is taken.
    page.goto(f"{team.base_url}/ui/")
    page.fill("#key-input", "not-a-key-of-anyone-0123456789")
    page.click("#key-form button")
    page.wait_for_selector("#key-refused:not([hidden])")
    assert page.locator("#key-refused").inner_text() == (
        "That key was refused: unknown or revoked API key"
    )
    page.fill("#key-input", team.key)
    page.click("#key-form button")
    page.wait_for_function("document.body.dataset.ready === '#/'")
    # "open" is a state, not an error: not in the error colour.
    live_row = page.locator("#windows tr[data-id=live-run]")
    assert live_row.locator(".state").inner_text() == "open"
    assert live_row.locator(".na").count() == 0 and live_row.locator(".open").count() >= 1
    assert "method=eagle" in live_row.locator(".chip").all_inner_texts()
    page.screenshot(path=str(shots / "windows.png"), full_page=True)
    # Comparing one window says what is missing.
    page.check("input[value=eagle-run]")
    page.click("#compare")
    assert "at least two" in page.locator("#compare-hint").inner_text()
    # A filter that keeps nothing says so.
    _open(page, team.base_url, "#/?label=method%3Dnone")
    assert page.locator("#empty").inner_text() == "No window matches these filters."

    with team.client() as api:
        eagle = api.get("/windows/eagle-run").json()
    result = eagle["targets"][0]["result"]
    _open(page, team.base_url, "#/window/eagle-run")
    target = server.target
    card = page.locator(".card").first
    # The time chart: a time axis in the viewer's zone, both y axes named, ticks drawn, and a
    # legend of both figures whose time is UTC on hover.
    assert _chart(page, target, "c.plot.scales.x.time") is True
    labels = _chart(page, target, "c.plot.axes.map((a) => a.label)")
    assert labels == [
        f"time ({page.evaluate('Intl.DateTimeFormat().resolvedOptions().timeZone')})",
        "acceptance rate (%)",
        "length (tokens/step)",
    ]
    ticks = _chart(page, target, "c.plot.axes.map((a) => a._values || [])")
    assert isinstance(ticks, list) and all(len(values) >= 2 for values in ticks), ticks
    legend = card.locator(".timeline .u-legend .u-series .u-label").all_inner_texts()
    assert legend == ["UTC", "Acceptance rate", "Acceptance length"]
    points = [p for p in api_points(team, "eagle-run") if p["acceptance_rate"] is not None]
    assert int(card.locator(".timeline").get_attribute("data-points") or "0") == len(points)
    drawn = _chart(page, target, "c.plot.data[1]")
    assert drawn == [p["acceptance_rate"] for p in points]
    plot = card.locator(".timeline .u-over")
    plot.hover(position={"x": 5, "y": 20})
    page.wait_for_timeout(200)
    shown = card.locator(".timeline .u-legend .u-series").first.locator(".u-value").inner_text()
    assert shown.endswith(" UTC") and shown.startswith(str(points[0]["taken_at"])[:10])
    # The window's details: labels, samples, restarts, the times with their zone.
    assert page.locator("dd.labels .chip").all_inner_texts() == ["method=eagle"]
    assert card.locator("dd.samples").inner_text() == (
        f"{result['samples']['taken']} taken, {result['samples']['failed']} failed"
    )
    assert card.locator("dd.restarts").inner_text() == "0"
    started = page.locator("dl.window time").first
    assert started.get_attribute("datetime") == eagle["started_at"]
    assert (started.get_attribute("title") or "").endswith(" UTC")
    # Per-position bars on a labelled axis with a legend.
    axis_labels = card.locator("svg.positions text.axis-label")
    assert axis_labels.evaluate_all("nodes => nodes.map((n) => n.textContent)") == [
        "accepted (%)", "draft position"
    ]  # fmt: skip
    assert card.locator("figure.positions ul.legend li").all_inner_texts() == ["eagle-run"]
    with page.expect_download() as downloading:
        page.click("button[data-download=json]")
    saved = tmp_path / "eagle.json"
    downloading.value.save_as(saved)
    assert json.loads(saved.read_text()) == eagle
    page.screenshot(path=str(shots / "window.png"), full_page=True)

    # A live window: only newer samples are fetched, appended without rebuilding the page.
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/samples" in r.url else None)
    _open(page, team.base_url, "#/window/live-run")
    page.evaluate("document.querySelector('.card').dataset.kept = 'yes'")
    before = int(page.locator(".timeline").get_attribute("data-points") or "0")
    server.replace(payload(2000, [1500, 1000, 500]))
    deadline = time.monotonic() + 20
    while int(page.locator(".timeline").get_attribute("data-points") or "0") <= before:
        assert time.monotonic() < deadline, "the open window's chart did not grow"
        page.wait_for_timeout(200)
    assert page.locator(".card").first.get_attribute("data-kept") == "yes"  # not rebuilt
    later = [url for url in asked[1:] if "after=" in url]
    assert asked and "after=" not in asked[0] and later, asked
    # Stopped: the page shows the results once, and stops asking.
    with team.client() as api:
        api.post("/windows/live-run/stop")
    page.wait_for_selector(".card dd.rate", timeout=20_000)

    # Three windows, the baseline picked: each window in its own colour, named in a legend.
    _open(page, team.base_url, "#/?state=closed")
    for window_id in ("eagle-run", "ngram-run", "live-run"):
        page.check(f"input[type=checkbox][value={window_id}]")
    page.check("input[type=radio][value=eagle-run]")
    page.click("#compare")
    page.wait_for_function(
        "document.body.dataset.ready === '#/compare/eagle-run,live-run,ngram-run'"
    )
    figure = page.locator(".card figure.positions").first
    fills = {
        bar.get_attribute("data-series"): bar.get_attribute("fill")
        for bar in figure.locator("rect.bar").all()
    }
    assert set(fills) == {"eagle-run", "live-run", "ngram-run"}
    assert len(set(fills.values())) == 3
    assert figure.locator("ul.legend li").all_inner_texts() == [
        "eagle-run",
        "live-run",
        "ngram-run",
    ]
    assert "(baseline)" in page.locator(".card tr[data-window=eagle-run]").inner_text()
    page.screenshot(path=str(shots / "compare.png"), full_page=True)
    page.select_option("#baseline", "ngram-run")
    page.wait_for_function(
        "document.body.dataset.ready === '#/compare/ngram-run,eagle-run,live-run'"
    )


def api_points(team: Team, window_id: str) -> list[dict[str, object]]:
    with team.client() as api:
        (series,) = api.get(f"/windows/{window_id}/samples").json()["series"]
    points: list[dict[str, object]] = series["points"]
    return points


def test_a_page_says_it_is_ready_for_the_route_it_drew(
    browser: Browser, filled: tuple[Team, MetricsServer]
) -> None:
    """A route whose answer comes after the address has moved on (its hashchange not handled
    yet) says it drew its own route, not the address: a test that waits for the next page
    would otherwise read that page's charts before they are drawn."""
    team, _ = filled
    page = browser.new_page()
    _sign_in(page, team.base_url, team.key)
    held: list[Route] = []
    page.route("**/windows?*", lambda route: held.append(route))
    page.evaluate("document.body.dataset.ready = 'pending'")
    page.evaluate("window.dispatchEvent(new HashChangeEvent('hashchange'))")  # the list, again
    for _ in range(500):  # Playwright hands the request over while it is called
        if held:
            break
        page.wait_for_timeout(20)
    assert held, "the list's request was never sent"
    # The address moves on without a hashchange yet, then the list's answer comes.
    page.evaluate("history.replaceState(null, '', '#/window/eagle-run')")
    held[0].continue_()
    page.wait_for_function("document.body.dataset.ready !== 'pending'")
    assert page.evaluate("document.body.dataset.ready") == "#/"
    page.close()


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_phone_in_either_colour_scheme_needs_no_sideways_scroll(
    browser: Browser, filled: tuple[Team, MetricsServer], tmp_path: Path, scheme: str
) -> None:
    team, server = filled
    with team.client() as api:
        api.post("/windows/live-run/stop")
        api.post("/windows/unsampled/start", json={"targets": [server.target]})
        api.post("/windows/unsampled/stop")
    page = browser.new_page(viewport={"width": 390, "height": 844}, color_scheme=scheme)  # type: ignore[arg-type]
    _sign_in(page, team.base_url, team.key)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    channels = [int(n) for n in background.removeprefix("rgb(").rstrip(")").split(",")]
    assert (sum(channels) / 3 < 60) == (scheme == "dark"), background
    for route in (
        "#/",
        "#/window/eagle-run",
        "#/window/unsampled",
        "#/compare/ngram-run,eagle-run",
    ):
        _open(page, team.base_url, route)
        wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 0, (route, wide)
        if route == "#/window/eagle-run":
            # The charts take the scheme's colours as they draw.
            muted = page.evaluate(
                "getComputedStyle(document.documentElement).getPropertyValue('--muted').trim()"
            )
            assert _chart(page, server.target, "c.plot.axes[0].stroke(c.plot, 0)") == muted
            page.screenshot(path=str(_shots(tmp_path) / f"phone-{scheme}.png"), full_page=True)
        if route == "#/window/unsampled":
            assert page.locator(".timeline p.empty").inner_text().startswith("Not sampled:")
