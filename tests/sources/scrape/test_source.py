"""A start checks each target once: its name resolved once, and the baseline's request sent to
the address that check found (the connection opened ahead of it), never looked up again."""

from specdec_collector.config import Settings
from specdec_collector.service.main import create_app
from tests.support import clients
from tests.support.collector import serve_in_thread
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import InstanceCounters, vllm_payload


def test_a_named_target_is_resolved_once_per_start_and_scraped_where_it_was_checked(
    database_url: str,
) -> None:
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        # Only the first answer reaches the server: a second lookup would send the baseline
        # to an address where nothing listens.
        asked.append(host)
        return ["127.0.0.1"] if len(asked) == 1 else ["127.0.0.2"]

    payload = vllm_payload(
        [InstanceCounters(drafts=9, draft_tokens=27, accepted_per_pos=[5, 3, 1])]
    )
    settings = Settings(database_url=database_url, scrape_timeout_s=2)
    with (
        serve_metrics(body=payload.encode()) as server,
        serve_in_thread(create_app(settings, resolve=resolve)) as url,
    ):
        started = clients.post(
            f"{url}/windows/once/start",
            json={"targets": [f"vllm.test:{server.port}"]},
            timeout=30,
        )
    assert started.status_code == 201, started.text
    (target,) = started.json()["targets"]
    assert target["before_error"] is None
    assert target["before"]["num_drafts"] == 9
    assert asked == ["vllm.test"]
