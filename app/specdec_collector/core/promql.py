"""PromQL for a window read from Prometheus: selectors, queries, and their answers as snapshots.

Prometheus, Thanos, Mimir and VictoriaMetrics answer the same HTTP API. For a target (an
`instance="host:port"` or a label selector) and a window `start`..`end`, one instant query
at `end` of a range selector (`{__name__=~"<every spec-decode family>", ...}[<span>]`) returns
the raw samples of every spec-decode series since the target's last scrape at or before
`start` (`scrape_time_query` tells when that was): not `increase()`, whose extrapolation
invents fractions. The samples, grouped by scrape (their timestamp), become the same chain
of snapshots a scraped window has: the last one at or before `start` is the baseline, the
last one is the end, and the per-series reset rule runs over every one in between.

Pure functions here (the query text, the answer read into snapshots); the HTTP calls are
`sources.prometheus.api`'s.
"""

import bisect
import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from specdec_collector.core.arithmetic import TooManyChanges, needed_points
from specdec_collector.core.counters import (
    GAUGES,
    POSITION_IN_NAME,
    ROLE_OF_FAMILY,
    ROLE_OF_GAUGE,
    ROLE_OF_SAMPLE,
    role_of_sample,
)
from specdec_collector.core.exposition import (
    ExtractionError,
    Series,
    SeriesKey,
    SeriesValue,
    checked_value,
)
from specdec_collector.core.safetext import has_control_characters

#: Labels Prometheus adds to every series it scrapes: not the engine's own.
TARGET_LABELS = frozenset({"instance", "job"})

_FAMILIES = sorted(
    [f"{family}_total" for family in ROLE_OF_FAMILY]
    + [f"{family}_created" for family in ROLE_OF_FAMILY]
    + list(ROLE_OF_GAUGE)
    + list(ROLE_OF_SAMPLE)
    + [f"{name[: -len('_count')]}_created" for name in ROLE_OF_SAMPLE if name.endswith("_count")]
)
#: Every spec-decode sample name, as one regular expression for `__name__=~`.
NAME_PATTERN = "|".join(re.escape(name) for name in _FAMILIES)

_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')


class SourceError(ValueError):
    """What Prometheus answered cannot give the window: the text says why, AISBench-style."""


def parse_selector(text: str) -> list[tuple[str, str, str]]:
    """The matchers of a label selector `{name="value", ...}` (no metric name, no `__name__`);
    `ValueError` saying what is wrong."""
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError('a selector is {label="value", ...} (no metric name)')
    body, matchers, pos = text[1:-1], [], 0
    while pos < len(body):
        match = _MATCHER.match(body, pos)
        if match is None:
            raise ValueError(f'a selector\'s matchers are label="value": {body[pos : pos + 40]!r}')
        if match[1] == "__name__":
            raise ValueError("a selector names no metric: the collector reads the spec-decode ones")
        matchers.append((match[1], match[2], match[3]))
        pos = match.end()
        if pos < len(body):
            if body[pos] != ",":
                raise ValueError(f"matchers are separated by commas: {body[pos : pos + 40]!r}")
            pos += 1
    if not matchers:
        raise ValueError("a selector needs at least one matcher")
    return matchers


def check_target_selector(text: str) -> None:
    """`ValueError` unless `text` is a selector a team may name a target by: equality
    matchers with a value (`{job="vllm", pod="p-0"}`). A regular expression or a negation
    would be an oracle on other teams' label values, and an empty value matches series
    without the label."""
    for name, op, value in parse_selector(text):
        if op != "=":
            raise ValueError(
                f'a target\'s selector matches labels exactly: {name}="value", not {name}{op}'
            )
        if not value:
            raise ValueError(f"a target's selector gives every label a value: {name} has none")


def instance_selector(target_name: str) -> str:
    """The selector of a `host:port` target: Prometheus' `instance` label."""
    return '{instance="' + target_name.replace("\\", "\\\\").replace('"', '\\"') + '"}'


def _matchers(selector: str) -> str:
    """The matchers of `selector`, checked, as the inside of a PromQL selector."""
    return ", ".join(f'{name}{op}"{value}"' for name, op, value in parse_selector(selector))


def series_query(selector: str) -> str:
    """The instant-vector PromQL of every spec-decode series of `selector`: evaluated at a
    moment, the last sample of each at or before it (within Prometheus' lookback, 5 min by
    default); `scrape_time_query` gives the time of their scrape."""
    return f'{{__name__=~"{NAME_PATTERN}", {_matchers(selector)}}}'


def scrape_time_query(selector: str, successful_only: bool = True) -> str:
    """The PromQL of the time of the last (successful) scrape of each instance `selector`
    matches: the timestamp of its `up` series, which Prometheus writes at every scrape of a
    target. (The spec-decode series cannot be asked: `timestamp()` drops their names, and two
    of one label set are refused. `timestamp()` of an expression is the query's time: the
    filter to successful scrapes comes after it, with `and`.)"""
    up = "up{" + _matchers(selector) + "}"
    if not successful_only:
        return f"max by (instance) (timestamp({up}))"
    return f"max by (instance) (timestamp({up}) and {up} == 1)"


def instances_selector(keys: Sequence[str]) -> str:
    """One selector for the `instance`s `keys` (`host:port`): a window's targets read with one
    query each time instead of one per target."""
    # A regular expression of the exact names, inside a PromQL string (its own escaping).
    literal = "|".join(re.escape(key) for key in keys).replace("\\", "\\\\")
    return '{instance=~"' + literal + '"}'


def split_by_instance(answer: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """An answer of several instances' series, as one answer per instance (none for an
    instance without series)."""
    parts: dict[str, list[dict[str, Any]]] = {}
    for entry in _result(answer, kind):
        parts.setdefault((entry.get("metric") or {}).get("instance", ""), []).append(entry)
    return {
        instance: {"status": "success", "data": {"resultType": kind, "result": entries}}
        for instance, entries in parts.items()
    }


def range_query(selector: str, start: datetime, end: datetime) -> str:
    """The PromQL of every raw spec-decode sample of `selector` after `start` up to `end`
    (evaluated at `end`). A window's first range starts just before its targets' baseline
    scrapes (`scrape_times`), so its answer holds them too."""
    span = max(1, math.ceil((end - start).total_seconds()))
    return f"{series_query(selector)}[{span}s]"


@dataclass(frozen=True, slots=True)
class Scrapes:
    """The samples of one target grouped by scrape: (time, series) in time order."""

    points: list[tuple[datetime, Series]] = field(default_factory=list)

    def followed_by(self, more: Sequence[tuple[datetime, Series]]) -> "Scrapes":
        """These points and those of `more` after the last of them (reads that overlap give
        a scrape once)."""
        last = self.points[-1][0] if self.points else None
        return Scrapes([*self.points, *(p for p in more if last is None or p[0] > last)])

    def until(self, stop: datetime) -> "Scrapes":
        """The points up to the first one at or after `stop`, which ends a window (its scrape
        holds the window's last seconds)."""
        after = next((i for i, (at, _) in enumerate(self.points) if at >= stop), None)
        return self if after is None else Scrapes(self.points[: after + 1])

    def _baseline(self, start: datetime) -> int | None:
        """The index of the last point at or before `start` (the points are in time order)."""
        index = bisect.bisect_right(self.points, start, key=lambda point: point[0]) - 1
        return index if index >= 0 else None

    def since_baseline(self, start: datetime) -> "Scrapes":
        """The points from the baseline (the last one at or before `start`) on; all of them
        if none is that early (`since` then says why)."""
        baseline = self._baseline(start)
        return self if not baseline else Scrapes(self.points[baseline:])

    def since(self, start: datetime) -> "Scrapes":
        """The points from the baseline (the last one at or before `start`) on; `SourceError`
        if Prometheus holds no sample that early."""
        baseline = self._baseline(start)
        if baseline is None:
            raise SourceError(
                "Prometheus holds no sample at or before the window's start for this target"
            )
        return Scrapes(self.points[baseline:])

    def window(self, start: datetime) -> tuple[Series, list[Series], Series, datetime, datetime]:
        """The baseline (`since`), the samples after it, the last one, and the times of the
        two ends."""
        chain = self.since(start).points
        series = [points for _, points in chain]
        return series[0], series[1:-1], series[-1], chain[0][0], chain[-1][0]


#: A series' key as `_key_of` gives it, by its labels other than the target's.
_Keys = dict[tuple[tuple[str, str], ...], "tuple[SeriesKey, bool] | None"]


def _key(labels: dict[str, str], keys: _Keys) -> tuple[tuple[SeriesKey, bool] | None, str | None]:
    """The series key of one Prometheus series, whether it is a `_created` one, and its
    instance; None for a name no schema reads. `keys`: the keys found so far in the answer
    (the servers of a fleet differ in their target labels alone: 1,024 vLLM servers have
    27,648 series and 27 label sets without `instance` and `job`)."""
    try:
        own = dict(labels)
        instance, job = own.pop("instance", None), own.pop("job", None)  # TARGET_LABELS
        if not (_printable(instance) and _printable(job)):
            raise SourceError("Prometheus holds a series whose labels are not printable text")
        items = tuple(own.items())
        if items not in keys:
            keys[items] = _key_of(items)
        return keys[items], instance
    except TypeError:  # a label value that is not a string (unhashable, or not text)
        raise SourceError("Prometheus holds a series whose labels are not text") from None


def _printable(value: str | None) -> bool:
    return value is None or not has_control_characters(value)


def _key_of(items: tuple[tuple[str, str], ...]) -> tuple[SeriesKey, bool] | None:
    """The key of a series from its labels other than the target's (`TARGET_LABELS`)."""
    labels = dict(items)
    name = labels.pop("__name__", "")
    if has_control_characters(name) or any(
        has_control_characters(k + v) for k, v in labels.items()
    ):
        raise SourceError("Prometheus holds a series whose labels are not printable text")
    position = POSITION_IN_NAME.get(name)
    if position is not None:  # a gauge with its position in its name: as a label
        labels["position"] = position
    found, created = role_of_sample(name)
    if found is None:
        return None
    engine, role = found
    return SeriesKey(role, tuple(sorted(labels.items())), engine), created


def _result(answer: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    if answer.get("status") != "success":
        raise SourceError(f"Prometheus answered an error: {answer.get('error', 'no error text')}")
    data = answer.get("data") or {}
    if data.get("resultType") != kind:
        raise SourceError(f"Prometheus answered a {data.get('resultType')!r}, not a {kind}")
    result: list[dict[str, Any]] = data.get("result") or []
    return result


def more_than_one_server(count: int) -> str:
    """The failure of a selector that matches `count` servers (never named: they may be
    other teams')."""
    return (
        f"the selector matches {count} servers: narrow it to one; the collector never sums servers"
    )


def scrape_configs_query(selector: str) -> str:
    """The PromQL of how many scrape configurations scrape each instance `selector` matches:
    one `up` series each (two jobs, or target labels that differ, scrape a server twice)."""
    up = "up{" + _matchers(selector) + "}"
    return f"count by (instance) ({up})"


def _number(text: Any) -> float:
    """A sample value as Prometheus' JSON gives it (a string: "1234", "NaN", "+Inf")."""
    try:
        return float(text)
    except (TypeError, ValueError):
        raise SourceError(f"Prometheus answered a value that is not a number: {text!r}") from None


def scrape_times(answer: dict[str, Any]) -> dict[str, float]:
    """Each instance's time of its last successful scrape, from a `scrape_time_query` answer
    at a window's start: the scrape that is its baseline."""
    return {
        (entry.get("metric") or {}).get("instance", ""): _number(_sample(entry)[1])
        for entry in _result(answer, "vector")
    }


def scrapes_by_instance(
    answer: dict[str, Any], scraped: Mapping[str, float] | None = None
) -> dict[str, Scrapes]:
    """The range-vector answer of `range_query`, grouped by instance, then by scrape;
    `SourceError` for an error answer or a non-matrix one. The scrapes of `scraped` (instance
    -> time: the baselines, `scrape_times`) are there even without a spec-decode sample: a
    target scraped but without spec-decode series yet (engines that show theirs at first
    use) has that scrape, with none, as a direct scrape reads it."""
    grouped = _matrix(answer, by_instance=True)
    for instance, stamp in (scraped or {}).items():
        grouped.scrape(instance, stamp)
    return grouped.scrapes()


def scrapes_of(answer: dict[str, Any]) -> Scrapes:
    """The range-vector answer of `range_query` of one server, grouped by scrape;
    `SourceError` for an error answer, a non-matrix one, or series of more than one instance
    (never a sum of servers)."""
    grouped = _matrix(answer, by_instance=False)
    if len(grouped.instances) > 1:
        raise SourceError(more_than_one_server(len(grouped.instances)))
    return next(iter(grouped.scrapes().values()), Scrapes())


def _matrix(answer: dict[str, Any], by_instance: bool) -> "_Grouped":
    grouped = _Grouped(by_instance)
    for entry in _result(answer, "matrix"):
        grouped.add(entry.get("metric") or {}, entry.get("values") or ())
    return grouped


def _sample(entry: dict[str, Any]) -> Sequence[Any]:
    """The (time, value text) of an instant vector's entry."""
    value = entry.get("value")
    if not isinstance(value, list) or len(value) != 2:
        raise SourceError(f"Prometheus answered a sample that is not [time, value]: {value!r}")
    return value


class _Grouped:
    """Samples of Prometheus series as scrapes, in one pass over an answer: by instance (or
    all as one server's, counting the instances seen), then by time, each scrape a `Series`;
    the `_created` samples join their series' at the end."""

    __slots__ = ("_by_instance", "_created", "_keys", "_split", "instances")

    def __init__(self, by_instance: bool) -> None:
        self._split = by_instance
        self._keys: _Keys = {}  # this answer's series keys, by their labels
        self._by_instance: dict[str, dict[float, Series]] = {}
        self._created: list[tuple[str, float, SeriesKey, float]] = []
        self.instances: set[str] = set()

    def scrape(self, instance: str, stamp: float) -> None:
        """A scrape of `instance` at `stamp`, with or without samples."""
        self._by_instance.setdefault(instance if self._split else "", {}).setdefault(stamp, {})
        self.instances.add(instance)

    def add(self, metric: dict[str, str], samples: Iterable[Sequence[Any]]) -> None:
        """The samples (time, value text) of one series; none if no schema reads its name."""
        parsed, instance = _key(metric, self._keys)
        if parsed is None:
            return
        if instance is not None:
            self.instances.add(instance)
        group = (instance or "") if self._split else ""
        key, created = parsed
        optional = created or key.role in GAUGES
        name = metric.get("__name__", "")
        by_time = self._by_instance.setdefault(group, {})
        sample: Any = None
        try:
            for sample in samples:
                stamp, text = sample
                number = _number(text)  # Prometheus' JSON gives a value as text: "12", "NaN"
                at = stamp if type(stamp) is float else _number(stamp)
                # The checks a scrape applies to the same sample.
                value = checked_value(number, str(text), name, optional)
                if value is None:
                    continue  # absent
                if created:
                    self._created.append((group, at, key, value))
                    continue
                scrape = by_time.get(at)
                if scrape is None:
                    scrape = by_time[at] = {}
                scrape[key] = SeriesValue(value)
        except ExtractionError as exc:
            raise SourceError(f"Prometheus holds a sample that is not a count: {exc}") from None
        except SourceError:
            raise
        except (TypeError, ValueError):
            raise SourceError(
                f"Prometheus answered a sample that is not [time, value]: {sample!r:.100}"
            ) from None

    def scrapes(self) -> dict[str, Scrapes]:
        """Each group's scrapes in time order (none for a group without any)."""
        for group, stamp, key, value in self._created:
            slot = self._by_instance[group].get(stamp, {}).get(key)
            if slot is not None:
                slot.created = value
        return {
            group: Scrapes(
                [(datetime.fromtimestamp(stamp, UTC), by_time[stamp]) for stamp in sorted(by_time)]
            )
            for group, by_time in self._by_instance.items()
            if by_time
        }


def thin(
    points: Sequence[tuple[datetime, Series]], max_points: int
) -> list[tuple[datetime, Series]]:
    """At most `max_points` of a target's scrapes that give the window the same result as all
    of them (`arithmetic.needed_points`); `SourceError` if the ones needed are more."""
    try:
        kept = needed_points([series for _, series in points], max_points)
    except TooManyChanges as exc:
        raise SourceError(
            f"the target's series came, went or were reset in {exc.changes} of its "
            f"{len(points)} scrapes in the window: more than the {max_points} points kept per "
            "target (SPECDEC_PROMETHEUS_MAX_POINTS)"
        ) from None
    return [points[index] for index in kept]


def chunks(start: datetime, end: datetime, span_s: float) -> list[tuple[datetime, datetime]]:
    """`start`..`end` as consecutive spans of at most `span_s`: one range query each, so no
    answer holds more than a span's samples however long the window."""
    bounds, low = [], start
    while True:
        high = min(end, low + timedelta(seconds=span_s))
        bounds.append((low, high))
        if high >= end:
            return bounds
        low = high


def scrape_spacing_query(selector: str, span_s: float) -> str:
    """The PromQL of the raw `up` samples of each instance `selector` matches over the last
    `span_s` seconds: one sample per scrape, so their spacing is the target's scrape interval
    (one series per instance; its spec-decode series are dozens, each with the same times)."""
    return "up{" + _matchers(selector) + f"}}[{max(1, math.ceil(span_s))}s]"


def scrape_spacings(answer: dict[str, Any]) -> dict[str, float]:
    """Each instance's typical seconds between two scrapes (the median gap of its `up`
    samples), from a `scrape_spacing_query` answer; none for an instance scraped once."""
    spacings: dict[str, float] = {}
    for entry in _result(answer, "matrix"):
        times = sorted(_number(stamp) for stamp, _ in entry.get("values") or [])
        gaps = sorted(later - earlier for earlier, later in itertools.pairwise(times))
        if gaps:
            instance = (entry.get("metric") or {}).get("instance", "")
            spacings[instance] = max(spacings.get(instance, 0.0), gaps[len(gaps) // 2])
    return spacings
