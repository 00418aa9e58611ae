"""The windows facade: every call the routes make, and the only thing they call.

It holds what the window calls need (the lifespan builds it once): their database work goes
through the store (`store.store.Store`, which decides where it runs); scraping runs on the
event loop.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from specdec_collector.config import Settings
from specdec_collector.core.results import TargetResult
from specdec_collector.schemas import Source, WindowCreate, WindowSummary, WindowView
from specdec_collector.sources.protocol import CounterSource
from specdec_collector.store.store import Store
from specdec_collector.telemetry import aggregates_text, window_results_text
from specdec_collector.windows import answers, lifecycle
from specdec_collector.windows.budget import ReadBudget
from specdec_collector.windows.cache import ClosedResults, OpenViews, ResultsCache
from specdec_collector.windows.listing import WindowFilter, list_windows
from specdec_collector.windows.reads import read_bounded_results, read_comparison
from specdec_collector.windows.stored import Actor, SamplerHandle


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowService:
    """What the window calls need, owned by the app's lifespan, and the calls themselves."""

    # Where database work runs (`store.store`): the only way window calls touch it.
    store: Store
    # Where each window's counters come from, by its `source`.
    sources: Mapping[Source, CounterSource]
    sampler: SamplerHandle
    settings: Settings
    kept_results: ResultsCache
    open_views: OpenViews
    # The targets a team's starts and stops may read per second.
    read_budget: ReadBudget

    async def start(self, actor: Actor, window_id: str, body: WindowCreate) -> tuple[bool, bytes]:
        """Start the window: `True` if it was created (not a retry), and its view as JSON."""
        return await lifecycle.start_window(self, actor, window_id, body)

    async def stop(self, actor: Actor, window_id: str, at: datetime | None = None) -> WindowView:
        """Stop the window and store every target's result (a retry returns them again)."""
        return await lifecycle.stop_window(self, actor, window_id, at=at)

    async def force_close(self, actor: Actor, window_id: str) -> WindowView:
        """Close the window at once without a final reading: every result `na`, saying so."""
        return await lifecycle.stop_window(self, actor, window_id, force=True)

    async def view(self, team: str, window_id: str) -> bytes:
        """The window's public view, as JSON."""
        return await answers.view_json(self, team, window_id)

    async def results(self, team: str, window_id: str) -> ClosedResults:
        """The results of a closed window."""
        return await answers.closed_results(self, team, window_id)

    async def bounded_results(
        self, team: str, window_id: str, start: datetime, end: datetime
    ) -> list[tuple[str, TargetResult]]:
        """Every target's result over the part of a closed window that encloses start..end."""
        return await self.store.run(read_bounded_results, team, window_id, start, end)

    async def timelines(
        self, team: str, window_id: str, target_name: str | None, max_points: int
    ) -> list[tuple[str, list[dict[str, Any]], bool]]:
        """Every target's snapshots over time (of `target_name`, or all), at most about
        `max_points` each, and whether some were left out."""
        return await answers.timelines(self, team, window_id, target_name, max_points)

    async def page(
        self,
        team: str,
        limit: int,
        where: WindowFilter,
        *,
        oldest_first: bool,
        cursor: str | None,
    ) -> tuple[list[WindowSummary], str | None]:
        """One page of the team's windows, and the cursor of the next."""
        return await self.store.run(
            list_windows, team, limit, where, oldest_first=oldest_first, cursor=cursor
        )

    async def metrics_text(self, *, with_results: bool, team: str | None = None) -> bytes:
        """The collector's own metrics as Prometheus text; `with_results`, also the latest
        closed windows' results of `team` (None: of every team)."""
        # Some gauges read the database: off the event loop.
        body = await self.store.run(aggregates_text)
        if with_results:
            latest = self.settings.metrics_latest_windows
            body += await self.store.run(window_results_text, latest, team)
        return body

    async def compare(self, team: str, window_ids: Sequence[str]) -> dict[str, Any]:
        """The windows side by side per target."""
        return await self.store.run(read_comparison, team, window_ids)


__all__ = ["WindowFilter", "WindowService"]
