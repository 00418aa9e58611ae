"""The series catalogue: its stored forms; and it cannot fill the disk: an endpoint whose
labels change on every scrape spends its series budget and its readings are then `na` saying
so; rows no snapshot names are purged; and a process that remembers rows from before a purge
forgets them."""

import time
from datetime import timedelta
from pathlib import Path

import httpx
from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from specdec_collector.core.exposition import SeriesKey, extract_spec_decode
from specdec_collector.core.readings import SnapshotPhase, TargetReading
from specdec_collector.core.targets import parse_target
from specdec_collector.store.db import open_database, read_session, write_alone
from specdec_collector.store.migrate import upgrade_database
from specdec_collector.store.tables import EndpointSeries, utcnow
from specdec_collector.store.transaction import WriteTransaction
from specdec_collector.windows.catalogue import (
    _known,
    endpoints_over_budget,
    labels_from_text,
    labels_to_text,
    purge_catalogue,
    series_ids,
    set_series_budget,
)
from specdec_collector.windows.leases import purge_samples
from specdec_collector.windows.storage import load_window, snapshots_of, store_snapshots
from tests.support import clients
from tests.support.collector import serve_collector
from tests.support.metrics_server import serve_metrics
from tests.support.payloads import InstanceCounters, drafts_payload, vllm_payload
from tests.support.waiting import wait_for

# 6 series each: 90 a scrape, beside the 6 witnesses of the payload's own engine (96 of the
# 100 one answer may hold here).
INSTANCES = 15
CHURNED = 6 * INSTANCES


def churning(request: int, server: str = "m") -> bytes:
    """15 instances whose `model_name` is new on every scrape: 90 series never seen before
    (nor by another `server`)."""
    return vllm_payload(
        [
            InstanceCounters(10, 30, [5, 2, 1], engine=str(i), model=f"{server}-{request}")
            for i in range(INSTANCES)
        ]
    ).encode()


def _stored(api: httpx.Client, window_id: str) -> int:
    """The snapshots of the window's one target stored so far."""
    return len(api.get(f"/windows/{window_id}/samples").json()["series"][0]["points"])


def _series_in(*requests: int) -> int:
    """The series the scrapes `requests` name, together."""
    named: set[object] = set()
    for request in requests:
        named |= set(extract_spec_decode(churning(request).decode()))
    return len(named)


def _catalogue_rows(database_url: str, endpoint: str) -> int:
    """The catalogue rows `endpoint` added."""
    database = open_database(database_url)
    try:
        return _catalogue_rows_of(database, endpoint)
    finally:
        database.dispose()


def test_an_endpoint_whose_labels_change_on_every_scrape_spends_its_budget_and_is_na(
    database_url: str,
) -> None:
    """Budget: twice the series one answer may hold (100 here): 200. The first two scrapes
    (186 series) are stored; every later one is `na` saying why, and adds no row."""
    with (
        serve_metrics(body_for=churning) as server,
        serve_collector(database_url, max_series_per_target=100) as collector,
    ):
        api = clients.client(base_url=collector, timeout=60)
        body = {"targets": [server.target], "sample_interval_s": 0.5}
        assert api.post("/windows/churn/start", json=body).status_code == 201
        wait_for(lambda: _stored(api, "churn") >= 5 or None, "four samples stored")
        result = api.post("/windows/churn/stop").json()["targets"][0]["result"]
        points = api.get("/windows/churn/samples").json()["series"][0]["points"]
    assert _catalogue_rows(database_url, server.url) == _series_in(1, 2)
    assert result["status"] == "na", result
    assert "labels change on every scrape" in result["error"], result
    refused = [p for p in points if "labels change on every scrape" in (p.get("error") or "")]
    assert len(refused) >= 3


def test_an_endpoint_spends_its_budget_only_on_the_series_it_adds(database: Engine) -> None:
    """A series another endpoint added first costs nothing: the servers of a deployment show
    the same series, and only one of them adds each."""
    set_series_budget(database, 20)
    one = extract_spec_decode(churning(1).decode())  # 90 + 6 series
    shared = dict(list(one.items())[:15])
    new = dict(list(extract_spec_decode(churning(1, "other").decode()).items())[:10])
    first, second = "http://127.0.0.1:9001/metrics", "http://127.0.0.1:9002/metrics"

    def write(wanted: dict[str, set[SeriesKey]]) -> dict[str, int]:
        return write_alone(database, lambda tx: series_ids(tx.session, wanted))[1]

    assert write({first: set(shared)}) == {}
    # 25 series, 15 of them added by the first: 10 its own, within its 20.
    assert write({second: set(shared) | set(new)}) == {}
    assert _catalogue_rows_of(database, second) == 10
    # The first has 15 of its 20: 10 more would pass it.
    more = dict(list(extract_spec_decode(churning(2).decode()).items())[:10])
    assert write({first: set(more)}) == {first: 20}
    assert _catalogue_rows_of(database, first) == 15


def test_unused_catalogue_rows_are_purged_and_a_process_forgets_them(database_url: str) -> None:
    """Samples past the retention go; the rows only they named go with the purge, the rows
    of the window's ends and of an open window stay; series stored after it get new rows,
    never the ids remembered from before."""
    upgrade_database(database_url)
    database = open_database(database_url)
    try:
        with (
            serve_metrics(body_for=churning) as server,
            serve_metrics(body_for=lambda request: churning(request, "o")) as other,
            serve_collector(database_url) as collector,
        ):
            if True:
                api = clients.client(base_url=collector, timeout=60)
                for name, target in (("closed", server.target), ("open", other.target)):
                    body = {"targets": [target], "sample_interval_s": 0.5}
                    assert api.post(f"/windows/{name}/start", json=body).status_code == 201
                wait_for(
                    lambda: (_stored(api, "closed") >= 4 and _stored(api, "open") >= 4) or None,
                    "three samples of each window stored",
                )
                assert api.post("/windows/closed/stop").status_code == 200
                open_rows = _catalogue_rows(database_url, other.url)
                # This process meets the series only the closed window's first sample named.
                sampled = extract_spec_decode(churning(2).decode())
                write_alone(database, lambda tx: series_ids(tx.session, {server.url: sampled}))
                assert purge_samples(database, utcnow() + timedelta(days=1)) >= 2
                deleted = purge_catalogue(database)
                assert _catalogue_rows(database_url, other.url) >= open_rows
                assert api.post("/windows/open/stop").status_code == 200
        # The closed window keeps what its two ends name (of its first scrape and its last).
        last = server.count()
        kept = _catalogue_rows(database_url, server.url)
        assert _series_in(last) <= kept <= _series_in(1, last) + CHURNED * 2
        assert deleted >= CHURNED
        closed = load_window(database, "default", "closed")
        assert api is not None and closed.targets[0].result is not None
        # This process remembered the purged rows: after the purge it stores them anew.
        endpoint = parse_target(server.target)
        series = sampled
        reading = TargetReading(endpoint, utcnow(), series)

        def store(tx: WriteTransaction) -> None:
            store_snapshots(tx.session, {endpoint.name: closed.targets[0].id}, SnapshotPhase.SAMPLE,
                            [reading])  # fmt: skip

        write_alone(database, store)
        with Session(database) as session:
            (chain,) = snapshots_of(session, [closed.targets[0].id]).values()
            named = {int(row[0] or 0) for row in chain[-1].counters or ()}
            rows = session.execute(
                select(col(EndpointSeries.id)).where(col(EndpointSeries.id).in_(named))
            ).all()
        assert len(named) == len(series) and len(rows) == len(named)  # every one in the table
    finally:
        database.dispose()


def test_below_the_disk_headroom_no_sample_is_taken_and_windows_still_start_and_stop(
    tmp_path: Path,
) -> None:
    """A disk with less room than SPECDEC_MIN_FREE_DISK_BYTES (here: more than any disk has):
    the sampler takes no sample, the start and the stop still store their readings."""
    with (
        serve_metrics(body=drafts_payload(10)) as server,
        serve_collector(f"sqlite:///{tmp_path}/d.db", min_free_disk_bytes=1 << 62) as collector,
    ):
        api = clients.client(base_url=collector, timeout=60)
        body = {"targets": [server.target], "sample_interval_s": 0.5}
        assert api.post("/windows/full/start", json=body).status_code == 201
        server.replace(drafts_payload(30))
        time.sleep(2)  # four intervals: no sample may come
        stopped = api.post("/windows/full/stop").json()
        points = api.get("/windows/full/samples").json()["series"][0]["points"]
        skipped = api.get("/metrics").text
    assert stopped["targets"][0]["result"]["data"]["num_drafts"] == 20
    assert [p["phase"] for p in points] == ["before", "after"]
    assert "specdec_samples_skipped_total 0.0" not in skipped
    assert "specdec_samples_skipped_total" in skipped


def test_the_next_write_transaction_sees_a_purge_that_came_between(database_url: str) -> None:
    """A write transaction reads the catalogue's purge count once (`bench_statements` counts
    it): the next one sees a purge that came between, forgets what it remembered of the
    catalogue, and adds the rows anew."""
    upgrade_database(database_url)
    database = open_database(database_url)
    payload = extract_spec_decode(vllm_payload([InstanceCounters(10, 30, [5, 2, 1])]))
    endpoints = [f"http://127.0.0.1:{port}/metrics" for port in (9001, 9002, 9003)]
    try:

        def two_writes(tx: WriteTransaction) -> None:
            series_ids(tx.session, {endpoints[0]: payload})
            series_ids(tx.session, {endpoints[1]: payload})

        write_alone(database, two_writes)
        # One row a series, whichever endpoint showed it: no snapshot names them.
        assert purge_catalogue(database) == len(payload)
        ids, _ = write_alone(database, lambda tx: series_ids(tx.session, {endpoints[0]: payload}))
        # The purge was seen: the ids remembered from before it are forgotten, rows added anew.
        assert _known_purges(database) == 1
        assert _catalogue_rows(database_url, endpoints[0]) == len(payload) == len(ids)
        # A read session sees a purge too, and counts the series to add against the budget.
        assert purge_catalogue(database) == len(payload)
        with read_session(database) as session:
            assert endpoints_over_budget(session, {endpoints[2]: payload}) == {}
        assert _known_purges(database) == 2
    finally:
        database.dispose()


def _catalogue_rows_of(database: Engine, endpoint: str) -> int:
    """The catalogue rows `endpoint` added."""
    with Session(database) as session:
        return int(
            session.execute(
                select(func.count()).where(col(EndpointSeries.endpoint) == endpoint)
            ).scalar_one()
        )


def _known_purges(database: Engine) -> int:
    with Session(database) as session:
        return _known(session).purges


def test_labels_text_round_trip() -> None:
    labels = (("engine", "0"), ("model_name", 'a "b",\n{c}'), ("x", "中"))
    assert labels_from_text(labels_to_text(labels)) == labels
    assert labels_to_text(labels) == '[["engine","0"],["model_name","a \\"b\\",\\n{c}"],["x","中"]]'
