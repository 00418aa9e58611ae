"""Extraction of spec-decode series from Prometheus exposition text.

A vLLM `/metrics` payload is 60 KB to 700 KB, of which the spec-decode samples are a few
dozen lines. Instead of parsing every family, `extract_spec_decode` jumps from one line that
holds a schema's marker (``spec_decode_``; see `core.counters`) to the next with `str.find`
and parses only those lines; a line seen before is not parsed again.
It reads both the text format 0.0.4 and OpenMetrics 1.0: the sample names are the same,
only the family bookkeeping (which we skip) differs.

Correctness is pinned by a differential test against prometheus_client's parsers.
"""

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from specdec_collector.core.counters import (
    GAUGES,
    POSITION_IN_NAME,
    SCHEMAS,
    WITNESS_MARKERS,
    CounterSchema,
    Role,
    ServingEngine,
    role_of_sample,
    spellings,
)

# One sample line: name, optional label set (quoted values may hold `}`, `,`, `"` escaped),
# value, optional timestamp, optional OpenMetrics exemplar.
_SAMPLE = re.compile(
    r"""
    (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)
    (?:\{(?P<labels>(?:[^"}]++|"(?:[^"\\]++|\\.)*+")*+)\})?
    [ \t]+(?P<value>[^ \t]+)
    (?:[ \t]+(?P<timestamp>[^ \t\#]+))?
    (?:[ \t]+\#.*)?
    [ \t]*
    """,
    re.VERBOSE,
)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]++|\\.)*+)"[ \t]*(,|$)')
_ESCAPE = re.compile(r'\\([\\"n])')


_NUMBER = re.compile(
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[Ii][Nn][Ff](?:[Ii][Nn][Ii][Tt][Yy])?)"
    r"|[Nn][Aa][Nn]",
    re.ASCII,
)
# A sample line whose name is quoted inside its braces (Prometheus 3's UTF-8 names):
# `{"name", label="value"} 1`.
_QUOTED_NAME = re.compile(r'\{"((?:[^"\\]|\\.)*)"\s*(?:,\s*)?')


class ExtractionError(ValueError):
    """The payload holds a spec-decode sample that cannot be read as a counter."""


#: The largest counter value read: above 2**53 a float no longer holds every integer, so an
#: increase would be inexact and a sum of a few could overflow to infinity.
MAX_COUNTER = float(2**53)


@dataclass(frozen=True, slots=True)
class ExtractionLimits:
    """Bounds on what one payload may hold: a hostile target cannot grow the work or the store."""

    max_series: int = 4096
    max_label_chars: int = 2048


class SeriesKey(NamedTuple):
    """One series: the role of its family (see `core.counters`), its sorted label pairs, and
    the engine whose family it is."""

    role: Role
    labels: tuple[tuple[str, str], ...]
    engine: ServingEngine = ServingEngine.VLLM


@dataclass(slots=True)
class SeriesValue:
    """The counter value (`_total`) and start time (`_created`) of one series."""

    value: float | None = None
    created: float | None = None


Series = dict[SeriesKey, SeriesValue]


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: "\n" if m[1] == "n" else m[1], value)


# A server repeats the same label sets on every scrape (and `_total` and `_created` share
# them), so parsed label sets are cached; the bound keeps hostile payloads from growing it.
@lru_cache(maxsize=8192)
def _parse_labels(text: str) -> tuple[tuple[str, str], ...]:
    labels: dict[str, str] = {}
    pos, end = 0, len(text.rstrip(" \t"))
    while pos < end:
        match = _LABEL.match(text, pos)
        if match is None or (match[3] == "" and match.end() < end):
            raise ExtractionError(f"malformed labels: {{{text[:200]}}}")
        if match[1] in labels:
            raise ExtractionError(f"label {match[1]!r} given twice: {{{text[:200]}}}")
        labels[match[1]] = _unescape(match[2])
        pos = match.end()
    return tuple(sorted(labels.items()))


_NAME_END = re.compile(r"[{ \t]")


class _Sample(NamedTuple):
    """What one sample line says, as far as it does not depend on the payload around it."""

    key: SeriesKey
    is_created: bool
    value: float | None  # None: a `_created` or gauge without a finite value, read as absent
    label_chars: int


# Lines already parsed: between two scrapes of a server most spec-decode lines repeat (every
# `_created`, and the counters of idle engines), and a dictionary lookup costs a hundredth of a
# parse. Only lines that parse are kept; short lines only, and at most this many.
_PARSED: dict[str, _Sample] = {}
_PARSED_MAX_ENTRIES = 16_384
_PARSED_MAX_LINE = 512


def _sample_of(line: str, limits: ExtractionLimits) -> _Sample | None:
    """The sample of a line, None for a line of a family no schema reads; raises
    `ExtractionError` for a line that is not a readable counter."""
    if line.startswith('{"'):
        line = _unquoted_name(line)
    # The name first: a line of a family no schema reads (one that merely holds a marker in a
    # label, say) is skipped without the full match.
    end = _NAME_END.search(line)
    found, is_created = role_of_sample(line[: end.start()] if end else line)
    if found is None:
        return None
    engine, role = found
    match = _SAMPLE.fullmatch(line)
    if match is None:
        raise ExtractionError(f"malformed sample line: {line[:200]}")
    name = match["name"]
    # As Prometheus reads it (Go's ParseFloat): Python's float also takes `1_000` and digits
    # of other scripts.
    if _NUMBER.fullmatch(match["value"]) is None:
        raise ExtractionError(f"value is not a number in line: {line[:200]}")
    number = float(match["value"])
    value = checked_value(number, match["value"], name, is_created or role in GAUGES)
    label_text = match["labels"] or ""
    _check_label_chars(len(label_text), name, limits)
    labels = _parse_labels(label_text)
    position = POSITION_IN_NAME.get(name)
    if position is not None:  # a gauge with its position in its name: as a label
        labels = tuple(sorted(dict(labels, position=position).items()))
    return _Sample(SeriesKey(role, labels, engine), is_created, value, len(label_text))


def _unquoted_name(line: str) -> str:
    """A line with its name quoted in the braces, written the classic way (`name{...} v`)."""
    quoted = _QUOTED_NAME.match(line)
    if quoted is None:
        raise ExtractionError(f"malformed sample line: {line[:200]}")
    name, rest = _unescape(quoted[1]), line[quoted.end() :]
    if rest.startswith("}"):
        return name + rest[1:]
    return name + "{" + rest


def checked_value(number: float, shown: str, name: str, optional: bool) -> float | None:
    """A sample's value as the arithmetic reads it, whichever source read it: a counter must
    be a finite count up to 2**53 (`ExtractionError` saying why not); an `optional` one (a
    `_created` time, a gauge) without a finite value is None, read as absent."""
    if optional:
        return number if math.isfinite(number) else None
    if not math.isfinite(number) or number < 0:
        raise ExtractionError(f"counter value {shown} is not a finite count: {name}")
    if number > MAX_COUNTER:
        raise ExtractionError(f"counter value {shown} is above 2^53, not exact: {name}")
    return number


def _check_label_chars(chars: int, name: str, limits: ExtractionLimits) -> None:
    if chars > limits.max_label_chars:
        raise ExtractionError(
            f"a series of {name} has labels of {chars} characters, more than "
            f"{limits.max_label_chars} (SPECDEC_MAX_SERIES_LABEL_CHARS)"
        )


def _parse_line(line: str, series: Series, limits: ExtractionLimits) -> None:
    sample = _PARSED.get(line)
    if sample is None:
        sample = _sample_of(line, limits)
        if sample is None:
            return
        if len(line) <= _PARSED_MAX_LINE:
            if len(_PARSED) >= _PARSED_MAX_ENTRIES:
                _PARSED.clear()  # a server whose lines all change: start over, stay bounded
            _PARSED[line] = sample
    elif sample.label_chars > limits.max_label_chars:  # parsed under other limits
        _check_label_chars(sample.label_chars, line.partition("{")[0], limits)
    if sample.value is None:
        return
    key = sample.key
    slot = series.get(key)
    if slot is None:
        if len(series) >= limits.max_series:
            raise ExtractionError(
                f"more than {limits.max_series} spec-decode series (SPECDEC_MAX_SERIES_PER_TARGET)"
            )
        slot = series[key] = SeriesValue()
    if (slot.created if sample.is_created else slot.value) is not None:
        match = _SAMPLE.fullmatch(line)
        assert match is not None  # it parsed
        raise ExtractionError(f"series given twice: {match['name']}{{{match['labels'] or ''}}}")
    if sample.is_created:
        slot.created = sample.value
    else:
        slot.value = sample.value


#: The markers searched for (see `CounterSchema.marker`), each once.
_MARKERS = tuple(dict.fromkeys(schema.marker for schema in SCHEMAS))


def _companion_markers(schema: CounterSchema) -> tuple[str, ...]:
    """A schema's companions' names, which are their own markers, in both spellings; a
    histogram's `_count` with its `_created` (its buckets, never read, are not searched)."""
    names = [
        name
        for family in schema.companions
        for name in (
            (family, family[: -len("_count")] + "_created")
            if family.endswith("_count")
            else (family,)
        )
    ]
    return tuple(spelling for name in names for spelling in spellings(name))


def any_of(words: Iterable[str]) -> str:
    """A regular expression that matches where any of `words` starts, each shared prefix
    written once (`vllm(?::(?:generation_tokens|prompt_tokens)|_(?:...))`). The engine then
    skips to its literal prefix by a fast search and tries the rest only there; a plain
    alternation of the words is tried word by word at each offset (on a 60 KB vLLM payload,
    105-194 us a pass, by the order the words came in, against 64 us)."""
    trie: dict[str, dict[str, Any]] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here

    def written(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + written(node[char]) for char in sorted(node) if char]
        if "" in node:
            return f"(?:{'|'.join(branches)})?" if branches else ""
        return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"

    return written(trie)


#: Where a companion's sample name ends (`role_of_sample`): at once, or after a counter's
#: `_total` or `_created`; then come its labels, its value, or the quote of a quoted name.
#: Names that merely begin with a companion's (`vllm:prompt_tokens_by_source_total`,
#: `vllm:prompt_tokens_cached_total`) are passed over: on an eight-engine vLLM payload, 80 of
#: the 194 lines that the names alone find.
_NAME_ENDS = r'(?=(?:_total|_created)?[{ \t"])'

#: Each engine's companion markers (`_companion_markers`) as one pattern: a single pass over
#: the payload finds every one of their lines (a search per name and spelling cost a pass each,
#: most of a scrape's time on a large payload).
_COMPANION_PATTERNS = tuple(
    (schema.engine, re.compile(any_of(_companion_markers(schema)) + _NAME_ENDS))
    for schema in SCHEMAS
    if schema.companions
)


def extract_spec_decode(text: str, limits: ExtractionLimits = ExtractionLimits()) -> Series:
    """Return the spec-decode series of an exposition payload, keyed by role and labels.

    Only lines that hold a schema's marker are looked at (and a schema's companion families,
    once another of its families has shown; on a payload without spec-decode series, the
    witnesses of the engines whose `WITNESS_MARKERS` lines show); the rest of the payload is
    skipped by substring search. A `_created` sample fills `SeriesValue.created` and is never
    counted. A series that has only a `_created` sample is dropped. Reading stops at an
    OpenMetrics ``# EOF`` line. Raises `ExtractionError` on a payload cut off mid-line, a
    malformed spec-decode line, a negative, non-finite or inexact (above 2**53) counter, a
    series given twice, or more series or longer label sets than `limits` allow. A non-finite
    `_created` is ignored.
    """
    series: Series = {}
    limit = _eof_offset(text)
    if limit == len(text) and text and not text.endswith("\n"):
        # Every exposition line ends with a newline: an answer without one was cut off.
        raise ExtractionError("payload cut off mid-line (no final newline)")
    read: set[int] = set()  # starts of the lines parsed: a line with two markers counts once
    for marker in _MARKERS:
        _extract_marked(text, limit, marker, series, limits, read)
    spec_decode = any(value.value is not None for value in series.values())
    if not series:  # no spec decoding: the witnesses alone, found by their own markers
        for marker in WITNESS_MARKERS:
            _extract_marked(text, limit, marker, series, limits, read)
    engines = {key.engine for key in series}
    for engine, pattern in _COMPANION_PATTERNS:
        if engine in engines:
            _extract_matched(text, limit, pattern, series, limits, read)
    found = {key: value for key, value in series.items() if value.value is not None}
    if not spec_decode:
        found.update(
            (SeriesKey(Role.SPEC_LIKE, (("family", name),), ServingEngine.UNRECOGNISED),
             SeriesValue(value=1.0))
            for name in spec_like_families(text[:limit])
        )  # fmt: skip
    return found


#: Substrings of the names of families that look like spec decoding (`speculative`,
#: `spec_decode`, `draft_tokens`, ...). Few, as each is one search of the whole payload: a
#: payload without spec decoding (vLLM with it off) pays for them at every scrape.
_SPEC_LIKE = ("spec", "draft")
#: At most this many such names are told, each at most this long.
SPEC_LIKE_MAX_NAMES = 8
_SPEC_LIKE_MAX_CHARS = 120
_SPEC_LIKE_MAX_HITS = 256  # lines looked at per substring
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum")


def spec_like_families(text: str) -> list[str]:
    """The names of the families of `text` that look like spec decoding (`spec` or `draft` in
    the name; the first `SPEC_LIKE_MAX_NAMES`, sorted): what a payload that
    no schema reads holds, for its result to name. Found by substring search, as extraction
    finds its lines; only a payload without any spec-decode series is looked at."""
    names: set[str] = set()
    for needle in _SPEC_LIKE:
        found, hits = text.find(needle), 0
        while found != -1 and hits < _SPEC_LIKE_MAX_HITS and len(names) < SPEC_LIKE_MAX_NAMES:
            hits += 1
            start = text.rfind("\n", 0, found) + 1
            end = text.find("\n", found)
            end = len(text) if end == -1 else end
            line = text[start:end]
            if line.startswith(("# TYPE ", "# HELP ")):
                line = line[7:]
            elif line.startswith("#"):
                line = ""
            name = _NAME.match(line)
            if name is not None and needle in name[0] and len(name[0]) <= _SPEC_LIKE_MAX_CHARS:
                base = name[0]
                for suffix in _SUFFIXES:
                    if base.endswith(suffix):
                        base = base[: -len(suffix)]
                        break
                names.add(base)
            found = text.find(needle, end)
    return sorted(names)


def _extract_marked(
    text: str, limit: int, marker: str, series: Series, limits: ExtractionLimits, read: set[int]
) -> None:
    """Parse every sample line of `text[:limit]` that holds `marker` into `series`."""
    found = text.find(marker, 0, limit)
    while found != -1:
        end = _read_line_at(text, found, limit, series, limits, read)
        found = text.find(marker, end, limit)


def _extract_matched(
    text: str,
    limit: int,
    pattern: re.Pattern[str],
    series: Series,
    limits: ExtractionLimits,
    read: set[int],
) -> None:
    """Parse every sample line of `text[:limit]` that `pattern` matches into `series`."""
    found = pattern.search(text, 0, limit)
    while found is not None:
        end = _read_line_at(text, found.start(), limit, series, limits, read)
        found = pattern.search(text, end, limit)


def _read_line_at(
    text: str, at: int, limit: int, series: Series, limits: ExtractionLimits, read: set[int]
) -> int:
    """Parse the line of `text` that holds offset `at` into `series` (a comment, or a line
    parsed before, is skipped); the offset of its end."""
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at, limit)
    if end == -1:
        end = limit
    if text[start] != "#" and start not in read:
        read.add(start)
        line = text[start:end]
        _parse_line(line[:-1] if line.endswith("\r") else line, series, limits)
    return end


def _eof_offset(text: str) -> int:
    """Offset of the OpenMetrics `# EOF` line that ends the payload, else the payload's length.

    OpenMetrics allows nothing after `# EOF`: a payload with lines after one is refused
    (`ExtractionError`), as Prometheus refuses it.
    """
    end = len(text)
    while end and text[end - 1] in "\r\n":
        end -= 1
    if text.endswith("# EOF", 0, end) and (end == 5 or text[end - 6] == "\n"):
        end = max(0, end - 6)
        limit = end
    else:
        limit = len(text)
    found = text.find("# EOF", 0, end)
    while found != -1:
        line_end = text.find("\n", found)
        whole = text[found : len(text) if line_end == -1 else line_end].rstrip("\r")
        if (found == 0 or text[found - 1] == "\n") and whole == "# EOF":
            raise ExtractionError("lines after the OpenMetrics # EOF line that ends a payload")
        found = text.find("# EOF", found + 5, end)
    return limit


def forget_parsed_lines() -> None:
    """Empty the caches of parsed lines and label sets (a cold start, for measuring extraction)."""
    _PARSED.clear()
    _parse_labels.cache_clear()
