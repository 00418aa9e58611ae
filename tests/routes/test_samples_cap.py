"""`/samples` of a long window is capped: both ends, every restart and evenly spaced others,
and the counts of the last row are still the window's."""

import gzip
import json
import time
from datetime import timedelta

from specdec_collector.core.exposition import extract_spec_decode
from specdec_collector.core.readings import SnapshotPhase, TargetReading
from specdec_collector.core.targets import parse_target
from specdec_collector.store.db import open_database, write_alone
from specdec_collector.store.tables import utcnow
from specdec_collector.store.transaction import WriteTransaction
from specdec_collector.windows.storage import load_window, store_snapshots
from tests.support import clients
from tests.support.collector import serve_collector
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import drafts_payload

SAMPLES = 3000
RESTART_AT = 1700


def test_a_long_timeline_keeps_its_ends_and_restarts_within_max_points(database_url: str) -> None:
    with (
        serve_metrics(body=drafts_payload(10)) as server,
        serve_collector(database_url) as collector,
    ):
        api = clients.client(base_url=collector, timeout=60)
        assert api.post("/windows/long/start", json={"targets": [server.target]}).is_success
        database = open_database(database_url)
        stored = load_window(database, "default", "long")
        target = parse_target(server.target)
        began = utcnow()
        # Drafts grow by 10 a sample; the engine restarts once (its counts fall to 8).
        counts = [
            10 + 10 * (i + 1) if i < RESTART_AT else 8 + 10 * (i - RESTART_AT)
            for i in range(SAMPLES)
        ]
        readings = [
            TargetReading(
                target,
                began + timedelta(microseconds=i + 1),  # all before the stop
                extract_spec_decode(drafts_payload(count).decode()),
            )
            for i, count in enumerate(counts)
        ]

        def add(tx: WriteTransaction) -> None:
            ids = {target.name: stored.targets[0].id}
            store_snapshots(tx.session, ids, SnapshotPhase.SAMPLE, readings)

        write_alone(database, add)
        database.dispose()
        server.replace(drafts_payload(counts[-1] + 10))
        result = api.post("/windows/long/stop").json()["targets"][0]["result"]
        (series,) = api.get("/windows/long/samples", params={"max_points": 100}).json()["series"]
        (full,) = api.get("/windows/long/samples", params={"max_points": 100_000}).json()["series"]
    points = series["points"]
    assert series["thinned"] is True and len(points) <= 102
    assert points[0]["phase"] == "before" and points[-1]["phase"] == "after"
    assert sum(p["restarts"] or 0 for p in points) == 1
    assert (
        points[-1]["num_drafts"] == result["data"]["num_drafts"] == full["points"][-1]["num_drafts"]
    )
    assert full["thinned"] is False and len(full["points"]) == SAMPLES + 2


def test_a_live_view_gets_only_the_newer_samples_compressed(database_url: str) -> None:
    """`after` answers the points taken after it, each with the figures of the interval before
    it (as in the whole series); a large answer comes gzip-compressed when asked for."""
    with (
        serve_metrics(body=drafts_payload(10)) as server,
        serve_collector(database_url) as collector,
    ):
        api = clients.client(base_url=collector, timeout=60)
        body = {"targets": [server.target], "sample_interval_s": 0.5}
        assert api.post("/windows/live/start", json=body).is_success
        for drafts in range(20, 200, 20):
            server.replace(drafts_payload(drafts))
            time.sleep(0.6)
        (whole,) = api.get("/windows/live/samples").json()["series"]
        points = whole["points"]
        assert len(points) >= 6
        cut = points[3]["taken_at"]
        newer = api.get("/windows/live/samples", params={"after": cut})
        assert newer.headers.get("content-encoding") in (None, "gzip")
        (tail,) = newer.json()["series"]
        # The window is still sampled: the later read may hold a sample the first had not.
        assert tail["points"][: len(points) - 4] == points[4:]
        assert len(tail["points"]) >= len(points) - 4
        # Compressed on request: smaller on the wire, the same JSON.
        sent = api.send(api.build_request("GET", "/windows/live/samples",
                                          headers={"Accept-Encoding": "gzip"}), stream=True)  # fmt: skip
        wire = b"".join(sent.iter_raw())
        sent.close()
        assert (
            sent.headers["content-encoding"] == "gzip" and sent.headers["vary"] == "Accept-Encoding"
        )
        unpacked = json.loads(gzip.decompress(wire))
        assert unpacked["series"][0]["points"][: len(points)] == points
        assert len(wire) * 3 < len(gzip.decompress(wire))
        plain = api.get("/windows/live/samples", headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers
        bad = api.get("/windows/live/samples", params={"after": "yesterday"})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "after"]
        naive = api.get("/windows/live/samples", params={"after": "2026-01-01T00:00:00"})
        assert naive.status_code == 422
        api.post("/windows/live/stop")
