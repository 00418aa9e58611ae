"""A shared deployment end to end: keys, roles, team isolation, open mode, the key CLI."""

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.support import clients
from tests.support.collector import (
    CollectorProcess,
    serve_collector,
    specdec_command,
)
from tests.support.metrics_server import MetricsServer, free_port, serve_metrics
from tests.support.payloads import InstanceCounters, vllm_payload

WRITE_A = "team-a-write-0123456789abcdef"
READ_A = "team-a-read-0123456789abcdef"
WRITE_B = "team-b-write-0123456789abcdef"
ADMIN = "ops-admin-0123456789abcdef"
KEYS = f"a:write:{WRITE_A},a:read:{READ_A},b:write:{WRITE_B},ops:admin:{ADMIN}"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def shared(database_url: str) -> Iterator[str]:
    with serve_collector(database_url, api_keys=KEYS) as collector:
        yield collector


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    payload = vllm_payload(
        [InstanceCounters(drafts=10, draft_tokens=30, accepted_per_pos=[5, 3, 1])]
    )
    with serve_metrics(body=payload.encode()) as running:
        yield running


def test_missing_wrong_and_read_only_keys(shared: str, server: MetricsServer) -> None:
    api = clients.client(base_url=shared, timeout=30)
    body = {"targets": [server.target]}
    missing = api.post("/windows/w/start", json=body)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert (
        api.post("/windows/w/start", json=body, headers=auth("wrong-key-0123456789")).status_code
        == 401
    )
    assert api.get("/windows/w", headers={"Authorization": WRITE_A}).status_code == 401
    read_start = api.post("/windows/w/start", json=body, headers=auth(READ_A))
    assert read_start.status_code == 403
    assert read_start.json()["detail"] == "a read key cannot start or stop windows"
    assert server.count() == 0  # nothing was scraped for refused calls
    assert api.post("/windows/w/start", json=body, headers=auth(WRITE_A)).status_code == 201
    assert api.get("/windows/w", headers=auth(READ_A)).status_code == 200
    assert api.post("/windows/w/stop", headers=auth(READ_A)).status_code == 403
    assert api.get("/healthz").status_code == 200  # health needs no key


def test_teams_are_isolated_and_admins_name_the_team(shared: str) -> None:
    api = clients.client(base_url=shared, timeout=30)
    payload = vllm_payload(
        [InstanceCounters(drafts=10, draft_tokens=30, accepted_per_pos=[5, 3, 1])]
    )
    with serve_metrics(body=payload.encode()) as one, serve_metrics(body=payload.encode()) as two:
        # Both teams own a run-1, with different targets.
        assert (
            api.post(
                "/windows/run-1/start", json={"targets": [one.target]}, headers=auth(WRITE_A)
            ).status_code
            == 201
        )
        assert (
            api.post(
                "/windows/run-1/start", json={"targets": [two.target]}, headers=auth(WRITE_B)
            ).status_code
            == 201
        )
        assert (
            api.post(
                "/windows/only-a/start", json={"targets": [one.target]}, headers=auth(WRITE_A)
            ).status_code
            == 201
        )
        a_view = api.get("/windows/run-1", headers=auth(READ_A)).json()
        b_view = api.get("/windows/run-1", headers=auth(WRITE_B)).json()
        assert (a_view["team"], a_view["targets"][0]["target"]) == ("a", one.target)
        assert (b_view["team"], b_view["targets"][0]["target"]) == ("b", two.target)
        # Another team's window is 404 for every call, exactly like one that does not exist.
        for method, path in [("GET", "/windows/only-a"), ("POST", "/windows/only-a/stop"),
                             ("GET", "/windows/only-a/report"), ("GET", "/windows/only-a/samples"),
                             ("GET", f"/windows/only-a/results/{one.target}")]:  # fmt: skip
            answer = api.request(method, path, headers=auth(WRITE_B))
            assert answer.status_code == 404
            assert answer.json()["detail"] == "window only-a not found"
        assert (
            api.get("/windows/run-1", params={"team": "a"}, headers=auth(WRITE_B)).status_code
            == 403
        )
        stopped = api.post("/windows/only-a/stop", params={"team": "a"}, headers=auth(ADMIN)).json()
        assert stopped["state"] == "closed"
        assert (stopped["started_by"], stopped["stopped_by"]) == ("env:1", "env:4")
        assert (
            api.get("/windows/only-a", headers=auth(ADMIN)).status_code == 404
        )  # admin's own team
        assert (
            api.get("/windows/only-a", params={"team": "a"}, headers=auth(ADMIN)).status_code == 200
        )


@pytest.mark.slow
def test_keys_cli_create_list_revoke(
    database_url: str, tmp_path: Path, server: MetricsServer
) -> None:
    env = {**os.environ, "SPECDEC_DATABASE_URL": database_url}

    def specdec(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*specdec_command(), "keys", *args], env=env, capture_output=True, text=True, timeout=60
        )

    with serve_collector(database_url) as base_url:
        api = clients.client(base_url=base_url, timeout=30)
        assert api.get("/windows/x").status_code == 404  # open mode: no key needed yet
        created = specdec("create", "--team", "ml", "--role", "write")
        assert created.returncode == 0, created.stderr
        # It says which database it used (the password hidden).
        shown = make_url(database_url).render_as_string(hide_password=True)
        assert created.stderr == f"specdec keys create: database {shown}\n"
        key = created.stdout.strip().splitlines()[-1]
        assert key.startswith("sdk_")
        listed = specdec("list")
        assert key not in listed.stdout and key[:8] in listed.stdout and "ml" in listed.stdout
        (as_json,) = json.loads(specdec("list", "--json").stdout)
        assert as_json["id"] == 1 and as_json["team"] == "ml" and as_json["role"] == "write"
        assert as_json["prefix"] == key[:8] and as_json["revoked_at"] is None
        assert key not in json.dumps(as_json)
        # The running service sees the new key at once: auth is now required.
        assert api.get("/windows/x").status_code == 401
        started = api.post("/windows/x/start", json={"targets": [server.target]}, headers=auth(key))
        assert started.status_code == 201
        assert started.json()["team"] == "ml"
        assert started.json()["started_by"] == "key:1"
        assert specdec("revoke", "1").returncode == 0
        assert specdec("revoke", "1").returncode == 1
        # Both changes are in the audit trail, made from the command line (the second revoke
        # changed nothing, so it left no event).
        with create_engine(database_url).connect() as connection:
            events = connection.execute(
                text("SELECT action, key_id, team, role, actor FROM key_event ORDER BY id")
            ).all()
        assert [tuple(event[:4]) for event in events] == [
            ("created", 1, "ml", "write"),
            ("revoked", 1, "ml", "write"),
        ]
        assert all(event.actor.startswith("cli:") and len(event.actor) > 4 for event in events)
        assert api.get("/windows/x", headers=auth(key)).status_code == 401
        # The last key revoked: the service does not fall back to open mode.
        assert api.get("/windows/x").status_code == 401
        assert api.post("/windows/y/start", json={"targets": [server.target]}).status_code == 401
    bad = specdec("create", "--team", "no spaces", "--role", "read")
    assert bad.returncode == 2 and "team" in bad.stderr
    # From another folder, the default database is not the service's: refused, saying so,
    # and nothing made there (it would hold keys the service never accepts).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    stray = {**os.environ, "SPECDEC_DATABASE_URL": "sqlite:///./data/specdec.db"}
    refused = subprocess.run(
        [*specdec_command(), "keys", "create", "--team", "ml", "--role", "read"],
        env=stray, cwd=elsewhere, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 1 and refused.stdout == ""
    assert "sqlite:///./data/specdec.db is not a collector's database (no such file)" in (
        refused.stderr
    )
    assert not (elsewhere / "data").exists()
    (elsewhere / "data").mkdir()
    first = subprocess.run(
        [*specdec_command(), "keys", "create", "--team", "ml", "--role", "read", "--init"],
        env=stray, cwd=elsewhere, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert first.returncode == 0 and first.stdout.strip().splitlines()[-1].startswith("sdk_")
    assert (elsewhere / "data" / "specdec.db").is_file()
    scripted = subprocess.run(
        [*specdec_command(), "keys", "create", "--team", "ci", "--role", "metrics", "--json"],
        env=stray, cwd=elsewhere, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    made = json.loads(scripted.stdout)
    assert (made["id"], made["team"], made["role"]) == (2, "ci", "metrics")
    assert made["key"].startswith(made["prefix"]) and made["key"].startswith("sdk_")
    engine = create_engine(database_url)
    with engine.connect() as connection:
        stored = connection.execute(text("SELECT * FROM api_key")).all()
    engine.dispose()
    assert stored and key not in repr(stored)


def test_serving_beyond_loopback_without_keys_is_refused(database_url: str) -> None:
    port = free_port()
    env = {**os.environ, "SPECDEC_DATABASE_URL": database_url}
    refused = subprocess.run(
        [*specdec_command(), "serve", "--host", "0.0.0.0", "--port", str(port)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "refusing to serve on 0.0.0.0 without API keys" in refused.stderr
    assert "SPECDEC_ALLOW_ANONYMOUS=true" in refused.stderr


def test_serving_more_connections_than_postgresql_takes_is_said(database_url: str) -> None:
    """8 workers of 2 x 100 pooled connections each and one for the small reads, against a
    PostgreSQL that takes about a hundred: `specdec serve` says so before it serves (here it is
    then refused: no keys)."""
    env = {**os.environ, "SPECDEC_DATABASE_URL": database_url, "SPECDEC_DB_POOL_SIZE": "100"}
    said = subprocess.run(
        [*specdec_command(), "serve", "--host", "0.0.0.0", "--port", str(free_port()),
         "--workers", "8"],
        env=env, capture_output=True, text=True, timeout=60,
    ).stderr  # fmt: skip
    warned = "8 worker(s) may open up to 1608 PostgreSQL connections" in said
    assert warned == database_url.startswith("postgresql"), said
    if warned:
        assert "raise PostgreSQL's max_connections" in said


def test_anonymous_beyond_loopback_when_allowed(database_url: str, tmp_path: Path) -> None:
    collector = CollectorProcess(
        database_url, env={"SPECDEC_ALLOW_ANONYMOUS": "true"}, log_path=tmp_path / "log"
    )
    collector.start(host="0.0.0.0")
    try:
        answer = clients.get(f"{collector.base_url}/windows/nope", timeout=10)
        assert answer.status_code == 404  # served, without a key
    finally:
        collector.stop()


def test_bad_settings_stop_the_start_with_a_message(tmp_path: Path) -> None:
    env = {**os.environ, "SPECDEC_DATABASE_URL": f"sqlite:///{tmp_path / 'never-created.db'}",
           "SPECDEC_API_KEYS": "a:boss:0123456789abcdef0"}  # fmt: skip
    run = subprocess.run(
        [*specdec_command(), "serve", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "SPECDEC_API_KEYS entry 1: role 'boss'" in run.stderr
