"""Extraction of the spec-decode series, checked against prometheus_client's parsers."""

import math
import re
from unittest.mock import ANY

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families

from specdec_collector.core.counters import (
    COMPANIONS,
    LLAMACPP,
    POSITION_LABELS,
    ROLE_OF_FAMILY,
    ROLE_OF_SAMPLE,
    SAMPLE_NAMES,
    SCHEMAS,
    VLLM_V1,
    WITNESSES,
    CounterSchema,
    Role,
    ServingEngine,
    spellings,
)
from specdec_collector.core.exposition import (
    ExtractionError,
    SeriesKey,
    SeriesValue,
    _lines_read,
    any_of,
    extract_spec_decode,
)
from tests.support.payloads import fixture, prometheus_client_registry


def oracle(text: str, openmetrics: bool = False) -> dict[SeriesKey, SeriesValue]:
    """The spec-decode series as prometheus_client's full parser sees them."""
    parse = openmetrics_families if openmetrics else text_families
    found: dict[SeriesKey, SeriesValue] = {}
    bases: dict[SeriesKey, str] = {}
    for family in parse(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            if sample.name in ROLE_OF_SAMPLE:  # a histogram's part, read whole
                engine, role = ROLE_OF_SAMPLE[sample.name]
                key = SeriesKey(role, labels, engine)
                found.setdefault(key, SeriesValue()).value = sample.value
                bases[key] = sample.name
                continue
            for suffix in ("_total", "_created"):
                base = sample.name[: -len(suffix)]
                if not sample.name.endswith(suffix):
                    continue
                if suffix == "_created" and base + "_count" in ROLE_OF_SAMPLE:
                    engine, role = ROLE_OF_SAMPLE[base + "_count"]
                    key = SeriesKey(role, labels, engine)
                    found.setdefault(key, SeriesValue()).created = sample.value
                    bases[key] = base + "_count"
                elif base in ROLE_OF_FAMILY:
                    engine, role = ROLE_OF_FAMILY[base]
                    key = SeriesKey(role, labels, engine)
                    slot = found.setdefault(key, SeriesValue())
                    bases[key] = base
                    if suffix == "_total":
                        slot.value = sample.value
                    else:
                        slot.created = sample.value
    # A schema's companions count only on a server that shows another of its families; on one
    # without spec-decode families, those of the engines that show generated tokens.
    companions = {
        spelling
        for schema in SCHEMAS
        for family in schema.companions
        for spelling in spellings(family)
    }
    shown = {key.engine for key, base in bases.items() if base not in companions}
    if not shown:
        shown = {key.engine for key in found if key.role is Role.GENERATION_TOKENS}
    return {
        key: value
        for key, value in found.items()
        if value.value is not None and (bases[key] not in companions or key.engine in shown)
    }


@pytest.mark.parametrize(
    "name", ["vllm_v1_dp1_k5.txt", "vllm_v1_dp8_k5.txt", "vllm_v1_dp1_nospec.txt"]
)
def test_fixtures_agree_with_prometheus_client(name: str) -> None:
    text = fixture(name)
    assert extract_spec_decode(text) == oracle(text)


def test_dp8_fixture_has_every_engine_and_position() -> None:
    series = extract_spec_decode(fixture("vllm_v1_dp8_k5.txt"))
    engines = {dict(key.labels)["engine"] for key in series}
    positions = {
        dict(key.labels)["position"] for key in series if key.role is Role.ACCEPTED_PER_POSITION
    }
    assert engines == {str(e) for e in range(8)}
    assert positions == {str(p) for p in range(5)}
    # Three counters, five positions and six witnesses an engine: generated and prompt
    # tokens, finished requests, decode seconds, first tokens, steps.
    witnesses = [key for key in series if key.role in WITNESSES]
    assert len(witnesses) == 8 * 6
    assert len(series) == 8 * (3 + 5 + 6)


def test_created_is_never_a_count() -> None:
    text = (
        'vllm:spec_decode_num_drafts_created{engine="0"} 1.7e+09\n'
        'vllm:spec_decode_num_drafts_total{engine="0"} 7\n'
        'vllm:spec_decode_num_draft_tokens_created{engine="0"} 1.7e+09\n'
    )
    series = extract_spec_decode(text)
    assert series == {SeriesKey(Role.DRAFTS, (("engine", "0"),)): SeriesValue(7.0, 1.7e9)}


def test_escaped_label_values_exponents_and_timestamps() -> None:
    model = 'a "quoted", {braced} model\\name\nwith newline'
    escaped = model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    text = (
        "# HELP other_total x\n"
        f'other_total{{model_name="{escaped}"}} 3\n'
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{escaped}"}} 6.491797e+06 1700000000000\n'
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="{escaped}", position="11"}} 1E2\n'
    )
    series = extract_spec_decode(text)
    assert series == oracle(text)
    drafts = series[SeriesKey(Role.DRAFTS, (("engine", "0"), ("model_name", model)))]
    assert drafts.value == 6_491_797.0


def test_openmetrics_with_eof_and_exemplar() -> None:
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0"} 12.0 # {trace_id="a b"} 1.0\n'
        'vllm:spec_decode_num_drafts_created{engine="0"} 1.7e+09\n'
        "# EOF\n"
    )
    series = extract_spec_decode(text)
    assert series == {SeriesKey(Role.DRAFTS, (("engine", "0"),)): SeriesValue(12.0, 1.7e9)}


def test_payload_starting_with_a_spec_line_and_crlf() -> None:
    text = "vllm:spec_decode_num_drafts_total 4\r\nvllm:spec_decode_num_draft_tokens_total 20\r\n"
    series = extract_spec_decode(text)
    assert series[SeriesKey(Role.DRAFTS, ())].value == 4.0
    assert series[SeriesKey(Role.DRAFT_TOKENS, ())].value == 20.0


def test_other_names_with_the_prefix_are_ignored() -> None:
    text = (
        "vllm:spec_decode_num_drafts_totally 5\n"
        "vllm:spec_decode_draft_acceptance_rates 0.5\n"
        'xvllm:spec_decode_num_drafts_total{a="\\nvllm:spec_decode_num_drafts_total 9"} 1\n'
    )
    # None is read as a counter; they are only named, as families no schema reads.
    assert extract_spec_decode(text) == {
        SeriesKey(Role.SPEC_LIKE, (("family", name),), ServingEngine.UNRECOGNISED): ANY
        for name in [
            "vllm:spec_decode_draft_acceptance_rates",
            "vllm:spec_decode_num_drafts_totally",
            "xvllm:spec_decode_num_drafts",
        ]
    }


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('vllm:spec_decode_num_drafts_total{engine="0",mod', "malformed sample line"),
        ("vllm:spec_decode_num_drafts_total NaN", "not a finite count"),
        ("vllm:spec_decode_num_drafts_total +Inf", "not a finite count"),
        ("vllm:spec_decode_num_drafts_total -3", "not a finite count"),
        ("vllm:spec_decode_num_drafts_total abc", "not a number"),
        ('vllm:spec_decode_num_drafts_total{a="1",a="2"} 1', "given twice"),
        ('vllm:spec_decode_num_drafts_total{a="1" b="2"} 1', "malformed labels"),
    ],
)
def test_bad_spec_lines_raise(line: str, message: str) -> None:
    with pytest.raises(ExtractionError, match=message):
        extract_spec_decode(f"# HELP x y\n{line}\n")


def test_the_same_series_twice_raises() -> None:
    line = 'vllm:spec_decode_num_drafts_total{engine="0"} 1\n'
    twice = 'series given twice: vllm:spec_decode_num_drafts_total{engine="0"}$'
    with pytest.raises(ExtractionError, match=twice):
        extract_spec_decode(line + line)
    quoted = '{"vllm:spec_decode_num_drafts_total", engine="0"} 1\n'
    with pytest.raises(ExtractionError, match=twice):
        extract_spec_decode(line + quoted)


# --- differential test against prometheus_client on generated payloads ---------------------

_HOSTILE = st.text(alphabet=st.sampled_from([*'ab09 ,{}="\\\n=#:.', "é", "中", "\t"]), max_size=12)
_NAMES = sorted(f"{base}{suffix}" for base in ROLE_OF_FAMILY for suffix in ("_total", "_created"))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# Built once: a strategy built at each draw cost the test most of its time (validating it).
_VALUES = st.one_of(
    st.integers(min_value=0, max_value=10**12).map(float),
    st.floats(min_value=0, max_value=1e15, allow_nan=False, allow_infinity=False),
)
_STYLES = st.sampled_from(["repr", "exp", "int"])


def _number(draw: st.DrawFn) -> tuple[str, float]:
    value = draw(_VALUES)
    style = draw(_STYLES)
    if style == "exp":
        text = f"{value:e}"
    elif style == "int" and value.is_integer():
        text = str(int(value))
    else:
        text = repr(value)
    return text, float(text)


@st.composite
def payloads(draw: st.DrawFn) -> tuple[str, bool]:
    """A payload in text 0.0.4 or OpenMetrics 1.0 with spec series among hostile noise."""
    openmetrics = draw(st.booleans())
    label_sets = draw(
        st.lists(
            st.dictionaries(
                st.sampled_from(["engine", "model_name", "position", "x_y"]), _HOSTILE, max_size=3
            ),
            min_size=1,
            max_size=4,
            unique_by=lambda d: tuple(sorted(d.items())),
        )
    )
    lines: list[str] = []
    noise_labels = draw(_HOSTILE)
    lines.append('# HELP noise_metric help with "quotes" and vllm:spec_decode_num_drafts_total')
    lines.append("# TYPE noise_metric gauge")
    lines.append(f'noise_metric{{label="{_escape(noise_labels)}"}} 1.5')
    for family in sorted({family for schema in SCHEMAS for family in schema.families}):
        base = draw(st.sampled_from(spellings(family)))  # one payload, one spelling of each
        families = draw(st.sampled_from(["both", "total", "none"]))
        if families == "none":
            continue
        if openmetrics:
            lines.append(f"# TYPE {base} counter")
        for index, labels in enumerate(label_sets):
            rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            if not openmetrics and draw(st.booleans()):
                rendered = rendered.replace('",', '", ')
            label_part = f"{{{rendered}}}" if rendered or draw(st.booleans()) else ""
            value, _ = _number(draw)
            stamp = ""
            if draw(st.booleans()):
                stamp = " 1700000000.5" if openmetrics else " 1700000000000"
            if not openmetrics and index == 0:
                lines.append(f"# TYPE {base}_total counter")
            lines.append(f"{base}_total{label_part} {value}{stamp}")
            if families == "both":
                created, _ = _number(draw)
                lines.append(f"{base}_created{label_part} {created}{stamp}")
    lines.append(f'vllm:other{{label="{_escape(draw(_HOSTILE))}"}} 2')
    text = "\n".join(lines) + "\n"
    if openmetrics:
        text += "# EOF\n"
    return text, openmetrics


@pytest.mark.slow  # 300 examples
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads())
def test_extraction_matches_prometheus_client(case: tuple[str, bool]) -> None:
    text, openmetrics = case
    expected = oracle(text, openmetrics)
    got = extract_spec_decode(text)
    assert got.keys() == expected.keys()
    for key, value in got.items():
        assert value.value == expected[key].value
        assert value.created == expected[key].created or (
            value.created is not None and math.isclose(value.created, expected[key].created or 0)
        )


def test_eof_forms() -> None:
    line = 'vllm:spec_decode_num_drafts_total{engine="0"} 3'
    assert extract_spec_decode("# EOF\n") == {}
    assert len(extract_spec_decode(f"{line}\n# EOF")) == 1
    assert len(extract_spec_decode(f"{line}\n# EOF\r\n")) == 1
    assert len(extract_spec_decode(f"{line}\n")) == 1


def test_payload_cut_mid_line_is_an_error() -> None:
    whole = 'vllm:spec_decode_num_drafts_total{engine="0"} 486223\n'
    # Cut inside the value: the line still parses, only the missing newline tells.
    with pytest.raises(ExtractionError, match="cut off mid-line"):
        extract_spec_decode(whole[:-3])
    with pytest.raises(ExtractionError, match="cut off mid-line"):
        extract_spec_decode(whole + "# HELP other_metric and so")


# --- the schema table ------------------------------------------------------------------------


def test_every_schema_names_its_roles_within_its_prefix() -> None:
    counted = {Role.DRAFTS, Role.DRAFT_TOKENS, Role.ACCEPTED, Role.ACCEPTED_PER_POSITION}
    witnesses = {Role.GENERATION_TOKENS, Role.PROMPT_TOKENS}
    assert set(VLLM_V1.families.values()) == (
        counted | witnesses | {Role.EMITTED, Role.DRAFTS_BY_LENGTH}
    )
    assert set(VLLM_V1.samples.values()) == {
        Role.REQUESTS,
        Role.DECODE_SECONDS,
        Role.FIRST_TOKENS,
        Role.DECODE_CALLS,
    }
    assert set(LLAMACPP.families.values()) == (
        counted | witnesses | {Role.DECODE_CALLS, Role.DECODE_SECONDS}
    )
    for schema in SCHEMAS:
        names = [*schema.families, *schema.gauges, *schema.samples, *schema.named_positions]
        assert all(n.startswith(schema.prefix) for n in names if n not in schema.companions)
    # TGI's histogram buckets are indexed by their bound, DSpark's drafts by their length.
    assert {schema.position_label for schema in SCHEMAS} == {"position", "token_position", "le"}
    assert {
        "position",
        "token_position",
        "le",
        "draft_length",
    } == POSITION_LABELS


def test_a_family_outside_its_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="outside prefix"):
        CounterSchema(ServingEngine.LLAMACPP, "x:", {"y:drafts": Role.DRAFTS}, "position")


def test_counters_above_two_to_the_53_are_refused_and_a_non_finite_created_is_ignored() -> None:
    name = "vllm:spec_decode_num_drafts"
    exact = f'{name}_total{{engine="0"}} 9007199254740992.0\n'  # 2**53: still exact
    assert next(iter(extract_spec_decode(exact).values())).value == 2**53
    with pytest.raises(ExtractionError, match="above 2\\^53, not exact"):
        extract_spec_decode(f'{name}_total{{engine="0"}} 9007199254740994.0\n')
    with pytest.raises(ExtractionError, match="above 2\\^53"):
        extract_spec_decode(f'{name}_total{{engine="0"}} 1.7e308\n')
    for created in ("+Inf", "-Inf", "NaN"):
        text = f'{name}_total{{engine="0"}} 5.0\n{name}_created{{engine="0"}} {created}\n'
        (value,) = extract_spec_decode(text).values()
        assert (value.value, value.created) == (5.0, None)


def test_a_line_naming_other_series_in_a_label_is_read_once() -> None:
    """A label value may name another schema's series: the line is still one sample."""
    text = (
        'vllm:spec_decode_num_drafts_total{note="sglang:spec_verify_calls"} 4\n'
        'other_metric{note="spec_decode_"} 1\n'
    )
    assert extract_spec_decode(text) == oracle(text)
    assert len(extract_spec_decode(text)) == 1


def test_lines_read_before_give_the_same_series_and_still_obey_the_limits() -> None:
    """Parsed lines are remembered across an endpoint's payloads; the limits of each call
    still apply."""
    from specdec_collector.core.exposition import ExtractionCache, ExtractionLimits

    line = f'vllm:spec_decode_num_drafts_total{{engine="0",pod="{"p" * 60}"}} 4\n'
    cache = ExtractionCache()
    first = extract_spec_decode(line, cache=cache)
    assert len(cache.lines) == 1
    assert extract_spec_decode(line, cache=cache) == first == oracle(line)
    with pytest.raises(
        ExtractionError,
        match="of vllm:spec_decode_num_drafts_total has labels of 77 characters, more than 50",
    ):
        extract_spec_decode(line, ExtractionLimits(max_label_chars=50), cache)
    twice = 'series given twice: vllm:spec_decode_num_drafts_total{engine="0",pod="p'
    with pytest.raises(ExtractionError, match=twice):
        extract_spec_decode(line + line, cache=cache)


def test_an_endpoints_cache_keeps_what_its_last_payload_used_once_it_outgrows_it() -> None:
    """Flushed by iteration, as Prometheus' scrapeCache: once the entries are more than twice
    what the last payload used (and a slack), only those stay, so a server whose labels churn
    cannot grow its cache."""
    from specdec_collector.core.exposition import ExtractionCache

    cache = ExtractionCache()
    bound = 2 * 1 + 64
    for pod in range(500):
        text = f'vllm:spec_decode_num_drafts_total{{pod="{pod}"}} 4\n'
        assert extract_spec_decode(text, cache=cache) == oracle(text)
        assert text[:-1] in cache.lines
        assert max(len(cache.lines), len(cache.series), len(cache.labels)) <= bound + 1
    steady = 'vllm:spec_decode_num_drafts_total{pod="0"} 4\n'
    for _ in range(3):  # an idle server's same answer: its series stay known for a busy one
        extract_spec_decode(steady, cache=cache)
        assert ("vllm:spec_decode_num_drafts_total", 'pod="0"') in cache.series


def test_openmetrics_with_escaped_names_reads_as_the_classic_text() -> None:
    registry = prometheus_client_registry()
    classic = extract_spec_decode(generate_latest(registry).decode())
    escaped = openmetrics_latest(registry, escaping="underscores").decode()  # type: ignore[no-untyped-call]
    assert "sglang_spec_verify_calls_total" in escaped  # what 0.23 and later write
    assert "lmdeploy_spec_decode_num_drafts_total" in escaped
    assert {key.engine for key in classic} >= {ServingEngine.SGLANG}
    assert extract_spec_decode(escaped) == classic


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.text(alphabet="ab:_.{", min_size=1, max_size=6), min_size=1, max_size=8),
    text=st.text(alphabet="ab:_.{\n", max_size=40),
)
def test_any_of_matches_where_any_word_starts(words: list[str], text: str) -> None:
    """The sample names' pattern, prefixes written once, finds exactly the offsets where one of
    its words starts (what a plain alternation finds)."""
    pattern = re.compile(any_of(words))
    starts = {at for at in range(len(text)) if any(text.startswith(w, at) for w in words)}
    assert {at for at in range(len(text)) if pattern.match(text, at)} == starts
    assert any_of(["vllm:a", "vllm:b", "vllm_a"]) == "vllm(?::(?:a|b)|_a)"


def test_the_line_search_finds_the_samples_read_not_the_families_they_begin() -> None:
    """A sample read is found in every form (`_total`, `_created`, no labels, a quoted name,
    the escaped spelling, a histogram's `_count` and its `_created`), first line or not; a
    family whose name merely begins with one is passed over, and so are a histogram's bucket,
    a name in a comment or a label, and a line with leading blanks."""
    found = [
        'vllm:prompt_tokens_total{engine="0"} 5',
        "vllm:prompt_tokens_created 1.7e9",
        "vllm:generation_tokens_total\t5",
        '{"vllm:generation_tokens_total", engine="0"} 5',
        '{"vllm:spec_decode_num_drafts_total"} 5',
        "vllm_generation_tokens_total 5",
        'vllm:e2e_request_latency_seconds_count{engine="0"} 3',
        "vllm:e2e_request_latency_seconds_created 1.7e9",
        "sglang_spec_verify_calls_total 4",
        "vllm:spec_decode_draft_acceptance_rate 0.5",
    ]
    passed_over = [
        'vllm:prompt_tokens_by_source_total{source="cache"} 5',
        "vllm:prompt_tokens_cached_total 5",
        'vllm:e2e_request_latency_seconds_bucket{le="1"} 3',
        "vllm:generation_tokens_per_second 5",
        "vllm:generation_tokens 5",
        "# HELP vllm:generation_tokens_total Generated tokens.",
        'other_metric{name="vllm:generation_tokens_total"} 1',
        " vllm:generation_tokens_total 5",
        '{"vllm:generation_tokens_total{x"} 5',
        'vllm:generation_tokens_total"} 5',
    ]
    for line in found:
        assert [text for text, _ in _lines_read(f"{line}\n")[0]] == [line], line
        assert [text for text, _ in _lines_read(f"x 1\n{line}\r\n")[0]] == [line], line
    for line in passed_over:
        assert _lines_read(f"{line}\n{line}\n") == ([], 0), line
    assert _lines_read("# EOF\nx 1\n# EOFx\n# EOF\r\n")[1] == 2
    # A name the schemas read with nothing after it is found, and its parse refuses it.
    bare = "vllm:spec_decode_num_drafts_total"
    for text in (bare, f"{bare}\n", f"{bare}\r\n", f"x 1\n{bare}\n"):
        assert [name for _, name in _lines_read(text)[0]] == [bare], text
    with pytest.raises(ExtractionError, match="malformed sample line"):
        extract_spec_decode(f"{bare}\n")


def test_the_companions_are_known_by_every_name_their_samples_have() -> None:
    """A companion is told by its sample's name: both spellings, `_total` and `_created`, a
    histogram's `_count` with its `_created`, a gauge by itself; no spec-decode family."""
    assert (
        {
            "vllm:generation_tokens_total",
            "vllm_generation_tokens_created",
            "vllm:e2e_request_latency_seconds_count",
            "vllm:e2e_request_latency_seconds_created",
            "llamacpp:tokens_predicted_seconds_total",
            "sglang_spec_num_draft_tokens",
        }
        <= COMPANIONS.keys()
        <= SAMPLE_NAMES
    )
    assert COMPANIONS["vllm_generation_tokens_total"] == (
        ServingEngine.VLLM,
        Role.GENERATION_TOKENS,
    )
    assert not [name for name in COMPANIONS if "spec_decode" in name]
    assert "vllm:e2e_request_latency_seconds_bucket" not in SAMPLE_NAMES


def test_a_series_read_before_is_read_from_its_value_alone_as_the_whole_parse_reads_it() -> None:
    """A line of a known series (`name{labels} value`, a busy server's next answer) gives what
    the whole parse gives; any other form of it is parsed whole, and refused the same way."""
    from specdec_collector.core.exposition import ExtractionCache, ExtractionLimits

    name = "vllm:spec_decode_num_drafts_total"
    for series in (
        f'{name}{{engine="0"}}',
        f'{name}{{engine="a}} 5",x="\\\\"}}',
        name,
        f"{name}{{}}",
    ):
        for tail in (" 5", " 5.5e+02", " 5 1700000000000", ' 5 # {trace="x"} 1', "\t5", " 5  "):
            cache = ExtractionCache()
            whole = extract_spec_decode(f"{series}{tail}\n", cache=cache)
            assert extract_spec_decode(f"{series}{tail}\n", cache=cache) == whole  # the line again
            cache = ExtractionCache()
            extract_spec_decode(f"{series} 4\n", cache=cache)  # the series known, not the line
            assert len(cache.series) == 1
            assert extract_spec_decode(f"{series}{tail}\n", cache=cache) == whole, (series, tail)
        for bad, refused in ((" 5x", "value is not a number"), (" -1", "not a finite count")):
            with pytest.raises(ExtractionError, match=refused):
                extract_spec_decode(f"{series}{bad}\n", cache=cache)
    labelled = f'{name}{{engine="0",pod="{"p" * 60}"}}'
    cache = ExtractionCache()
    extract_spec_decode(f"{labelled} 4\n", cache=cache)
    with pytest.raises(ExtractionError, match="labels of 77 characters, more than 50"):
        extract_spec_decode(f"{labelled} 5\n", ExtractionLimits(max_label_chars=50), cache)
