"""Sampler leases: how long a replica holds a sampled window from its last renewal.

A lease lasts `LEASE_INTERVALS` sampling intervals, so one late run does not lose it and a
replica that died gives the window up within two intervals. The replica that starts a window
holds a first lease long enough for the baseline scrape as well.

The holder renews the lease with each sample it stores, and apart only when the lease it last
wrote has less than `RENEWAL_MARGIN_INTERVALS` left (or it does not know it): a run that starts
late renews before it scrapes, and a scrape that runs long renews as it goes, so neither loses
the lease; a run on time whose scrape is short writes once.

Below the rules, the leases' and samples' own SQL: the scan for windows to take over, the
claim, the renewal, a sampling run's store, the purge of old samples. Each is one call of the
store's (`store.store.Store.run`), in a thread.
"""

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, bindparam, delete, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import CursorResult, Engine
from sqlmodel import col, select

from specdec_collector.core.readings import SnapshotPhase, TargetReading
from specdec_collector.schemas import WindowState
from specdec_collector.store.db import read_connection, write_session
from specdec_collector.store.tables import TABLES, Snapshot, Window, WindowTarget, utcnow
from specdec_collector.windows.storage import store_snapshots, targets_of
from specdec_collector.windows.stored import StoredTarget

LEASE_INTERVALS = 1.5
"""A sampler lease lasts this many sampling intervals from its last renewal."""

RENEWAL_MARGIN_INTERVALS = 0.25
"""A lease with less than this many intervals left is renewed before it is relied on. A run
on time starts with ~0.5 interval left (the last store's 1.5, less the interval since): the
scrape gets a quarter interval before renewing, and the renewal a quarter interval to land."""


def lease_seconds(interval_s: float) -> float:
    """How long a lease renewed now holds, for a window sampled every `interval_s`."""
    return LEASE_INTERVALS * interval_s


def first_lease_seconds(interval_s: float, scrape_timeout_s: float) -> float:
    """The starting replica's first lease: the baseline scrape and then a renewal's worth."""
    return lease_seconds(interval_s) + scrape_timeout_s


def renewal_margin_s(interval_s: float) -> float:
    """The time left on a lease below which its holder renews it."""
    return RENEWAL_MARGIN_INTERVALS * interval_s


def renewal_due(lease_end: float | None, now: float, interval_s: float) -> bool:
    """Whether a lease that ends at `lease_end` (`None`: not known) is to be renewed at `now`."""
    return lease_end is None or lease_end - now < renewal_margin_s(interval_s)


_WINDOWS = TABLES["window"]

# A sampling run's writes, built once (a run writes one or two of them every interval, and
# building them is a large part of storing a sample). Each touches the window only while it is
# open (and, with an owner, while that owner holds its lease); none, and the caller drops its
# sample or gives the window up.
_OPEN = (_WINDOWS.c.id == bindparam("pk")) & (_WINDOWS.c.state == WindowState.OPEN)
_OWNED = _OPEN & (_WINDOWS.c.sampler_owner == bindparam("owner"))
_RENEW_LEASE = update(_WINDOWS).where(_OWNED).values(sampler_lease_until=bindparam("until"))
_MARK_SAMPLED = update(_WINDOWS).where(_OPEN).values(last_sampled_at=bindparam("at"))
_MARK_SAMPLED_RENEWING = (
    update(_WINDOWS)
    .where(_OWNED)
    .values(last_sampled_at=bindparam("at"), sampler_lease_until=bindparam("until"))
)


def renew_lease(database: Engine, window_pk: int, owner: str, interval_s: float) -> bool:
    """Extend `owner`'s lease of an open window; `False` if it is closed or owned by another."""
    with write_session(database) as transaction:
        # Reckoned once this writer's turn came: a wait for it does not shorten the lease.
        params = {"pk": window_pk, "owner": owner, "until": time.time() + lease_seconds(interval_s)}
        renewed: CursorResult[Any] = transaction.session.execute(_RENEW_LEASE, params)  # type: ignore[assignment]
        transaction.commit()
        return renewed.rowcount == 1


def store_samples(
    database: Engine,
    window_pk: int,
    outcomes: Sequence[TargetReading],
    ids: dict[str, int],
    owner: str | None = None,
    interval_s: float = 1.0,
) -> bool:
    """Store one sample per outcome if the window is open (and `owner` still holds its lease,
    which is renewed).

    Returns whether the samples were stored. The window row is written first: that
    serialises with a stop, so once the window is closed a late sample is dropped.
    """
    with write_session(database) as transaction:
        session = transaction.session
        params: dict[str, Any] = {"pk": window_pk, "at": utcnow()}
        mark = _MARK_SAMPLED
        if owner is not None:
            params |= {"owner": owner, "until": time.time() + lease_seconds(interval_s)}
            mark = _MARK_SAMPLED_RENEWING
        touched: CursorResult[Any] = session.execute(mark, params)  # type: ignore[assignment]
        if touched.rowcount != 1:
            transaction.rollback()
            return False
        store_snapshots(session, ids, SnapshotPhase.SAMPLE, outcomes)
        transaction.commit()
        return True


def _claimable(include_own: bool) -> ColumnElement[bool]:
    """A window whose lease nobody holds or ran out before `:now` (or, with `include_own`,
    that `:owner` held)."""
    claimable = _WINDOWS.c.sampler_owner.is_(None) | (
        _WINDOWS.c.sampler_lease_until < bindparam("now")
    )
    if include_own:
        claimable = claimable | (_WINDOWS.c.sampler_owner == bindparam("owner"))
    return claimable


# The scan's query, built once (with and without the owner's own windows): it runs four times
# a second in every replica, so building it each time would be most of an idle collector's work.
_CLAIMABLE_WINDOWS = {
    include_own: sa_select(_WINDOWS.c.id, _WINDOWS.c.team, _WINDOWS.c.sample_interval_s).where(
        _WINDOWS.c.state == WindowState.OPEN,
        _WINDOWS.c.sample_interval_s.is_not(None),
        _claimable(include_own),
    )
    for include_own in (False, True)
}


def claimable_windows(
    database: Engine, owner: str, include_own: bool = False
) -> list[tuple[int, str, float]]:
    """The sampled open windows whose lease is free or ran out (with `include_own`, also
    those `owner` held): (pk, team, interval) each. A read alone: the scan runs four times a
    second in every replica and almost always finds nothing, and on SQLite the writers' turn
    is every process's."""
    with read_connection(database) as connection:
        rows = connection.execute(
            _CLAIMABLE_WINDOWS[include_own], {"now": time.time(), "owner": owner}
        ).all()
    return [(window_pk, team, interval_s) for window_pk, team, interval_s in rows]


def claim_windows(
    database: Engine,
    owner: str,
    watched: set[int],
    include_own: bool = False,
    candidates: list[tuple[int, str, float]] | None = None,
) -> list[tuple[int, str, float, list[StoredTarget]]]:
    """Take the lease of every sampled open window that is free or expired (of `candidates`,
    as `claimable_windows` found them, if given).

    With `include_own` (at start-up), also the windows `owner` held before a restart. Windows
    in `watched` are skipped (their job runs here already). Each claim is one conditional
    update, so of two replicas claiming the same window only one wins.
    """
    if candidates is None:
        candidates = claimable_windows(database, owner, include_own)
    candidates = [candidate for candidate in candidates if candidate[0] not in watched]
    claimed: list[tuple[int, str, float, list[StoredTarget]]] = []
    if not candidates:
        return claimed
    now = time.time()
    params = {"now": now, "owner": owner}
    with write_session(database) as transaction:
        session = transaction.session
        for window_pk, team, interval_s in candidates:
            taken: CursorResult[Any] = session.execute(  # type: ignore[assignment]
                update(_WINDOWS)
                .where(_OPEN, _claimable(include_own))
                .values(sampler_owner=owner, sampler_lease_until=now + lease_seconds(interval_s)),
                params | {"pk": window_pk},
            )
            transaction.commit()
            if taken.rowcount != 1:
                continue
            claimed.append((window_pk, team, interval_s, targets_of(session, window_pk)))
    return claimed


def purge_samples(database: Engine, closed_before: datetime) -> int:
    """Delete the samples of windows closed before `closed_before`; results stay. Returns count."""
    with write_session(database) as transaction:
        old_targets = (
            select(WindowTarget.id)
            .join(Window, col(Window.id) == col(WindowTarget.window_pk))
            .where(col(Window.state) == WindowState.CLOSED, col(Window.stopped_at) < closed_before)
        )
        deleted: CursorResult[Any] = transaction.session.execute(  # type: ignore[assignment]
            delete(Snapshot).where(
                col(Snapshot.phase) == SnapshotPhase.SAMPLE,
                col(Snapshot.target_id).in_(old_targets),
            )
        )
        transaction.commit()
        return deleted.rowcount
