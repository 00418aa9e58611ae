"""Health and the collector's own metrics."""

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.metrics_server import serve_metrics
from tests.payloads import drafts_payload


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_own_metrics_count_scrapes_errors_and_open_windows(api: httpx.Client) -> None:
    with serve_metrics(body=drafts_payload(10)) as good, serve_metrics(status=500) as bad:
        api.post("/windows/m/start", json={"targets": [good.target, bad.target]})
        during = _samples(api.get("/metrics").text)
        api.post("/windows/m/stop")
        after = _samples(api.get("/metrics").text)
    assert during[("specdec_open_windows", ())] == 1
    assert after[("specdec_open_windows", ())] == 0
    assert (
        after[("specdec_scrape_errors_total", (("reason", "http_status"),))] == 2
    )  # before and after
    assert after[("specdec_scrape_duration_seconds_count", ())] == 4  # two targets, twice
    assert api.get("/healthz").json() == {"status": "ok"}
