"""Extraction of spec-decode series from Prometheus exposition text.

A vLLM `/metrics` payload is large (hundreds of kilobytes for a server of several
instances), of which the spec-decode samples are a few dozen lines. Instead of parsing every
family, `extract_spec_decode` finds the lines whose sample name a schema reads
(`core.counters.SAMPLE_NAMES`) in one pass of one pattern, which looks only at the start of
each line, and parses only those; a line or series the endpoint's previous payload held is
not parsed again (`ExtractionCache`, one per endpoint).
It reads both the text format 0.0.4 and OpenMetrics 1.0: the sample names are the same,
only the family bookkeeping (which we skip) differs.

Correctness is pinned by a differential test against prometheus_client's parsers.
"""

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from specdec_collector.core.counters import (
    COMPANIONS,
    GAUGES,
    POSITION_IN_NAME,
    READ_SAMPLES,
    SAMPLE_NAMES,
    Role,
    ServingEngine,
    escaped,
)

_NUMBER = re.compile(
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[Ii][Nn][Ff](?:[Ii][Nn][Ii][Tt][Yy])?)"
    r"|[Nn][Aa][Nn]",
    re.ASCII,
)
# A sample line's parts after its name: an optional label set (quoted values may hold `}`,
# `,`, `"` escaped), then its value, then an optional timestamp and OpenMetrics exemplar.
_LABELS = r'(?:\{(?P<labels>(?:[^"}]++|"(?:[^"\\]++|\\.)*+")*+)\})?'
_AFTER_VALUE = r"(?:[ \t]+(?P<timestamp>[^ \t#]+))?(?:[ \t]+#.*)?[ \t]*"
#: One sample line, whatever its value.
_SAMPLE = re.compile(
    r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)" + _LABELS + r"[ \t]+(?P<value>[^ \t]+)" + _AFTER_VALUE
)
#: What follows a sample's name, its value a number.
_AFTER_NAME = re.compile(_LABELS + rf"[ \t]+(?P<value>{_NUMBER.pattern})" + _AFTER_VALUE, re.ASCII)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]++|\\.)*+)"[ \t]*(,|$)')
_ESCAPE = re.compile(r'\\([\\"n])')
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


class _Sample(NamedTuple):
    """What one sample line says, as far as it does not depend on the payload around it."""

    key: SeriesKey
    is_created: bool
    value: float | None  # None: a `_created` or gauge without a finite value, read as absent
    label_chars: int
    series: tuple[str, str]  # its sample name and label text


class _Known(NamedTuple):
    """What a series' lines share: its key, whether a `_created`, and whether its value is
    optional (see `checked_value`)."""

    key: SeriesKey
    is_created: bool
    optional: bool


#: Lines (and series) at most this long are kept in an `ExtractionCache`, at most this many
#: of each per endpoint: what one payload may hold is bounded by `ExtractionLimits` already.
CACHED_LINE_MAX_CHARS = 512
CACHED_MAX_ENTRIES = 8192


class ExtractionCache:
    """What one endpoint's previous payload parsed to, for its next: Prometheus' scrapeCache,
    for the lines the extraction reads.

    Between two scrapes of a server most spec-decode lines repeat (every `_created`, and the
    counters of an idle engine); a busy server's counters change, but not their series, whose
    lines are then read by splitting their value off. When the entries outgrow what the last
    payload used (twice over), only those are kept, so a target whose labels churn flushes its
    own cache and no other's.

    Every entry is a pure function of its key, but the cache is not for two extractions at
    once: its owner (`sources.scrape.caches.EndpointCaches`) hands it to one at a time. An
    extraction without a cache keeps what it parsed for that payload only.
    """

    __slots__ = ("labels", "lines", "series")

    def __init__(self) -> None:
        self.lines: dict[str, _Sample] = {}
        self.series: dict[tuple[str, str], _Known] = {}
        # Label sets parsed: `_total` and `_created` share them, and so do the families of
        # one engine instance.
        self.labels: dict[str, tuple[tuple[str, str], ...]] = {}

    def __len__(self) -> int:
        return len(self.lines) + len(self.series) + len(self.labels)

    def keep_only(self, used: list[tuple[str, str]]) -> None:
        """Keep what the payload whose lines (and names) are `used` needed, once the cache
        holds more than twice that: Prometheus' flush of the entries a scrape did not see."""
        most = 2 * len(used) + _SLACK
        if len(self.lines) > most:
            self.lines = {line: self.lines[line] for line, _ in used if line in self.lines}
        if len(self.series) > most:
            kept = (sample.series for sample in self.lines.values())
            self.series = {key: self.series[key] for key in kept if key in self.series}
        if len(self.labels) > most:
            self.labels = {}

    def keep(self, entries: dict[Any, Any], key: Any, value: Any) -> None:
        if len(entries) < CACHED_MAX_ENTRIES:
            entries[key] = value


#: Entries a cache may hold beyond twice what its last payload used before it is flushed.
_SLACK = 64


def _sample_of(line: str, name: str, limits: ExtractionLimits, seen: ExtractionCache) -> _Sample:
    """The sample of a line whose sample name is `name` (one of `SAMPLE_NAMES`); raises
    `ExtractionError` for a line that is not a readable counter."""
    # `name{labels} value` (or `name value`) of a series read before: its value split off.
    head, _, shown = line.rpartition(" ")
    if head == name:
        label_text = ""
    elif head.endswith("}") and head.startswith("{", len(name)):
        label_text = head[len(name) + 1 : -1]
    else:
        label_text = None
    known = None if label_text is None else seen.series.get((name, label_text))
    if known is not None and _NUMBER.fullmatch(shown) is not None:
        assert label_text is not None  # known
        _check_label_chars(len(label_text), name, limits)
        value = checked_value(float(shown), shown, name, known.optional)
        return _Sample(known.key, known.is_created, value, len(label_text), (name, label_text))
    return _parsed_sample(line, name, limits, seen)


def _parsed_sample(
    line: str, name: str, limits: ExtractionLimits, seen: ExtractionCache
) -> _Sample:
    """`_sample_of` by the whole parse of the line, its series kept for the next payload."""
    if line.startswith('{"'):
        line = _unquoted_name(line)
    found, is_created = READ_SAMPLES[name]
    engine, role = found
    # One match from the end of the name: labels, and a value that is a number as Prometheus
    # reads it (Go's ParseFloat; Python's float also takes `1_000` and digits of other scripts).
    match = _AFTER_NAME.fullmatch(line, len(name))
    if match is None:
        whole = _SAMPLE.fullmatch(line)
        if whole is None:
            raise ExtractionError(f"malformed sample line: {line[:200]}")
        raise ExtractionError(f"value is not a number in line: {line[:200]}")
    shown = match["value"]
    optional = is_created or role in GAUGES
    value = checked_value(float(shown), shown, name, optional)
    label_text = match["labels"] or ""
    _check_label_chars(len(label_text), name, limits)
    labels = seen.labels.get(label_text)
    if labels is None:
        labels = _parse_labels(label_text)
        seen.keep(seen.labels, label_text, labels)
    position = POSITION_IN_NAME.get(name)
    if position is not None:  # a gauge with its position in its name: as a label
        labels = tuple(sorted(dict(labels, position=position).items()))
    key = SeriesKey(role, labels, engine)
    if len(line) <= CACHED_LINE_MAX_CHARS:
        seen.keep(seen.series, (name, label_text), _Known(key, is_created, optional))
    return _Sample(key, is_created, value, len(label_text), (name, label_text))


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


def _parse_line(
    line: str, name: str, series: Series, limits: ExtractionLimits, seen: ExtractionCache
) -> None:
    """Parse a line whose sample name is `name` into `series`."""
    sample = seen.lines.get(line)
    if sample is None:
        sample = _sample_of(line, name, limits, seen)
        if len(line) <= CACHED_LINE_MAX_CHARS:
            seen.keep(seen.lines, line, sample)
    elif sample.label_chars > limits.max_label_chars:  # parsed under other limits
        _check_label_chars(sample.label_chars, name, limits)
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
        match = _SAMPLE.fullmatch(_unquoted_name(line) if line.startswith('{"') else line)
        assert match is not None  # it parsed
        raise ExtractionError(f"series given twice: {match['name']}{{{match['labels'] or ''}}}")
    if sample.is_created:
        slot.created = sample.value
    else:
        slot.value = sample.value


def any_of(words: Iterable[str]) -> str:
    """A regular expression that matches where any of `words` starts, each shared prefix
    written once (`vllm(?::(?:generation_tokens|prompt_tokens)|_(?:...))`). The engine tries
    the rest of a word only after its first characters matched; a plain alternation of the
    words is tried word by word, and costs more the more words there are."""
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


def _either_spelling(names: Iterable[str]) -> str:
    """`any_of` the sample names, a name's `:` matching `_` too: its escaped spelling
    (`counters.escaped`) is not written again: every process compiles the pattern as it
    imports this module, and a pattern with both spellings written out compiles slower."""
    names = set(names)
    escaped_forms = {escaped(name) for name in names if ":" in name}
    words = {name.replace(":", "\0") for name in names if ":" in name}
    words |= {name for name in names if ":" not in name and name not in escaped_forms}
    return any_of(sorted(words)).replace(re.escape("\0"), "[:_]")


#: The start of a line that extraction reads: a sample name some schema reads, in either
#: spelling, written plain (`vllm:prompt_tokens_total{`) or quoted in braces (Prometheus 3's
#: UTF-8 names: `{"vllm:prompt_tokens_total"`), where the name ends; or an OpenMetrics
#: `# EOF`. Names that merely begin with one (`vllm:prompt_tokens_cached_total`, a histogram's
#: `_bucket`) are passed over. One pass of it finds every such line: the engine skips from one
#: newline to the next and tries the names, each shared prefix once, only there. (A search of
#: the payload per marker, one for the companions and one for `# EOF` would cost a pass each.)
_NAME_ENDS = r'(?=[{ \t"\r\n]|\Z)'  # where a name ends: its labels, value, quote or line
_LINE = re.compile(
    r'\n(?:((\{")?+('
    + _either_spelling(SAMPLE_NAMES)
    + ")"
    + _NAME_ENDS
    + r"[^\n]*)|(# EOF[^\n]*))"
)


def extract_spec_decode(
    text: str,
    limits: ExtractionLimits = ExtractionLimits(),
    cache: ExtractionCache | None = None,
) -> Series:
    """Return the spec-decode series of an exposition payload, keyed by role and labels.

    Only the lines whose sample name a schema reads are parsed; one pattern finds them
    (`_LINE`) and skips the rest. A schema's companions (`CounterSchema.companions`) count
    only on a server that shows another of its families; on a payload without any such
    family, those of the engines that show generated tokens. A `_created` sample fills
    `SeriesValue.created` and is never counted. A series that has only a `_created` sample is
    dropped. Reading stops at an OpenMetrics ``# EOF`` line. Raises `ExtractionError` on a
    payload cut off mid-line, a malformed line of a series it reads, a negative, non-finite
    or inexact (above 2**53) counter, a series given twice, or more series or longer label
    sets than `limits` allow. A non-finite `_created` is ignored. `cache` is the endpoint's
    (see `ExtractionCache`): read, and added to.
    """
    seen = ExtractionCache() if cache is None else cache
    lines, eofs = _lines_read(text)
    found = _extracted(text, lines, eofs, limits, seen)
    seen.keep_only(lines)
    return found


def _extracted(
    text: str,
    lines: list[tuple[str, str]],
    eofs: int,
    limits: ExtractionLimits,
    seen: ExtractionCache,
) -> Series:
    limit = _eof_offset(text, eofs)
    if limit == len(text) and text and not text.endswith("\n"):
        # Every exposition line ends with a newline: an answer without one was cut off.
        raise ExtractionError("payload cut off mid-line (no final newline)")
    series: Series = {}
    companions: list[tuple[str, str, ServingEngine, Role]] = []
    for line, name in lines:
        companion = COMPANIONS.get(name)
        if companion is None:
            _parse_line(line, name, series, limits, seen)
        else:
            companions.append((line, name, *companion))
    spec_decode = any(value.value is not None for value in series.values())
    if not series:  # no spec decoding: the witnesses of the engines that generated tokens
        for line, name, _, role in companions:
            if role is Role.GENERATION_TOKENS:
                _parse_line(line, name, series, limits, seen)
        companions = [c for c in companions if c[3] is not Role.GENERATION_TOKENS]
    engines = {key.engine for key in series}
    for line, name, engine, _ in companions:
        if engine in engines:
            _parse_line(line, name, series, limits, seen)
    found = {key: value for key, value in series.items() if value.value is not None}
    if not spec_decode:
        found.update(
            (
                SeriesKey(Role.SPEC_LIKE, (("family", name),), ServingEngine.UNRECOGNISED),
                SeriesValue(value=1.0),
            )
            for name in spec_like_families(text[:limit])
        )
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


def _lines_read(text: str) -> tuple[list[tuple[str, str]], int]:
    """The lines of `text` that `_LINE` finds: (line, sample name) of each sample line, and
    how many are `# EOF`. A name must end as its form says: a quoted one at its quote, a plain
    one where its labels or value begin (or the line ends, which its parse refuses)."""
    first_end = text.find("\n") + 1 or len(text)
    # The first line as if a newline began it, then the others.
    found = _LINE.findall("\n" + text[:first_end]) + _LINE.findall(text, first_end - 1)
    lines: list[tuple[str, str]] = []
    eofs = 0
    for line, quote, name, eof in found:
        if eof:
            eofs += eof.rstrip("\r") == "# EOF"
            continue
        if line.endswith("\r"):
            line = line[:-1]
        if line.startswith('"', len(name) + 2) if quote else not line.startswith('"', len(name)):
            lines.append((line, name))
    return lines, eofs


def _eof_offset(text: str, eofs: int) -> int:
    """Offset of the OpenMetrics `# EOF` line that ends the payload, else the payload's length;
    `eofs` is how many lines are `# EOF`.

    OpenMetrics allows nothing after `# EOF`: a payload with lines after one is refused
    (`ExtractionError`), as Prometheus refuses it.
    """
    end = len(text)
    while end and text[end - 1] in "\r\n":
        end -= 1
    final = text.endswith("# EOF", 0, end) and (end == 5 or text[end - 6] == "\n")
    if eofs > final:
        raise ExtractionError("lines after the OpenMetrics # EOF line that ends a payload")
    return max(0, end - 6) if final else len(text)
