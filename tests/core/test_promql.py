"""One set of counter checks for every source, and what a payload's numbers may be.

A scrape read a negative counter as `na`; the same counter read through Prometheus came back
`ok` with an acceptance rate of -1000 %, a 1e300 one `ok` and `exact`. Here each hostile
value is read both ways."""

from datetime import UTC, datetime

import pytest

from specdec_collector.core.exposition import ExtractionError, extract_spec_decode
from specdec_collector.core.figures import build_result
from specdec_collector.core.promql import SourceError, scrapes_of
from tests.support.payloads import InstanceCounters, vllm_payload

NAME = "vllm:spec_decode_num_drafts_total"
LABELS = 'engine="0",model_name="m"'
T0 = 1_796_000_000.0


def _prometheus_answer(value: str) -> dict[str, object]:
    metric = {"__name__": NAME, "engine": "0", "model_name": "m", "instance": "h:1"}
    return {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": metric, "values": [[T0, value]]}]},
    }


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("-5", "is not a finite count"),
        ("1e300", r"is above 2\^53, not exact"),
        ("+Inf", "is not a finite count"),
        ("NaN", "is not a finite count"),
    ],
)
def test_a_counter_no_scrape_reads_is_read_through_prometheus_by_no_one(
    value: str, reason: str
) -> None:
    with pytest.raises(ExtractionError, match=reason):
        extract_spec_decode(f"{NAME}{{{LABELS}}} {value}\n")
    with pytest.raises(SourceError, match=reason):
        scrapes_of(_prometheus_answer(value))


@pytest.mark.parametrize(
    "value",
    ["1_000", "\u0661\u0660", "0x10", "1,5", "\u0663e2"],  # Arabic-Indic: 10, 3e2
)
def test_numbers_are_what_prometheus_reads_not_what_python_does(value: str) -> None:
    with pytest.raises(ExtractionError, match="not a number"):
        extract_spec_decode(f"{NAME}{{{LABELS}}} {value}\n")


def test_lines_after_an_eof_in_the_middle_make_the_payload_unreadable() -> None:
    ended = f"{NAME}{{{LABELS}}} 5\n# EOF\n"
    assert len(extract_spec_decode(ended)) == 1
    with pytest.raises(ExtractionError, match="after the OpenMetrics # EOF"):
        extract_spec_decode(f'{NAME}{{{LABELS}}} 5\n# EOF\n{NAME}{{engine="1"}} 7\n')
    # A help text that mentions it is not the line.
    assert len(extract_spec_decode(f"# HELP {NAME} ends at # EOF\n{NAME}{{{LABELS}}} 5\n")) == 1


def test_quoted_metric_names_of_prometheus_3_are_read() -> None:
    classic = extract_spec_decode(
        f"{NAME}{{{LABELS}}} 5\n{NAME.replace('drafts', 'draft_tokens')} 9\n"
    )
    quoted = extract_spec_decode(
        f'{{"{NAME}", {LABELS}}} 5\n{{"{NAME.replace("drafts", "draft_tokens")}"}} 9\n'
    )
    assert quoted == classic


def _payload(drafts: int, draft_tokens: int, accepted: list[int]) -> str:
    return vllm_payload([InstanceCounters(drafts, draft_tokens, accepted)])


def test_more_accepted_than_drafted_is_na_saying_so() -> None:
    before = extract_spec_decode(_payload(10, 30, [5, 2, 1]))
    more_than_drafted = extract_spec_decode(_payload(20, 60, [50, 40, 30]))
    result = build_result("u", before, more_than_drafted)
    assert result.status == "na" and result.error is not None
    assert "more tokens accepted (112) than drafted (30)" in result.error
    at_position = extract_spec_decode(
        vllm_payload([InstanceCounters(20, 200, [25, 2, 1], accepted=30)])
    )
    result = build_result("u", before, at_position)
    assert result.status == "na" and result.error is not None
    assert "accepted at position 0 (20) than drafts (10)" in result.error


def test_counts_above_2_53_are_not_called_exact() -> None:
    """Each counter is read up to 2^53; eight instances' increases sum past it."""
    big = 2**53 // 8 * 7
    before = extract_spec_decode(
        vllm_payload([InstanceCounters(0, 0, [0], engine=str(i)) for i in range(8)])
    )
    after = extract_spec_decode(
        vllm_payload([InstanceCounters(big // 4, big, [big // 8], engine=str(i)) for i in range(8)])
    )
    result = build_result("u", before, after)
    assert result.status == "ok" and result.exact is False
    assert any("passed 2^53" in note for note in result.notes or [])
    small = build_result("u", before, extract_spec_decode(_payload(10, 30, [5, 2, 1])))
    assert small.exact is True and not any("2^53" in n for n in small.notes or [])


def test_a_time_at_which_prometheus_sampled_is_kept() -> None:
    (point,) = scrapes_of(_prometheus_answer("5")).points
    assert point[0] == datetime.fromtimestamp(T0, UTC)
