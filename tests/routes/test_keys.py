"""The keys API on a served collector: an admin creates, lists and revokes keys, each change in
the audit trail; every other key, and none, is refused; bad bodies get a 422 naming the field."""

from collections.abc import Iterator

import httpx
import pytest

from tests.support import clients
from tests.support.collector import serve_collector
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import InstanceCounters, vllm_payload

ADMIN = "ops-admin-0123456789abcdef"
WRITE = "team-a-write-0123456789abcdef"
READ = "team-a-read-0123456789abcdef"
METRICS = "prom-metrics-0123456789abcdef"
KEYS = f"a:write:{WRITE},a:read:{READ},ops:admin:{ADMIN},prom:metrics:{METRICS}"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def api(database_url: str) -> Iterator[httpx.Client]:
    with serve_collector(database_url, api_keys=KEYS) as url:
        yield clients.client(base_url=url, timeout=30, headers=auth(ADMIN))


def test_an_admin_creates_lists_and_revokes_a_key_that_works_until_revoked(
    api: httpx.Client,
) -> None:
    created = api.post("/keys", json={"team": "c", "role": "write"})
    assert created.status_code == 201, created.text
    made = created.json()
    key = made.pop("key")
    assert key.startswith("sdk_") and len(key) > 40 and key.startswith(made["prefix"])
    assert made["team"] == "c" and made["role"] == "write" and made["revoked_at"] is None
    assert made["created_at"].endswith(("Z", "+00:00"))
    # The new key works at once, in its own team.
    payload = vllm_payload(
        [InstanceCounters(drafts=4, draft_tokens=12, accepted_per_pos=[3, 2, 1])]
    )
    with serve_metrics(body=payload.encode()) as server:
        started = api.post("/windows/k/start", json={"targets": [server.target]}, headers=auth(key))
        assert started.status_code == 201, started.text
        assert started.json()["team"] == "c"
        assert started.json()["started_by"] == f"key:{made['id']}"
        assert api.post("/windows/k/stop", headers=auth(key)).status_code == 200
    listed = api.get("/keys")
    assert listed.status_code == 200
    assert listed.json() == [made]  # the key itself never again, nor its hash
    assert key not in listed.text
    revoked = api.delete(f"/keys/{made['id']}")
    assert revoked.status_code == 200
    when = revoked.json()["revoked_at"]
    assert when is not None and revoked.json()["id"] == made["id"]
    assert api.get("/windows/k", headers=auth(key)).status_code == 401
    # Revoking again changes nothing: the same time, no second event.
    again = api.delete(f"/keys/{made['id']}")
    assert again.status_code == 200 and again.json()["revoked_at"] == when
    missing = api.delete("/keys/999")
    assert missing.status_code == 404 and missing.json() == {"detail": "key 999 not found"}
    events = api.get("/keys/events")
    assert events.status_code == 200
    trail = [
        (event["action"], event["key_id"], event["team"], event["role"], event["actor"])
        for event in events.json()
    ]
    # The admin key is the third of SPECDEC_API_KEYS: its label is env:3.
    assert trail == [
        ("created", made["id"], "c", "write", "env:3"),
        ("revoked", made["id"], "c", "write", "env:3"),
    ]
    assert events.json()[0]["at"] == made["created_at"]
    assert events.json()[1]["at"] == when
    assert key not in events.text


def test_an_admin_key_made_by_the_api_manages_keys_and_is_the_actor(api: httpx.Client) -> None:
    second = api.post("/keys", json={"team": "ops", "role": "admin"}).json()
    made = api.post("/keys", json={"team": "d", "role": "read"}, headers=auth(second["key"]))
    assert made.status_code == 201
    actors = [event["actor"] for event in api.get("/keys/events").json()]
    assert actors == ["env:3", f"key:{second['id']}"]


@pytest.mark.parametrize("key", [WRITE, READ, METRICS, None])
def test_no_other_key_touches_the_keys(api: httpx.Client, key: str | None) -> None:
    target = api.post("/keys", json={"team": "a", "role": "read"}).json()["id"]
    other = clients.client(base_url=api.base_url, timeout=30, headers=auth(key) if key else {})
    calls = [
        other.post("/keys", json={"team": "a", "role": "admin"}),
        other.get("/keys"),
        other.get("/keys/events"),
        other.delete(f"/keys/{target}"),
    ]
    expected = 403 if key else 401
    assert [call.status_code for call in calls] == [expected] * 4
    if key:
        assert {call.json()["detail"] for call in calls} <= {
            "only admin keys may do this",
            "a metrics key reads /metrics only",
        }
    listed = api.get("/keys").json()
    assert len(listed) == 1 and listed[0]["revoked_at"] is None  # nothing made or revoked
    assert [event["action"] for event in api.get("/keys/events").json()] == ["created"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"team": "c", "role": "owner"}, "role"),
        ({"team": "no spaces", "role": "read"}, "team"),
        ({"team": "x" * 65, "role": "read"}, "team"),
        ({"role": "read"}, "team"),
    ],
)
def test_a_bad_key_body_names_its_field(
    api: httpx.Client, body: dict[str, str], field: str
) -> None:
    answer = api.post("/keys", json=body)
    assert answer.status_code == 422
    assert [error["loc"] for error in answer.json()["detail"]] == [["body", field]]
    assert api.get("/keys").json() == []


def test_a_bad_key_id_is_a_422_naming_it(api: httpx.Client) -> None:
    for bad in ("0", "-1", "x", str(2**63)):
        answer = api.delete(f"/keys/{bad}")
        assert answer.status_code == 422, bad
        assert answer.json()["detail"][0]["loc"] == ["path", "key_id"]
