"""The window calls: start (with its checks) and stop, over the scrapes and the store."""

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from sqlalchemy.engine import Engine
from starlette.concurrency import run_in_threadpool

from specdec_collector.config import Settings
from specdec_collector.core.arithmetic import Reading, timeline
from specdec_collector.core.exposition import Series
from specdec_collector.core.results import TargetResult
from specdec_collector.core.safetext import has_control_characters, safe_error_text
from specdec_collector.core.targets import Target
from specdec_collector.exceptions import InvalidInput, WindowConflict
from specdec_collector.schemas import Source, WindowCreate, WindowPublic, WindowState
from specdec_collector.sources.prometheus import PrometheusRead, PrometheusSource, SourceError
from specdec_collector.sources.scrape import (
    Allowed,
    ScrapeClient,
    ScrapeConfig,
    ScrapeOutcome,
    refusals,
    scrape_all,
)
from specdec_collector.store.lanes import NO_YIELD_S, STOP_MAY_YIELD_S, Lane
from specdec_collector.store.tables import as_utc, utcnow
from specdec_collector.windows.cache import ClosedResults, OpenViews, ResultsCache
from specdec_collector.windows.closing import add_close, prepare_close
from specdec_collector.windows.leases import first_lease_seconds
from specdec_collector.windows.reads import read_results
from specdec_collector.windows.storage import (
    add_baseline,
    add_earlier_snapshots,
    add_window,
    load_window,
    window_state,
)
from specdec_collector.windows.stored import Actor, SamplerHandle, StoredTarget, StoredWindow
from specdec_collector.windows.views import read_window, view_from

logger = logging.getLogger(__name__)


def _same_targets(stored: StoredWindow, targets: Sequence[Target]) -> bool:
    return {(t.key, t.url) for t in stored.targets} == {(t.key, t.url) for t in targets}


@dataclass(frozen=True, slots=True)
class WindowService:
    """What the window calls need, owned by the app's lifespan."""

    engine: Engine
    client: httpx.AsyncClient
    scrape: ScrapeConfig
    sampler: SamplerHandle
    settings: Settings
    results: ResultsCache
    # The writes of starts and stops, a start's first, and the stops' results, one at a time
    # on SQLite (see `store.lanes`).
    writes: Lane
    computations: Lane
    open_views: OpenViews
    # The deployment's Prometheus, when SPECDEC_PROMETHEUS_URL names one.
    prometheus: PrometheusSource | None = None


async def _check_body(
    service: WindowService,
    body: WindowCreate,
    targets: Sequence[Target],
    allowed: Allowed | None = None,
) -> None:
    """`InvalidInput` naming the field if the body breaks a limit or names a refused target;
    `allowed` is told where the scrape of each target not refused connects."""
    settings = service.settings
    if len(targets) > settings.max_targets_per_window:
        raise InvalidInput(
            ["body", "targets"],
            f"{len(targets)} targets; a window has at most {settings.max_targets_per_window} "
            "(SPECDEC_MAX_TARGETS_PER_WINDOW)",
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
    if body.source == Source.PROMETHEUS:
        _check_prometheus_body(service, body)
        return
    if body.at is not None:
        raise InvalidInput(
            ["body", "at"], "only a window read from Prometheus (source prometheus) may start in "
            "the past: a scraped window starts now"
        )  # fmt: skip
    for index, target in enumerate(targets):
        if target.selector is not None:
            raise InvalidInput(
                ["body", "targets", index], "a selector names a target of a window read from "
                "Prometheus (source prometheus)"
            )  # fmt: skip
    for index, reason in enumerate(await refusals(targets, service.scrape, allowed)):
        if reason is not None:
            raise InvalidInput(
                ["body", "targets", index],
                f"target {index} ({targets[index].key}) is refused: {reason}",
            )


#: How long a start waits for the connections it opens ahead before it writes its window: long
#: enough to open them on a LAN, not to wait for a server that does not answer (its scrape
#: waits for it, within its own timeout).
CONNECT_AHEAD_WAIT_S = 0.05


def _connecting_ahead(
    service: WindowService, openings: "list[asyncio.Task[None]]"
) -> Allowed | None:
    """Start opening the connections of the start's scrapes as its targets are checked (into
    `openings`), so the scrapes of servers new to the collector go out at once after the
    window is written. A connection is opened once, and nothing is asked of the server: a
    start that is refused, or a retry, sends no request (see `AiohttpTransport.connect_ahead`)."""
    client = service.client
    if not isinstance(client, ScrapeClient):
        return None
    timeout_s = service.scrape.timeout_s

    def allowed(url: str, extensions: dict[str, Any]) -> None:
        opening = client.connect_ahead(url, extensions, timeout_s)
        if opening is not None:
            openings.append(opening)

    return allowed


# How far in the future a client's clock may put `at` (clocks drift).
CLOCK_SLACK_S = 5.0


def _check_prometheus_body(service: WindowService, body: WindowCreate) -> None:
    if service.prometheus is None:
        raise InvalidInput(
            ["body", "source"], "this collector reads no Prometheus (SPECDEC_PROMETHEUS_URL)"
        )
    if body.sample_interval_s is not None:
        raise InvalidInput(
            ["body", "sample_interval_s"],
            "a window read from Prometheus has Prometheus' own samples: no sampling",
        )
    _check_at(body.at, ["body", "at"])


def _check_at(at: datetime | None, loc: list[str | int]) -> None:
    if at is not None and (at - utcnow()).total_seconds() > CLOCK_SLACK_S:
        raise InvalidInput(loc, "at is in the future")


async def start_window(
    service: WindowService, actor: Actor, window_id: str, body: WindowCreate
) -> tuple[bool, bytes]:
    """Create the window, store every target's baseline, start sampling; `True` if created,
    and the window's view as JSON.

    A start of an existing open window with the same targets is a retry: it returns the
    window unchanged and scrapes nothing.
    """
    engine = service.engine
    targets = body.parsed_targets()
    openings: list[asyncio.Task[None]] = []
    await _check_body(service, body, targets, _connecting_ahead(service, openings))
    if openings:
        # Their connections open before the window is written, not meanwhile: the write, in a
        # thread, would take turns with them for the interpreter's lock (slowing both).
        await asyncio.wait(openings, timeout=CONNECT_AHEAD_WAIT_S)
    max_open = service.settings.max_open_windows_per_team
    inserted = await service.writes.write(
        NO_YIELD_S,
        add_window,
        actor,
        window_id,
        body,
        targets,
        max_open,
        service.sampler.replica_id,
        # Long enough for the baseline scrape and the first sample: nobody takes it meanwhile.
        first_lease_seconds(body.sample_interval_s or 0, service.scrape.timeout_s),
        service.settings.max_scrapes_per_second_per_team,
        body.at,
    )
    if inserted is None:
        stored = await run_in_threadpool(load_window, engine, actor.team, window_id)
        if stored.window.state != WindowState.OPEN:
            raise WindowConflict(f"window {window_id} is already stopped")
        if not _same_targets(stored, targets):
            known = ", ".join(t.key for t in stored.targets)
            raise WindowConflict(f"window {window_id} already exists with other targets: {known}")
        return False, await window_json(service, actor.team, window_id)
    stored = inserted
    if body.source == Source.PROMETHEUS:  # nothing to scrape: Prometheus is read at the stop
        logger.info("window %s/%s started by %s from Prometheus: %d targets",
                    actor.team, window_id, actor.key, len(targets))  # fmt: skip
        return True, _encoded(service, view_from(stored, {}))
    outcomes = await scrape_all(service.client, targets, service.scrape, actor.team)
    await service.writes.write(NO_YIELD_S, add_baseline, stored, outcomes)
    baselines: dict[int, Reading] = {
        target.id: outcome.series if outcome.series is not None else outcome.error or ""
        for target, outcome in zip(stored.targets, outcomes, strict=True)
    }
    if body.sample_interval_s is not None:
        service.sampler.watch(stored.pk, actor.team, stored.targets, body.sample_interval_s)
    failed = sum(outcome.error is not None for outcome in outcomes)
    logger.info(
        "window %s/%s started by %s: %d targets, %d failed",
        actor.team, window_id, actor.key, len(targets), failed,
    )  # fmt: skip
    return True, _encoded(service, view_from(stored, baselines))


def _encoded(service: WindowService, view: WindowPublic) -> bytes:
    """The view as JSON; an open window's kept for its reads."""
    encoded = view.model_dump_json().encode()
    if view.state == WindowState.OPEN:
        service.open_views.put(view.team, view.id, encoded, len(encoded))
    return encoded


async def window_json(service: WindowService, team: str, window_id: str) -> bytes:
    """The window's public view as JSON; an open one's as this replica keeps it, once its row
    says it is still open (another replica may have closed it)."""
    kept = service.open_views.get(team, window_id)
    if kept is not None:
        if (
            await run_in_threadpool(window_state, service.engine, team, window_id)
            == WindowState.OPEN
        ):
            return kept
        service.open_views.drop(team, window_id)
    return _encoded(service, await run_in_threadpool(read_window, service.engine, team, window_id))


async def closed_results(service: WindowService, team: str, window_id: str) -> ClosedResults:
    """The results of a closed window; `WindowOpen` while it is open, `WindowNotFound`."""
    cached = service.results.get(team, window_id)
    if cached is None:
        results = await run_in_threadpool(read_results, service.engine, team, window_id)
        cached = service.results.put(team, window_id, results)
    return cached


FORCE_CLOSED = "Window force-closed by an admin: no final scrape was taken"


def _remember_results(
    service: WindowService,
    team: str,
    stored: StoredWindow,
    results: dict[int, TargetResult | None],
) -> None:
    """Keep the results a stop just stored: the report or results a client reads next are
    then served without reading them back (and validating them) from the database."""
    chosen: list[tuple[str, TargetResult]] = []
    for target in stored.targets:
        result = results.get(target.id)
        if result is None:
            return  # read from the database when asked, which says why
        chosen.append((target.key, result))
    service.results.put(team, stored.window.window_id, chosen)


async def stop_window(
    service: WindowService,
    actor: Actor,
    window_id: str,
    *,
    force: bool = False,
    at: datetime | None = None,
) -> WindowPublic:
    """Stop sampling, take the final scrape, store every target's result, close the window.

    A stop of a closed window returns the stored results and scrapes nothing. `force` (an
    admin's force-close) closes without scraping: every target's result is `na`, saying so.
    """
    engine = service.engine
    stored = await run_in_threadpool(load_window, engine, actor.team, window_id)
    if stored.window.state == WindowState.CLOSED:
        return await run_in_threadpool(read_window, engine, actor.team, window_id)
    # Memory only: every use of a kept view first reads whether the window is still open.
    service.open_views.drop(actor.team, window_id)
    if at is not None and stored.window.source != Source.PROMETHEUS:
        raise InvalidInput(
            ["body", "at"], "only a window read from Prometheus may stop in the past"
        )
    if stored.window.source == Source.PROMETHEUS and not force:
        _check_at(at, ["body", "at"])
        return await _stop_from_prometheus(service, actor, stored, at)
    service.sampler.unwatch(stored.pk)
    targets = [t.parsed() for t in stored.targets]
    if force:
        outcomes = [ScrapeOutcome(target, utcnow(), error=FORCE_CLOSED) for target in targets]
    else:
        outcomes = await scrape_all(service.client, targets, service.scrape, actor.team)
    prepared = await service.computations.run(NO_YIELD_S, prepare_close, engine, stored, outcomes)
    closed = await service.writes.write(STOP_MAY_YIELD_S, add_close, stored, actor, prepared)
    if closed is None:  # another stop came first: its results are the ones stored
        return await run_in_threadpool(read_window, engine, actor.team, window_id)
    _remember_results(service, actor.team, stored, closed.results)
    window = view_from(stored, closed.baselines, closed.results)
    ok = sum(t.result is not None and t.result.ok for t in window.targets)
    logger.info(
        "window %s/%s %s by %s: %d of %d targets ok",
        actor.team, window_id, "force-closed" if force else "stopped", actor.key, ok,
        len(window.targets),
    )  # fmt: skip
    return window


async def _stop_from_prometheus(
    service: WindowService, actor: Actor, stored: StoredWindow, at: datetime | None
) -> WindowPublic:
    """Read every target's samples of the window from Prometheus, store them as a scraped
    window would have stored them, and close it with their results."""
    assert service.prometheus is not None, "a window read from Prometheus needs one"
    source = service.prometheus
    start, end = as_utc(stored.window.started_at), at or utcnow()
    if end < start:
        raise InvalidInput(["body", "at"], "the stop is before the window's start")
    targets = [t.parsed() for t in stored.targets]
    selectors = [target.selector or "" for target in targets]
    readings = await source.read_many(selectors, start, end, wait=at is None)
    befores, samples, afters, notes = [], [], [], {}
    for stored_target, target, reading in zip(stored.targets, targets, readings, strict=True):
        try:
            chain = _chain(reading, start)
        except SourceError as exc:
            befores.append(ScrapeOutcome(target, start, error=str(exc)))
            afters.append(ScrapeOutcome(target, end, error=str(exc)))
            continue
        (began, before), (ended, after) = chain[0], chain[-1]
        befores.append(ScrapeOutcome(target, began, series=before))
        samples += [ScrapeOutcome(target, when, series=series) for when, series in chain[1:-1]]
        afters.append(ScrapeOutcome(target, ended, series=after))
        if isinstance(reading, PrometheusRead) and reading.note:
            notes[stored_target.id] = [reading.note]
    engine = service.engine
    writes = service.writes
    await writes.write(STOP_MAY_YIELD_S, add_earlier_snapshots, stored, befores, samples)
    prepared = await service.computations.run(
        NO_YIELD_S, prepare_close, engine, stored, afters, end, notes
    )
    closed = await writes.write(STOP_MAY_YIELD_S, add_close, stored, actor, prepared)
    if closed is None:
        return await run_in_threadpool(read_window, engine, actor.team, stored.window.window_id)
    _remember_results(service, actor.team, stored, closed.results)
    return view_from(stored, closed.baselines, closed.results)


def _chain(reading: PrometheusRead | str, start: datetime) -> list[tuple[datetime, Series]]:
    """A target's scrapes from its baseline on, as Prometheus holds them; `SourceError` with
    the reason where there are none."""
    if isinstance(reading, str):
        raise SourceError(reading)
    return reading.snapshots.since(start).points


async def live_timeline(
    service: WindowService, stored: StoredWindow, target_key: str | None
) -> list[tuple[str, list[dict[str, Any]]]]:
    """The timelines of an open window read from Prometheus, from Prometheus' samples so far
    (its first point is the baseline)."""
    assert service.prometheus is not None, "a window read from Prometheus needs one"
    source, start, now = service.prometheus, as_utc(stored.window.started_at), utcnow()
    chosen = stored.targets_named(target_key)
    selectors = [target.parsed().selector or "" for target in chosen]
    reads = await source.read_many(selectors, start, now, wait=False)

    def one(target: StoredTarget, read: PrometheusRead | str) -> tuple[str, list[dict[str, Any]]]:
        try:
            chain = _chain(read, start)
        except SourceError as exc:
            return target.key, timeline([(now, "before", str(exc))])
        phases = ["before", *["sample"] * (len(chain) - 1)]
        return target.key, timeline(
            [(when, phase, series) for phase, (when, series) in zip(phases, chain, strict=True)]
        )

    return [one(target, read) for target, read in zip(chosen, reads, strict=True)]
