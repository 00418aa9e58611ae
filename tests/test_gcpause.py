"""Garbage collection: paused around a large piece of work, and less often in the service."""

import gc
import re
from pathlib import Path

import pytest

from specdec_collector.gcpause import uncollected
from tests.bench.farm import GROWING, run_farm
from tests.support import clients
from tests.support.collector import run_collector


def test_a_paused_call_resumes_collections_when_it_fails_and_a_nested_one_leaves_them() -> None:
    seen: list[bool] = []

    def inner() -> None:
        seen.append(gc.isenabled())

    def outer() -> None:
        seen.append(gc.isenabled())
        uncollected(inner)()
        seen.append(gc.isenabled())  # the nested call found them paused: still paused
        raise ValueError("boom")

    assert gc.isenabled()
    with pytest.raises(ValueError, match="boom"):
        uncollected(outer)()
    assert seen == [False, False, False] and gc.isenabled()


def _young_collections(base_url: str) -> float:
    text = clients.get(f"{base_url}/metrics").text
    found = re.search(r'^python_gc_collections_total\{generation="0"\} (\S+)$', text, re.M)
    assert found, "the service's /metrics has its collections"
    return float(found[1])


def test_the_service_collects_after_many_new_objects_not_every_few_hundred(tmp_path: Path) -> None:
    """Windows of 32 targets started, stopped and read make and free thousands of objects
    each: with CPython's default (a young collection per 700 more alive) they set off several
    a window (166 in 20); with the service's THRESHOLDS (50,000), fewer than one in four."""
    with (
        run_farm(32, GROWING) as targets,
        run_collector(
            f"sqlite:///{tmp_path / 'gc.db'}",
            tmp_path,
            SPECDEC_MAX_TARGET_READS_PER_SECOND_PER_TEAM="1e9",
        ) as collector,
        clients.client(base_url=collector.base_url, timeout=30) as api,
    ):
        body = {"targets": targets}
        api.post("/windows/warm/start", json=body)
        api.post("/windows/warm/stop")
        before = _young_collections(collector.base_url)
        for index in range(20):
            assert api.post(f"/windows/w{index}/start", json=body).status_code == 201
            assert api.post(f"/windows/w{index}/stop").status_code == 200
            assert api.get(f"/windows/w{index}").status_code == 200
        collections = _young_collections(collector.base_url) - before
    assert collections < 5, collections
