"""What the window calls answer: a window's view as JSON (an open one's kept for its reads),
a closed window's results (kept: they never change), and the timelines of its targets."""

from typing import TYPE_CHECKING, Any

from specdec_collector.core.arithmetic import thin_timeline, timeline
from specdec_collector.core.results import TargetResult
from specdec_collector.schemas import WindowState, WindowView
from specdec_collector.sources.protocol import CounterSource, TimelinePoint
from specdec_collector.store.tables import as_utc
from specdec_collector.windows.cache import ClosedResults
from specdec_collector.windows.reads import read_results, read_timeline
from specdec_collector.windows.storage import load_window, window_state
from specdec_collector.windows.stored import StoredTarget, StoredWindow
from specdec_collector.windows.views import read_view

if TYPE_CHECKING:
    from specdec_collector.windows.service import WindowService


def encoded_view(service: "WindowService", view: WindowView) -> bytes:
    """The view as JSON; an open window's kept for its reads."""
    encoded = view.model_dump_json().encode()
    if view.state == WindowState.OPEN:
        service.open_views.put(view.team, view.id, encoded, len(encoded))
    return encoded


async def view_json(service: "WindowService", team: str, window_id: str) -> bytes:
    """The window's public view as JSON; an open one's as this replica keeps it, once its row
    says it is still open (another replica may have closed it)."""
    kept = service.open_views.get(team, window_id)
    if kept is not None:
        if await service.store.lookup(window_state, team, window_id) == WindowState.OPEN:
            return kept
        service.open_views.drop(team, window_id)
    return encoded_view(service, await service.store.run(read_view, team, window_id))


async def closed_results(service: "WindowService", team: str, window_id: str) -> ClosedResults:
    """The results of a closed window; `WindowOpen` while it is open, `WindowNotFound`."""
    cached = service.kept_results.get(team, window_id)
    if cached is None:
        results = await service.store.run(read_results, team, window_id)
        cached = service.kept_results.put(team, window_id, results)
    return cached


def remember_results(
    service: "WindowService",
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
        chosen.append((target.name, result))
    service.kept_results.put(team, stored.window.window_id, chosen)


async def timelines(
    service: "WindowService", team: str, window_id: str, target_name: str | None, max_points: int
) -> list[tuple[str, list[dict[str, Any]], bool]]:
    """Each target's timeline (of `target_name`, or all): read live from its source while the
    window is open where the source says so (Prometheus), else from the store."""
    stored = await service.store.run(load_window, team, window_id)
    if stored.window.state == WindowState.OPEN:
        chosen = stored.targets_named(target_name)
        source: CounterSource = service.sources[stored.window.source]
        start = as_utc(stored.window.started_at)
        live = await source.read_open([t.parsed() for t in chosen], start)
        if live is not None:
            points = sum(len(timeline) for timeline in live)
            return await service.store.arrange(points, _live_rows, chosen, live, max_points)
    return await service.store.run(read_timeline, stored, target_name, max_points)


def _live_rows(
    chosen: list[StoredTarget], live: list[list[TimelinePoint]], max_points: int
) -> list[tuple[str, list[dict[str, Any]], bool]]:
    """The rows of timelines read live, thinned as stored ones are."""
    rows = []
    for target, points in zip(chosen, live, strict=True):
        kept, thinned = thin_timeline(points, max_points)
        rows.append((target.name, timeline(kept), thinned))
    return rows
