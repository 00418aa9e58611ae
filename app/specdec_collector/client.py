"""A small client of a running collector, sync and async; the `specdec` client commands use it.

Around a benchmark run, three lines are enough:

    client = CollectorClient("http://collector:8000", api_key=key)
    client.start("run-42", targets=["10.0.0.1:8080"])
    ...  # the benchmark
    print(client.stop_and_report("run-42"))
"""

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from specdec_collector.schemas import (
    BoundedResults,
    BoundedTargetResult,
    Comparison,
    Source,
    WindowPage,
    WindowSummary,
    WindowView,
)

Target = str | Mapping[str, Any]
# The largest page `GET /windows` answers.
PAGE_LIMIT = 500
Labels = Mapping[str, str] | None


class CollectorError(Exception):
    """The collector answered with an error (4xx/5xx); `status` and `detail` say which."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class CollectorUnavailable(Exception):
    """The collector could not be reached."""


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@dataclass(frozen=True, slots=True)
class StartFrom:
    """Where a window's counters come from (scraped by default, or read from the collector's
    Prometheus), and `at` a past time when given (Prometheus only)."""

    source: Source = Source.SCRAPE
    at: datetime | None = None


def _start_body(
    targets: Sequence[Target],
    labels: Mapping[str, str] | None,
    sample_interval_s: float | None,
    source: StartFrom,
) -> dict[str, Any]:
    body: dict[str, Any] = {"targets": list(targets)}
    if labels:
        body["labels"] = dict(labels)
    if sample_interval_s is not None:
        body["sample_interval_s"] = sample_interval_s
    if source.source is not Source.SCRAPE:
        body["source"] = source.source.value
    if source.at is not None:
        body["at"] = source.at.isoformat()
    return body


def _checked(response: httpx.Response) -> httpx.Response:
    """`response` if it is a success, else `CollectorError` with the service's `detail`."""
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise CollectorError(response.status_code, detail)
    return response


@dataclass(frozen=True, slots=True)
class Call:
    """One request of the API: what both clients send, each through its own I/O."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None


class BaseClient:
    """Request building and answer reading, so `CollectorClient` and `AsyncCollectorClient`
    differ only in how they send (as httpx's `BaseClient` does for its two clients)."""

    def __init__(
        self,
        server: str,
        api_key: str | None = None,
        *,
        team: str | None = None,
        timeout_s: float = 120,
    ) -> None:
        self.base_url = server.rstrip("/")
        self.headers = _headers(api_key)
        self.timeout_s = timeout_s
        self._params = {"team": team} if team else {}
        self._open()

    def _open(self) -> None:
        """Create the connection pool: the one thing the two clients do differently here."""
        raise NotImplementedError

    def _request(self, http: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.Request:
        params = {**self._params, **call.params}
        return http.build_request(call.method, call.path, params=params, json=call.body)

    def _unavailable(self, exc: httpx.TransportError) -> CollectorUnavailable:
        return CollectorUnavailable(f"{self.base_url}: {type(exc).__name__}: {exc}")

    @staticmethod
    def starting(
        window_id: str,
        targets: Sequence[Target],
        labels: Labels,
        sample_interval_s: float | None,
        source: StartFrom = StartFrom(),
    ) -> Call:
        return Call(
            "POST",
            f"/windows/{window_id}/start",
            body=_start_body(targets, labels, sample_interval_s, source),
        )

    @staticmethod
    def stopping(window_id: str, at: datetime | None = None) -> Call:
        body = {"at": at.isoformat()} if at is not None else None
        return Call("POST", f"/windows/{window_id}/stop", body=body)

    @staticmethod
    def getting(window_id: str) -> Call:
        return Call("GET", f"/windows/{window_id}")

    @staticmethod
    def reporting(window_id: str) -> Call:
        return Call("GET", f"/windows/{window_id}/report")

    @staticmethod
    def bounding(window_id: str, start: datetime, end: datetime) -> Call:
        params = {"start": start.isoformat(), "end": end.isoformat()}
        return Call("GET", f"/windows/{window_id}/results", params=params)

    @staticmethod
    def bounded_of(response: httpx.Response) -> list[BoundedTargetResult]:
        return BoundedResults.model_validate(response.json()).targets

    @staticmethod
    def listing(
        limit: int,
        state: str | None,
        labels: Sequence[str] = (),
        target: str | None = None,
        started_after: datetime | None = None,
        cursor: str | None = None,
    ) -> Call:
        params: dict[str, Any] = {"limit": limit}
        if state:
            params["state"] = state
        if labels:
            params["label"] = list(labels)  # `key=value`, all must match
        if target:
            params["target"] = target
        if started_after:
            params["started_after"] = started_after.isoformat()
        if cursor:
            params["cursor"] = cursor
        return Call("GET", "/windows", params=params)

    @staticmethod
    def page_of(response: httpx.Response) -> WindowPage:
        return WindowPage.model_validate(response.json())

    @staticmethod
    def force_closing(window_id: str) -> Call:
        return Call("POST", f"/windows/{window_id}/force-close")

    @staticmethod
    def comparing(window_ids: Sequence[str]) -> Call:
        return Call("GET", "/compare", params={"windows": ",".join(window_ids)})

    @staticmethod
    def comparison_of(response: httpx.Response) -> Comparison:
        return Comparison.model_validate(response.json())

    @staticmethod
    def window_of(response: httpx.Response) -> WindowView:
        return WindowView.model_validate(response.json())

    @staticmethod
    def windows_of(response: httpx.Response) -> list[WindowSummary]:
        return [WindowSummary.model_validate(w) for w in response.json()["windows"]]


class CollectorClient(BaseClient):
    """Synchronous client; every call raises `CollectorError` or `CollectorUnavailable`."""

    _http: httpx.Client

    def _open(self) -> None:
        self._http = httpx.Client(
            base_url=self.base_url, headers=self.headers, timeout=self.timeout_s
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> "CollectorClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: Call) -> httpx.Response:
        try:
            return _checked(self._http.send(self._request(self._http, call)))
        except httpx.TransportError as exc:
            raise self._unavailable(exc) from exc

    def start(
        self,
        window_id: str,
        targets: Sequence[Target],
        labels: Labels = None,
        sample_interval_s: float | None = None,
        source: StartFrom = StartFrom(),
    ) -> WindowView:
        """Open a window (a retry of the same start is harmless)."""
        return self.window_of(
            self._send(self.starting(window_id, targets, labels, sample_interval_s, source))
        )

    def stop(self, window_id: str, at: datetime | None = None) -> WindowView:
        """Close a window (one read from Prometheus may close `at` a past time)."""
        return self.window_of(self._send(self.stopping(window_id, at)))

    def measure_past(
        self,
        window_id: str,
        targets: Sequence[Target],
        start: datetime,
        end: datetime,
        labels: Labels = None,
    ) -> WindowView:
        """A window over a run that is over, read from the collector's Prometheus: one call."""
        self.start(window_id, targets, labels, None, StartFrom(Source.PROMETHEUS, at=start))
        return self.stop(window_id, end)

    def get(self, window_id: str) -> WindowView:
        """The window with its targets and results."""
        return self.window_of(self._send(self.getting(window_id)))

    def report(self, window_id: str) -> str:
        """The AISBench console blocks."""
        return self._send(self.reporting(window_id)).text

    def stop_and_report(self, window_id: str) -> str:
        """Stop the window and return its console blocks."""
        self.stop(window_id)
        return self.report(window_id)

    def results_between(
        self, window_id: str, start: datetime, end: datetime
    ) -> list[BoundedTargetResult]:
        """Every target's result over the part of the closed window that encloses start..end."""
        return self.bounded_of(self._send(self.bounding(window_id, start, end)))

    def list(
        self,
        limit: int = 50,
        state: str | None = None,
        labels: Sequence[str] = (),
        target: str | None = None,
    ) -> list[WindowSummary]:
        """The team's windows, newest first; `labels` (`key=value`, all must match) and
        `target` (`host:port`) filter them."""
        return self.windows_of(self._send(self.listing(limit, state, labels, target)))

    def every_window(
        self,
        state: str | None = None,
        labels: Sequence[str] = (),
        target: str | None = None,
        started_after: datetime | None = None,
    ) -> Iterator[WindowSummary]:
        """Every window of the team that the filters keep, newest first, a page at a time."""
        cursor: str | None = None
        while True:
            call = self.listing(PAGE_LIMIT, state, labels, target, started_after, cursor)
            page = self.page_of(self._send(call))
            yield from page.windows
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def force_close(self, window_id: str) -> WindowView:
        """Close an open window at once without a final scrape (admin keys only)."""
        return self.window_of(self._send(self.force_closing(window_id)))

    def compare(self, window_ids: Sequence[str]) -> Comparison:
        """The windows side by side per target, each difference judged (`GET /compare`)."""
        return self.comparison_of(self._send(self.comparing(window_ids)))


class AsyncCollectorClient(BaseClient):
    """The same calls for asyncio code."""

    _http: httpx.AsyncClient

    def _open(self) -> None:
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self.headers, timeout=self.timeout_s
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncCollectorClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: Call) -> httpx.Response:
        try:
            return _checked(await self._http.send(self._request(self._http, call)))
        except httpx.TransportError as exc:
            raise self._unavailable(exc) from exc

    async def start(
        self,
        window_id: str,
        targets: Sequence[Target],
        labels: Labels = None,
        sample_interval_s: float | None = None,
        source: StartFrom = StartFrom(),
    ) -> WindowView:
        """Open a window (a retry of the same start is harmless)."""
        call = self.starting(window_id, targets, labels, sample_interval_s, source)
        return self.window_of(await self._send(call))

    async def stop(self, window_id: str, at: datetime | None = None) -> WindowView:
        """Close a window (one read from Prometheus may close `at` a past time)."""
        return self.window_of(await self._send(self.stopping(window_id, at)))

    async def measure_past(
        self,
        window_id: str,
        targets: Sequence[Target],
        start: datetime,
        end: datetime,
        labels: Labels = None,
    ) -> WindowView:
        """A window over a run that is over, read from the collector's Prometheus: one call."""
        await self.start(window_id, targets, labels, None, StartFrom(Source.PROMETHEUS, at=start))
        return await self.stop(window_id, end)

    async def get(self, window_id: str) -> WindowView:
        """The window with its targets and results."""
        return self.window_of(await self._send(self.getting(window_id)))

    async def report(self, window_id: str) -> str:
        """The AISBench console blocks."""
        return (await self._send(self.reporting(window_id))).text

    async def stop_and_report(self, window_id: str) -> str:
        """Stop the window and return its console blocks."""
        await self.stop(window_id)
        return await self.report(window_id)

    async def results_between(
        self, window_id: str, start: datetime, end: datetime
    ) -> list[BoundedTargetResult]:
        """Every target's result over the part of the closed window that encloses start..end."""
        return self.bounded_of(await self._send(self.bounding(window_id, start, end)))

    async def list(
        self,
        limit: int = 50,
        state: str | None = None,
        labels: Sequence[str] = (),
        target: str | None = None,
    ) -> list[WindowSummary]:
        """The team's windows, newest first; `labels` (`key=value`, all must match) and
        `target` (`host:port`) filter them."""
        return self.windows_of(await self._send(self.listing(limit, state, labels, target)))

    async def every_window(
        self,
        state: str | None = None,
        labels: Sequence[str] = (),
        target: str | None = None,
        started_after: datetime | None = None,
    ) -> AsyncIterator[WindowSummary]:
        """Every window of the team that the filters keep, newest first, a page at a time."""
        cursor: str | None = None
        while True:
            call = self.listing(PAGE_LIMIT, state, labels, target, started_after, cursor)
            page = self.page_of(await self._send(call))
            for window in page.windows:
                yield window
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def force_close(self, window_id: str) -> WindowView:
        """Close an open window at once without a final scrape (admin keys only)."""
        return self.window_of(await self._send(self.force_closing(window_id)))

    async def compare(self, window_ids: Sequence[str]) -> Comparison:
        """The windows side by side per target, each difference judged (`GET /compare`)."""
        return self.comparison_of(await self._send(self.comparing(window_ids)))
