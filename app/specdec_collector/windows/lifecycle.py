"""The window calls: start (with its checks) and stop, over the sources and the store.

Each window's source (`sources.protocol.CounterSource`) is picked by the window's `source`;
nothing here asks which one it is.
"""

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from specdec_collector.core.readings import Failure, FailureKind, Reading, TargetReading
from specdec_collector.core.results import TargetResult
from specdec_collector.core.safetext import has_control_characters, safe_error_text
from specdec_collector.core.targets import Target
from specdec_collector.exceptions import InvalidInput, WindowConflict
from specdec_collector.schemas import WindowCreate, WindowState, WindowView
from specdec_collector.sources.protocol import Chain, StartCheck
from specdec_collector.store.store import Cost
from specdec_collector.store.tables import TABLES, as_utc, utcnow
from specdec_collector.windows.answers import encoded_view, remember_results, view_json
from specdec_collector.windows.closing import add_close, prepare_close
from specdec_collector.windows.leases import first_lease_seconds
from specdec_collector.windows.storage import add_baseline, add_window, load_window
from specdec_collector.windows.stored import Actor, StoredWindow
from specdec_collector.windows.views import read_view, view_from

if TYPE_CHECKING:
    from specdec_collector.windows.service import WindowService

logger = logging.getLogger(__name__)


async def _view(
    service: "WindowService",
    stored: StoredWindow,
    baselines: dict[int, Reading],
    results: dict[int, TargetResult | None] | None = None,
) -> WindowView:
    """The window's view, built where the store says one of its baselines' size is."""
    series = sum(len(r) for r in baselines.values() if not isinstance(r, Failure))
    return await service.store.arrange(series, view_from, stored, baselines, results)


def _stop_cost(stored: StoredWindow, chains: Sequence[Chain]) -> Cost:
    """What a stop's results are computed over: a baseline each (stored or read), its samples
    and the stop's own readings; not known for a sampled window, whose stored samples are as
    many as it was long."""
    if stored.window.sample_interval_s is not None:
        return Cost(readings=None)
    return Cost(readings=sum(2 + len(chain.samples) for chain in chains))


def _same_targets(stored: StoredWindow, targets: Sequence[Target]) -> bool:
    return {(t.name, t.url) for t in stored.targets} == {(t.name, t.url) for t in targets}


#: The longest target URL and `host:port` stored: their columns' lengths.
MAX_URL_CHARS: int = TABLES["window_target"].c.url.type.length  # type: ignore[attr-defined]
MAX_NAME_CHARS: int = TABLES["window_target"].c.target.type.length  # type: ignore[attr-defined]


def _check_body(service: "WindowService", body: WindowCreate, targets: Sequence[Target]) -> None:
    """`InvalidInput` naming the field if the body breaks a limit of every window."""
    settings = service.settings
    if len(targets) > settings.max_targets_per_window:
        raise InvalidInput(
            ["body", "targets"],
            f"{len(targets)} targets; a window has at most {settings.max_targets_per_window} "
            "(SPECDEC_MAX_TARGETS_PER_WINDOW)",
        )
    for index, target in enumerate(targets):
        # As normalised (`127.1` is `127.0.0.1`, `:80` is added): what is stored, within its
        # column; PostgreSQL would refuse a longer one, and the answer would be a 500.
        if len(target.url) > MAX_URL_CHARS or len(target.name) > MAX_NAME_CHARS:
            raise InvalidInput(
                ["body", "targets", index],
                f"target {index} is longer than a target may be once normalised "
                f"({MAX_NAME_CHARS} characters of host:port, {MAX_URL_CHARS} of URL)",
            )
    if len(body.labels) > settings.max_labels_per_window:
        raise InvalidInput(
            ["body", "labels"],
            f"{len(body.labels)} labels; a window has at most {settings.max_labels_per_window}",
        )
    for name, value in body.labels.items():
        if (
            not name
            or len(name) > settings.max_label_chars
            or len(value) > settings.max_label_chars
            or has_control_characters(name + value)
        ):
            raise InvalidInput(
                ["body", "labels", safe_error_text(name[: settings.max_label_chars])],
                f"label names and values are 1-{settings.max_label_chars} characters, "
                "without control characters",
            )


#: How long a start waits for the connections its source opens ahead before it writes its
#: window: long enough to open them on a LAN, not to wait for a server that does not answer
#: (its reading waits for it, within its own timeout).
CONNECT_AHEAD_WAIT_S = 0.05


async def start_window(
    service: "WindowService", actor: Actor, window_id: str, body: WindowCreate
) -> tuple[bool, bytes]:
    """Create the window, store every target's baseline, start sampling; `True` if created,
    and the window's view as JSON.

    A start of an existing open window with the same targets is a retry: it returns the
    window unchanged and scrapes nothing.
    """
    source = service.sources[body.source]
    targets = source.targets(body.parsed_targets())
    _check_body(service, body, targets)
    service.read_budget.start(actor.team, len(targets))
    check = StartCheck(body, targets, actor.team)
    read_start = await source.check_start(check)
    openings = check.openings
    if openings:
        # Their connections open before the window is written, not meanwhile: the write, in a
        # thread, would take turns with them for the interpreter's lock (slowing both).
        await asyncio.wait(openings, timeout=CONNECT_AHEAD_WAIT_S)
    max_open = service.settings.max_open_windows_per_team
    inserted = await service.store.write(
        ("team", actor.team),
        add_window,
        actor,
        window_id,
        body,
        targets,
        max_open,
        service.sampler.replica_id,
        # Long enough for the baseline scrape and the first sample: nobody takes it meanwhile.
        first_lease_seconds(body.sample_interval_s or 0, service.settings.scrape_timeout_s),
        service.settings.max_scrapes_per_second_per_team,
        body.at,
    )
    if inserted is None:
        stored = await service.store.lookup(load_window, actor.team, window_id)
        if stored.window.state != WindowState.OPEN:
            raise WindowConflict(f"window {window_id} is already stopped")
        if not _same_targets(stored, targets):
            known = ", ".join(t.name for t in stored.targets)
            raise WindowConflict(f"window {window_id} already exists with other targets: {known}")
        return False, await view_json(service, actor.team, window_id)
    stored = inserted
    readings = await read_start()
    baselines: dict[int, Reading] = {}
    if readings is not None:
        await service.store.write(("window", stored.pk), add_baseline, stored, readings)
        baselines = {
            target.id: reading.reading
            for target, reading in zip(stored.targets, readings, strict=True)
        }
    if body.sample_interval_s is not None:
        service.sampler.watch(stored.pk, actor.team, stored.targets, body.sample_interval_s)
    failed = sum(isinstance(reading, Failure) for reading in baselines.values())
    logger.info(
        "window %s/%s started by %s from %s: %d targets, %d failed",
        actor.team,
        window_id,
        actor.key,
        body.source,
        len(targets),
        failed,
    )
    return True, encoded_view(service, await _view(service, stored, baselines))


FORCE_CLOSED = Failure(
    FailureKind.FORCE_CLOSED, "Window force-closed by an admin: no final scrape was taken"
)


async def stop_window(
    service: "WindowService",
    actor: Actor,
    window_id: str,
    *,
    force: bool = False,
    at: datetime | None = None,
) -> WindowView:
    """Stop sampling, take the final scrape, store every target's result, close the window.

    A stop of a closed window returns the stored results and scrapes nothing. `force` (an
    admin's force-close) closes without scraping: every target's result is `na`, saying so.
    """
    store = service.store
    stored = await store.lookup(load_window, actor.team, window_id)
    if stored.window.state == WindowState.CLOSED:
        return await store.run(read_view, actor.team, window_id)
    # Memory only: every use of a kept view first reads whether the window is still open.
    service.open_views.drop(actor.team, window_id)
    source = service.sources[stored.window.source]
    source.check_stop(at)
    service.sampler.unwatch(stored.pk)
    targets = [t.parsed() for t in stored.targets]
    stopped_at = at or utcnow()
    if force:
        chains = [Chain(TargetReading(target, stopped_at, FORCE_CLOSED)) for target in targets]
    else:
        service.read_budget.stop(actor.team, len(targets))
        start = as_utc(stored.window.started_at)
        chains = await source.read_stop(targets, start, stopped_at, actor.team, at is not None)
    cost = _stop_cost(stored, chains)
    prepared = await store.compute(cost, prepare_close, stored, chains, stopped_at)
    key = ("window", stored.pk)
    at_once = service.settings.stop_write_at_once
    closed = await store.write_after(cost, key, add_close, stored, actor, prepared, at_once)
    if closed is None:  # another stop came first: its results are the ones stored
        return await store.run(read_view, actor.team, window_id)
    remember_results(service, actor.team, stored, closed.results)
    window = await _view(service, stored, closed.baselines, closed.results)
    ok = sum(t.result is not None and t.result.ok for t in window.targets)
    logger.info(
        "window %s/%s %s by %s: %d of %d targets ok",
        actor.team,
        window_id,
        "force-closed" if force else "stopped",
        actor.key,
        ok,
        len(window.targets),
    )
    return window
