"""Each endpoint's extraction cache: its own, within one bound for the process."""

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from specdec_collector.core import exposition
from specdec_collector.core.exposition import ExtractionLimits, extract_spec_decode
from specdec_collector.sources.scrape.caches import EndpointCaches
from tests.support.payloads import InstanceCounters, vllm_payload

LIMITS = ExtractionLimits()
STEADY = vllm_payload([InstanceCounters(10, 30, [8, 6, 4])])


def _churning(step: int) -> str:
    """A payload whose every series has labels it never had before."""
    return "".join(
        f'vllm:spec_decode_num_drafts_total{{engine="{step}",pod="{pod}"}} 4\n' for pod in range(8)
    )


def test_a_target_whose_labels_churn_flushes_its_own_cache_only() -> None:
    caches = EndpointCaches()
    caches.extract("steady", STEADY, LIMITS)
    held = caches.entries
    assert held > 0
    for step in range(200):
        text = _churning(step)
        assert caches.extract("churning", text, LIMITS) == extract_spec_decode(text)
        # The churning endpoint's own entries stay within what its flush allows.
        assert caches.entries - held <= 3 * (2 * 8 + 64 + 1)
    assert len(caches) == 2
    assert caches.extract("steady", STEADY, LIMITS) == extract_spec_decode(STEADY)
    assert caches.entries - held <= 3 * (2 * 8 + 64 + 1)  # the steady one's as they were


def test_the_endpoints_scraped_least_lately_are_forgotten_beyond_the_bound() -> None:
    # A few endpoints' lines, series and label sets (each starts with the last one's series
    # and label sets, flushed once past twice its own and a slack).
    bound = 1000
    caches = EndpointCaches(max_entries=bound)
    for endpoint in range(20):
        caches.extract(endpoint, _churning(endpoint), LIMITS)
        assert caches.entries <= bound
    kept = len(caches)
    assert 1 < kept < 20
    caches.extract(19, _churning(19), LIMITS)  # the latest: kept
    caches.extract("new", _churning(99), LIMITS)
    assert caches.entries <= bound and len(caches) <= kept + 1


def test_a_new_endpoint_starts_knowing_the_series_of_the_last_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fleet's servers share their series (not their values): a server's first scrape
    splits each value off instead of parsing each line whole, and reads what a parse reads."""
    parsed: list[str] = []
    whole = exposition._parsed_sample

    def counted(line: str, *args: Any) -> Any:
        parsed.append(line)
        return whole(line, *args)

    monkeypatch.setattr(exposition, "_parsed_sample", counted)
    other = vllm_payload([InstanceCounters(11, 33, [9, 7, 5])])  # the same series, new values
    renamed = other.replace('engine="0"', 'engine="1"')  # series no server had before
    expected = [extract_spec_decode(text) for text in (other, renamed)]
    caches = EndpointCaches()
    parsed.clear()
    caches.extract("a", STEADY, LIMITS)
    assert parsed  # the first server: every line parsed whole
    parsed.clear()
    assert caches.extract("b", other, LIMITS) == expected[0]
    assert parsed == []
    assert caches.extract("c", renamed, LIMITS) == expected[1]
    assert parsed


def test_one_endpoint_read_from_many_threads_at_once_reads_right() -> None:
    caches = EndpointCaches()
    payloads = [vllm_payload([InstanceCounters(10 + i, 30 + 3 * i, [8, 6, 4])]) for i in range(64)]
    with ThreadPoolExecutor(8) as pool:
        read = list(pool.map(lambda text: caches.extract("one", text, LIMITS), payloads * 4))
    assert read == [extract_spec_decode(text) for text in payloads * 4]
    assert len(caches) == 1
