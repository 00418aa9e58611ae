"""A small client of a running collector, sync and async; the `specdec` client commands use it.

Around a benchmark run, three lines are enough:

    client = CollectorClient("http://collector:8000", api_key=key)
    client.start("run-42", targets=["10.0.0.1:8080"])
    ...  # the benchmark
    print(client.stop_and_report("run-42"))
"""

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

Target = str | Mapping[str, Any]


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


def _start_body(
    targets: Sequence[Target], labels: Mapping[str, str] | None, sample_interval_s: float | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"targets": list(targets)}
    if labels:
        body["labels"] = dict(labels)
    if sample_interval_s is not None:
        body["sample_interval_s"] = sample_interval_s
    return body


def _checked(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise CollectorError(response.status_code, detail)
    return response


class CollectorClient:
    """Synchronous client; every call raises `CollectorError` or `CollectorUnavailable`."""

    def __init__(
        self,
        server: str,
        api_key: str | None = None,
        *,
        team: str | None = None,
        timeout_s: float = 120,
    ) -> None:
        self._http = httpx.Client(
            base_url=server.rstrip("/"), headers=_headers(api_key), timeout=timeout_s
        )
        self._params = {"team": team} if team else {}

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> "CollectorClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self, method: str, path: str, params: dict[str, Any] | None = None, **kwargs: Any
    ) -> httpx.Response:
        try:
            query = {**self._params, **(params or {})}
            return _checked(self._http.request(method, path, params=query, **kwargs))
        except httpx.TransportError as exc:
            raise CollectorUnavailable(
                f"{self._http.base_url}: {type(exc).__name__}: {exc}"
            ) from exc

    def start(
        self,
        window_id: str,
        targets: Sequence[Target],
        labels: Mapping[str, str] | None = None,
        sample_interval_s: float | None = None,
    ) -> dict[str, Any]:
        """Open a window (a retry of the same start is harmless)."""
        body = _start_body(targets, labels, sample_interval_s)
        window: dict[str, Any] = self._call("POST", f"/windows/{window_id}/start", json=body).json()
        return window

    def stop(self, window_id: str) -> dict[str, Any]:
        """Close a window; its targets carry their results."""
        window: dict[str, Any] = self._call("POST", f"/windows/{window_id}/stop").json()
        return window

    def get(self, window_id: str) -> dict[str, Any]:
        """The window with its targets and results."""
        window: dict[str, Any] = self._call("GET", f"/windows/{window_id}").json()
        return window

    def report(self, window_id: str) -> str:
        """The AISBench console blocks."""
        return self._call("GET", f"/windows/{window_id}/report").text

    def stop_and_report(self, window_id: str) -> str:
        """Stop the window and return its console blocks."""
        self.stop(window_id)
        return self.report(window_id)

    def list(self, limit: int = 50, state: str | None = None) -> list[dict[str, Any]]:
        """The team's windows, newest first."""
        params: dict[str, Any] = {"limit": limit, **({"state": state} if state else {})}
        windows: list[dict[str, Any]] = self._call("GET", "/windows", params=params).json()[
            "windows"
        ]
        return windows


class AsyncCollectorClient:
    """The same calls for asyncio code."""

    def __init__(
        self,
        server: str,
        api_key: str | None = None,
        *,
        team: str | None = None,
        timeout_s: float = 120,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=server.rstrip("/"), headers=_headers(api_key), timeout=timeout_s
        )
        self._params = {"team": team} if team else {}

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncCollectorClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(
        self, method: str, path: str, params: dict[str, Any] | None = None, **kwargs: Any
    ) -> httpx.Response:
        try:
            query = {**self._params, **(params or {})}
            return _checked(await self._http.request(method, path, params=query, **kwargs))
        except httpx.TransportError as exc:
            raise CollectorUnavailable(
                f"{self._http.base_url}: {type(exc).__name__}: {exc}"
            ) from exc

    async def start(
        self,
        window_id: str,
        targets: Sequence[Target],
        labels: Mapping[str, str] | None = None,
        sample_interval_s: float | None = None,
    ) -> dict[str, Any]:
        """Open a window (a retry of the same start is harmless)."""
        body = _start_body(targets, labels, sample_interval_s)
        window: dict[str, Any] = (
            await self._call("POST", f"/windows/{window_id}/start", json=body)
        ).json()
        return window

    async def stop(self, window_id: str) -> dict[str, Any]:
        """Close a window; its targets carry their results."""
        window: dict[str, Any] = (await self._call("POST", f"/windows/{window_id}/stop")).json()
        return window

    async def get(self, window_id: str) -> dict[str, Any]:
        """The window with its targets and results."""
        window: dict[str, Any] = (await self._call("GET", f"/windows/{window_id}")).json()
        return window

    async def report(self, window_id: str) -> str:
        """The AISBench console blocks."""
        return (await self._call("GET", f"/windows/{window_id}/report")).text

    async def stop_and_report(self, window_id: str) -> str:
        """Stop the window and return its console blocks."""
        await self.stop(window_id)
        return await self.report(window_id)

    async def list(self, limit: int = 50, state: str | None = None) -> list[dict[str, Any]]:
        """The team's windows, newest first."""
        params: dict[str, Any] = {"limit": limit, **({"state": state} if state else {})}
        answer = await self._call("GET", "/windows", params=params)
        windows: list[dict[str, Any]] = answer.json()["windows"]
        return windows
