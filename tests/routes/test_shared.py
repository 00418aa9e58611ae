"""A shared deployment's guards end to end: refused targets, secret headers, limits, overlaps."""

import gzip
import http.client
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy

from specdec_collector.core.results import Overlaps
from tests.support import clients
from tests.support.collector import (
    CollectorProcess,
    NewTeam,
    Team,
    run_collector,
    serve_collector,
    watching_health,
)
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import drafts_payload
from tests.support.waiting import wait_for

SECRET = "Bearer s3cret-token-never-shown"


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("169.254.169.254:80", "address 169.254.169.254 is link-local (cloud metadata)"),
        ("[fe80::1]:80", "address fe80::1 is link-local (cloud metadata)"),
        ("0.0.0.0:9100", "address 0.0.0.0 is in 0.0.0.0/8"),
        ("http://224.0.0.1:80/metrics", "address 224.0.0.1 is multicast"),
    ],
)
def test_always_denied_targets_are_a_422_naming_them(
    api: httpx.Client, target: str, reason: str
) -> None:
    with serve_metrics(body=drafts_payload(10)) as fine:
        answer = api.post("/windows/ssrf/start", json={"targets": [fine.target, target]})
    assert answer.status_code == 422
    error = answer.json()["detail"][0]
    assert error["loc"] == ["body", "targets", 1]
    assert error["msg"].startswith("target 1 (")
    assert reason in error["msg"]
    assert fine.count() == 0  # refused before anything was scraped
    assert api.get("/windows/ssrf").status_code == 404


def test_allow_list_limits_where_the_collector_connects(database_url: str) -> None:
    with (
        serve_collector(database_url, allowed_targets="127.0.0.0/8") as base_url,
        serve_metrics(body=drafts_payload(10)) as ok,
    ):
        api = clients.client(base_url=base_url, timeout=30)
        refused = api.post("/windows/w/start", json={"targets": [ok.target, "10.11.12.13:8000"]})
        assert refused.status_code == 422
        assert refused.json()["detail"][0]["msg"] == (
            "target 1 (10.11.12.13:8000) is refused: 10.11.12.13 (10.11.12.13) is not in SPECDEC_ALLOWED_TARGETS"
        )
        assert api.post("/windows/w/start", json={"targets": [ok.target]}).status_code == 201


def test_header_values_are_sent_but_never_shown_or_logged(
    database_url: str, tmp_path: Path
) -> None:
    with (
        run_collector(database_url, tmp_path, SPECDEC_LOG_LEVEL="debug") as collector,
        serve_metrics(body=drafts_payload(100)) as server,
    ):
        api = clients.client(base_url=collector.base_url, timeout=30)
        target = {"url": server.url, "headers": {"Authorization": SECRET}}
        started = api.post(
            "/windows/auth/start", json={"targets": [target], "sample_interval_s": 0.5}
        )
        assert started.status_code == 201
        server.replace(drafts_payload(400))
        server.wait_served()
        answers = [started, api.post("/windows/auth/stop")]
        for path in ("/windows/auth", f"/windows/auth/results/{server.target}", "/windows/auth/report",
                     "/windows/auth/samples", "/windows/auth/samples?format=csv", "/openapi.json"):  # fmt: skip
            answers.append(api.get(path))
        collector.stop()
        assert collector.process is not None
    logs = collector.stderr_text
    assert [answer.status_code for answer in answers] == [201] + [200] * 7
    assert all("s3cret" not in answer.text for answer in answers)
    assert "s3cret" not in logs
    assert "window default/auth started" in logs  # the log was written, at debug level
    assert answers[1].json()["targets"][0]["header_names"] == ["Authorization"]
    assert answers[1].json()["targets"][0]["result"]["data"]["num_drafts"] == 300
    sent = [request.get("authorization") for request in server.requests]
    assert len(sent) >= 3 and set(sent) == {SECRET}  # before, samples, after


def test_limits_of_a_window(database_url: str) -> None:
    limits = {"max_targets_per_window": 4, "max_open_windows_per_team": 2,
              "max_labels_per_window": 3, "max_label_chars": 10}  # fmt: skip
    with (
        serve_collector(database_url, **limits) as base_url,
        serve_metrics(body=drafts_payload(10)) as server,
    ):
        api = clients.client(base_url=base_url, timeout=30)
        five = [f"127.0.0.1:{port}" for port in range(9001, 9006)]
        too_many = api.post("/windows/w/start", json={"targets": five})
        assert too_many.status_code == 422
        assert too_many.json()["detail"][0]["loc"] == ["body", "targets"]
        assert "at most 4 (SPECDEC_MAX_TARGETS_PER_WINDOW)" in too_many.json()["detail"][0]["msg"]
        labels = api.post(
            "/windows/w/start",
            json={"targets": [server.target], "labels": {str(i): "x" for i in range(4)}},
        )
        assert labels.status_code == 422 and labels.json()["detail"][0]["loc"] == ["body", "labels"]
        long_value = api.post(
            "/windows/w/start", json={"targets": [server.target], "labels": {"k": "x" * 11}}
        )
        assert long_value.status_code == 422 and long_value.json()["detail"][0]["loc"] == [
            "body",
            "labels",
            "k",
        ]
        for window_id in ("w1", "w2"):
            assert (
                api.post(
                    f"/windows/{window_id}/start", json={"targets": [server.target]}
                ).status_code
                == 201
            )
        with serve_metrics(body=drafts_payload(10)) as fresh:
            third = api.post("/windows/w3/start", json={"targets": [fresh.target]})
            # Its connection was opened as the target was checked, before the limit was
            # known: one connection, and nothing asked on it.
            wait_for(lambda: fresh.connections or None, "the connection opened ahead")
            assert (fresh.connections, fresh.count()) == (1, 0)
        assert third.status_code == 429
        assert "team default has 2 open windows" in third.json()["detail"]
        assert api.get("/windows/w3").status_code == 404  # nothing stored
        assert (
            api.post("/windows/w1/start", json={"targets": [server.target]}).status_code == 200
        )  # a retry still answers
        api.post("/windows/w1/stop")
        assert api.post("/windows/w3/start", json={"targets": [server.target]}).status_code == 201


def test_request_body_size(api: httpx.Client, team: Team) -> None:
    big = json.dumps({"targets": ["127.0.0.1:9"], "labels": {"k": "x" * (1024 * 1024)}})
    answer = api.post(
        "/windows/big/start", content=big, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 413
    assert answer.json()["detail"] == "request body larger than 1048576 bytes"
    # Without Content-Length (chunked), the limit holds as the body streams in.
    connection = http.client.HTTPConnection("127.0.0.1", team.collector.port, timeout=30)
    connection.putrequest("POST", "/windows/big/start")
    connection.putheader("Authorization", team.headers["Authorization"])
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Transfer-Encoding", "chunked")
    connection.endheaders()
    chunk = b"x" * 65536
    try:
        for _ in range(20):
            connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        connection.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the collector may answer and close before the client has sent it all
    assert connection.getresponse().status == 413
    assert api.get("/windows/big").status_code == 404
    assert api.get("/healthz").status_code == 200


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.slow
def test_huge_answer_and_gzip_bomb_stay_bounded(collector: CollectorProcess) -> None:
    """On a collector of its own: its peak memory is measured from a fresh process."""
    api = clients.client(base_url=collector.base_url, timeout=30)
    huge = b"# padding line of a metrics answer\n" * (64 * 1024 * 1024 // 35)  # 64 MB
    bomb = gzip.compress(b"\n" * (512 * 1024 * 1024), compresslevel=9)  # 512 MB from ~0.5 MB
    assert collector.process is not None
    baseline = _peak_rss_kib(collector.process.pid)
    with serve_metrics(body=huge) as big, serve_metrics() as zipped:
        zipped.body, zipped.gzip = bomb, False
        zipped.extra_headers = {"Content-Encoding": "gzip"}
        with watching_health(collector.base_url) as health:
            started = api.post("/windows/huge/start", json={"targets": [big.target, zipped.target]})
    assert started.status_code == 201
    errors = [t["before_error"] for t in started.json()["targets"]]
    assert errors == [
        f"Failed to fetch metrics from {big.url}: answer larger than 16777216 bytes",
        f"Failed to fetch metrics from {zipped.url}: answer larger than 16777216 bytes",
    ]
    assert health and set(health) == {200}  # the service answered all along
    grown_mib = (_peak_rss_kib(collector.process.pid) - baseline) / 1024
    assert grown_mib < 96, (
        f"peak RSS grew by {grown_mib:.0f} MiB"
    )  # the cap is 16 MiB; 64 MB + 512 MB offered


def test_overlapping_windows_on_one_server(new_team: NewTeam) -> None:
    team_a, team_b = new_team(), new_team()
    with serve_metrics(body=drafts_payload(10)) as server:
        api = clients.client(base_url=team_a.base_url, timeout=30)
        a, b = team_a.headers, team_b.headers
        body = {"targets": [server.target]}
        api.post("/windows/main/start", json=body, headers=a)
        api.post("/windows/neighbour/start", json=body, headers=a)
        api.post("/windows/theirs/start", json=body, headers=b)
        time.sleep(0.3)
        api.post("/windows/neighbour/stop", headers=a)
        api.post("/windows/theirs/stop", headers=b)
        api.post("/windows/later/start", json=body, headers=a)  # opened after main: still overlaps
        time.sleep(0.2)
        main = api.post("/windows/main/stop", headers=a).json()
        windows = {
            w: api.get(f"/windows/{w}", headers=a).json() for w in ("main", "neighbour", "later")
        }
        theirs = api.get("/windows/theirs", headers=b).json()
        result = api.get(f"/windows/main/results/{server.target}", headers=a).json()
    assert main["targets"][0]["result"]["overlaps"] == result["overlaps"]

    def span(window: dict[str, Any]) -> tuple[datetime, datetime | None]:
        stop = window["stopped_at"]
        return datetime.fromisoformat(window["started_at"]), datetime.fromisoformat(
            stop
        ) if stop else None

    main_start, main_stop = span(windows["main"])
    assert main_stop is not None

    def overlap(window: dict[str, Any]) -> float:
        start, stop = span(window)
        return round(
            (min(main_stop, stop or main_stop) - max(main_start, start)).total_seconds(), 3
        )

    named = {w["id"]: w["seconds"] for w in result["overlaps"]["windows"]}
    assert named.keys() == {"neighbour", "later"}
    assert named["neighbour"] == pytest.approx(overlap(windows["neighbour"]), abs=0.002)
    assert named["later"] == pytest.approx(overlap(windows["later"]), abs=0.002)
    assert result["overlaps"]["other_teams"]["windows"] == 1
    assert result["overlaps"]["other_teams"]["seconds"] == pytest.approx(overlap(theirs), abs=0.002)
    assert "theirs" not in json.dumps(result)


def test_a_stop_stores_the_overlaps_and_older_results_still_get_them(
    team: Team, api: httpx.Client
) -> None:
    with serve_metrics(body=drafts_payload(10)) as server:
        body = {"targets": [server.target]}
        api.post("/windows/main/start", json=body)
        api.post("/windows/beside/start", json=body)
        time.sleep(0.2)
        served = api.post("/windows/main/stop").json()["targets"][0]["result"]["overlaps"]
        engine = sqlalchemy.create_engine(team.collector.database_url)
        select_result = sqlalchemy.text(
            'SELECT t.id, t.result FROM window_target t JOIN "window" w ON w.id = t.window_pk '
            "WHERE w.team = :team AND w.window_id = 'main'"
        )
        with engine.begin() as connection:
            target_pk, stored = connection.execute(select_result, {"team": team.name}).one()
            stored = json.loads(stored) if isinstance(stored, str) else stored
            # Kept with the result (final once stopped; stored without its defaults).
            assert Overlaps.model_validate(stored["overlaps"]).model_dump(mode="json") == served
            # As a result stored before overlaps were kept with it: they are computed on read.
            del stored["overlaps"]
            connection.execute(
                sqlalchemy.text("UPDATE window_target SET result = :result WHERE id = :id"),
                {"result": json.dumps(stored), "id": target_pk},
            )
        engine.dispose()
        time.sleep(0.2)  # `beside` is still open: recomputed overlaps must still end at the stop
        read = api.get(f"/windows/main/results/{server.target}").json()
    assert [w["id"] for w in served["windows"]] == ["beside"]
    assert read["overlaps"] == served
