"""What the scrape client asks servers for."""

from prometheus_client.exposition import choose_encoder

from specdec_collector.sources.scrape import ACCEPT
from tests.support.payloads import prometheus_client_registry


def test_the_collectors_accept_gets_the_classic_text_from_prometheus_client() -> None:
    """prometheus_client answers OpenMetrics to any Accept that names it, whatever its q-value,
    with `sglang_...` sample names from 0.23 on: the collector must not name it."""
    encoder, content_type = choose_encoder(ACCEPT)
    text = encoder(prometheus_client_registry()).decode()
    assert content_type.startswith("text/plain"), content_type
    assert "sglang:spec_verify_calls_total" in text
