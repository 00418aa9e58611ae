"""Spec-decode arithmetic: increases, resets, sums and the AISBench result dict."""

from datetime import UTC, datetime, timedelta
from fractions import Fraction

from specdec_collector.core.arithmetic import (
    INVALID_COUNTERS,
    NO_ACTIVITY,
    NO_METRICS,
    timeline,
    window_increase,
)
from specdec_collector.core.counters import Role
from specdec_collector.core.exposition import Series, SeriesKey, SeriesValue, extract_spec_decode
from specdec_collector.core.figures import bounded_result, build_result
from specdec_collector.core.readings import Failure, FailureKind, Reading
from specdec_collector.core.results import TargetResult
from tests.support.payloads import InstanceCounters, spec_block, vllm_payload

URL = "http://10.0.0.1:8080/metrics"


def snap(*engines: InstanceCounters) -> Series:
    return extract_spec_decode(vllm_payload(list(engines)))


def test_seed_example_exactly() -> None:
    before = snap(
        InstanceCounters(drafts=100, draft_tokens=500, accepted_per_pos=[80, 60, 50, 40, 30])
    )
    after = snap(
        InstanceCounters(drafts=263, draft_tokens=1315, accepted_per_pos=[242, 222, 212, 202, 191])
    )
    result = build_result(URL, before, after).as_json()
    assert result == {
        "status": "ok",
        "url": URL,
        "error": None,
        "data": {
            "num_drafts": 163,
            "draft_tokens": 815,
            "accepted_tokens": 809,
            # The design's worked example: full floats, as in AISBench's own file.
            "acceptance_rate": 99.2638036809816,
            "acceptance_length": 5.96319018404908,
            "per_position_acceptance_rates": {
                "0": 0.9938650306748467, "1": 0.9938650306748467, "2": 0.9938650306748467,
                "3": 0.9938650306748467, "4": 0.9877300613496932,
            },
        },
        "raw": {
            "before": {"num_drafts": 100, "num_draft_tokens": 500, "num_accepted_tokens": 260,
                       "accepted_per_pos": {"0": 80, "1": 60, "2": 50, "3": 40, "4": 30}},
            "after": {"num_drafts": 263, "num_draft_tokens": 1315, "num_accepted_tokens": 1069,
                      "accepted_per_pos": {"0": 242, "1": 222, "2": 212, "3": 202, "4": 191}},
        },
        "engine": "vllm",
        "exact": True,
        "notes": [],
        "samples": {"taken": 0, "failed": 0},
        "restarts": 0,
        "series_resets": 0,
        "models": ["meta-llama/Llama-3.1-8B-Instruct"],  # the series' model_name label
        # Beside AISBench's keys: every draft 5 long, so drafts by tokens accepted: 163 - 162
        # accepted none, 162 - 161 four, 161 all five.
        "accepted_distribution": {"0": 1, "1": 0, "2": 0, "3": 0, "4": 1, "5": 161},
    }  # fmt: skip


def test_two_engines_and_two_models_are_summed() -> None:
    def counters(scale: int) -> list[InstanceCounters]:
        return [
            InstanceCounters(
                drafts=scale * (10 + i), draft_tokens=scale * 3 * (10 + i),
                accepted_per_pos=[scale * (7 + i), scale * (5 + i), scale * (2 + i)],
                engine=engine, model=model,
            )
            for i, (engine, model) in enumerate([("0", "m-a"), ("1", "m-a"), ("0", "m-b"), ("1", "m-b")])
        ]  # fmt: skip

    result = build_result(URL, snap(*counters(1)), snap(*counters(4))).as_json()
    drafts = 3 * sum(10 + i for i in range(4))
    accepted = [
        3 * sum(7 + i for i in range(4)),
        3 * sum(5 + i for i in range(4)),
        3 * sum(2 + i for i in range(4)),
    ]
    assert result["data"]["num_drafts"] == drafts
    assert result["data"]["draft_tokens"] == 3 * drafts
    assert result["data"]["accepted_tokens"] == sum(accepted)
    assert result["data"]["per_position_acceptance_rates"] == {
        str(pos): float(Fraction(count, drafts)) for pos, count in enumerate(accepted)
    }


def test_one_engine_reset_while_the_other_keeps_counting() -> None:
    before = snap(
        InstanceCounters(
            drafts=1000, draft_tokens=3000, accepted_per_pos=[600, 300, 100], engine="0"
        ),
        InstanceCounters(
            drafts=500, draft_tokens=1500, accepted_per_pos=[300, 200, 100], engine="1"
        ),
    )
    after = snap(
        InstanceCounters(drafts=1400, draft_tokens=4200, accepted_per_pos=[840, 420, 140], engine="0"),
        # engine 1 restarted: its counters fell and its _created moved on
        InstanceCounters(drafts=40, draft_tokens=120, accepted_per_pos=[30, 20, 10], engine="1",
                       created=1_796_040_000.0),
    )  # fmt: skip
    result = build_result(URL, before, after).as_json()
    assert result["data"]["num_drafts"] == 400 + 40
    assert result["data"]["draft_tokens"] == 1200 + 120
    assert result["data"]["accepted_tokens"] == (240 + 120 + 40) + (30 + 20 + 10)
    assert result["series_resets"] == 3 + 3  # every family of engine 1
    assert result["restarts"] == 1  # ...of one engine


def test_restarted_engine_that_outgrew_its_old_count_is_found_by_created() -> None:
    before = snap(InstanceCounters(drafts=100, draft_tokens=300, accepted_per_pos=[50, 30, 10]))
    after = snap(
        InstanceCounters(
            drafts=150, draft_tokens=450, accepted_per_pos=[80, 40, 20], created=1_796_050_000.0
        )
    )
    result = build_result(URL, before, after).as_json()
    # Without _created, the increase would look like 50 drafts; the engine counted 150 since it restarted.
    assert result["data"]["num_drafts"] == 150
    assert result["data"]["accepted_tokens"] == 140
    assert (result["series_resets"], result["restarts"]) == (6, 1)


def test_twelve_positions_come_in_numeric_order() -> None:
    accepted_before = [0] * 12
    accepted_after = [1200 - 90 * pos for pos in range(12)]
    before = snap(InstanceCounters(drafts=0, draft_tokens=0, accepted_per_pos=accepted_before))
    after = snap(InstanceCounters(drafts=1300, draft_tokens=15600, accepted_per_pos=accepted_after))
    rates = build_result(URL, before, after).as_json()["data"]["per_position_acceptance_rates"]
    assert list(rates) == [str(pos) for pos in range(12)]
    assert rates["10"] == 300 / 1300
    assert rates["11"] == 210 / 1300


def test_series_absent_before_starts_from_zero() -> None:
    before = snap(
        InstanceCounters(drafts=10, draft_tokens=30, accepted_per_pos=[5, 3, 1], engine="0")
    )
    after = snap(
        InstanceCounters(drafts=20, draft_tokens=60, accepted_per_pos=[10, 6, 2], engine="0"),
        InstanceCounters(drafts=7, draft_tokens=21, accepted_per_pos=[4, 2, 1], engine="1"),
    )
    assert build_result(URL, before, after).as_json()["data"]["num_drafts"] == 10 + 7


def test_no_spec_families_is_an_error_of_that_phase() -> None:
    nospec: Series = {}
    fine = snap(InstanceCounters(drafts=10, draft_tokens=30, accepted_per_pos=[5, 3, 1]))
    result = build_result(URL, nospec, fine).as_json()
    assert result["status"] == "na"
    assert result["data"] is None
    assert result["error"] == f"[before] {NO_METRICS}"
    assert result["raw"]["before"] is None
    assert result["raw"]["after"]["num_drafts"] == 10
    both = build_result(URL, nospec, nospec).as_json()
    assert both["error"] == f"[before] {NO_METRICS}; [after] {NO_METRICS}"


def test_no_drafts_in_the_window() -> None:
    same = snap(InstanceCounters(drafts=10, draft_tokens=30, accepted_per_pos=[5, 3, 1]))
    result = build_result(URL, same, same).as_json()
    assert result["status"] == "na"
    assert result["error"] == NO_ACTIVITY
    assert result["data"] is None
    assert result["raw"]["before"] == result["raw"]["after"]


def test_failed_phases_are_prefixed() -> None:
    fine = snap(InstanceCounters(drafts=10, draft_tokens=30, accepted_per_pos=[5, 3, 1]))
    result = build_result(
        URL, fine, Failure(FailureKind.HTTP_STATUS, "Metrics endpoint returned HTTP 500")
    ).as_json()
    assert result["error"] == "[after] Metrics endpoint returned HTTP 500"
    assert result["raw"]["after"] is None
    assert result["raw"]["before"]["num_draft_tokens"] == 30


def test_window_increase_over_a_chain_counts_a_reset_between_samples() -> None:
    key = SeriesKey(Role.DRAFTS, ())
    chain = [
        {key: SeriesValue(100.0, 1.0)},
        {key: SeriesValue(180.0, 1.0)},
        {key: SeriesValue(30.0, 2.0)},  # reset
        {key: SeriesValue(250.0, 2.0)},  # grew above its old value
    ]
    totals = window_increase(chain)
    assert totals.num_drafts == 80 + 30 + 220
    assert (totals.series_resets, totals.restarts) == (1, 1)
    # The two ends alone: created tells of the reset, the increase is the last value.
    assert window_increase([chain[0], chain[3]]).num_drafts == 250


def test_spec_block_alone_is_enough() -> None:
    text = spec_block([InstanceCounters(drafts=3, draft_tokens=9, accepted_per_pos=[2, 1, 0])])
    assert len(extract_spec_decode(text)) == 3 + 3


def test_timeline_rows_cumulative_and_interval_values() -> None:
    def at(drafts: int, created: float = 1.0) -> Series:
        per_pos = [drafts // 2, drafts // 4]
        return snap(
            InstanceCounters(
                drafts=drafts, draft_tokens=2 * drafts, accepted_per_pos=per_pos, created=created
            )
        )

    points: list[tuple[str, str, Reading]] = [
        ("t0", "before", at(100)),
        ("t1", "sample", at(300)),
        ("t2", "sample", Failure(FailureKind.HTTP_STATUS, "Metrics endpoint returned HTTP 503")),
        ("t3", "sample", at(300)),
        ("t4", "sample", at(40, created=2.0)),  # reset
        ("t5", "after", at(140, created=2.0)),
    ]
    rows = timeline(points)
    assert [r["status"] for r in rows] == ["ok", "ok", "error", "ok", "ok", "ok"]
    assert [r["num_drafts"] for r in rows] == [0, 200, None, 200, 240, 340]
    assert [r["draft_tokens"] for r in rows] == [0, 400, None, 400, 480, 680]
    # interval t0 -> t1: 200 drafts, 100 + 50 accepted of 400 draft tokens
    assert rows[1]["acceptance_rate"] == float(Fraction(150 * 100, 400))
    assert rows[1]["acceptance_length"] == float(1 + Fraction(150, 200))
    assert rows[1]["per_position_acceptance_rates"] == {"0": 0.5, "1": 0.25}
    assert rows[3]["acceptance_rate"] is None  # no drafts between t1 and t3
    assert rows[4]["series_resets"] == 3 + 2 and rows[4]["num_drafts"] == 240
    assert rows[4]["restarts"] == 1 and rows[5]["restarts"] == 0
    assert rows[2]["error"] == "Metrics endpoint returned HTTP 503"
    assert rows[0]["acceptance_rate"] is None and rows[0]["series_resets"] is None


def test_timeline_without_a_baseline_has_no_cumulative_counts() -> None:
    later = snap(InstanceCounters(drafts=50, draft_tokens=100, accepted_per_pos=[20, 10]))
    rows = timeline(
        [
            (
                "t0",
                "before",
                Failure(FailureKind.HTTP_STATUS, "Metrics endpoint returned HTTP 500"),
            ),
            ("t1", "sample", later),
            ("t2", "after", later),
        ]
    )
    assert [r["num_drafts"] for r in rows] == [None, None, None]
    assert rows[0]["error"] == "Metrics endpoint returned HTTP 500"


def test_samples_join_the_chain_and_are_counted() -> None:
    before = snap(
        InstanceCounters(drafts=100, draft_tokens=300, accepted_per_pos=[50, 30, 10], created=None)
    )
    middle = snap(
        InstanceCounters(
            drafts=500, draft_tokens=1500, accepted_per_pos=[250, 150, 50], created=None
        )
    )
    restarted = snap(
        InstanceCounters(drafts=10, draft_tokens=30, accepted_per_pos=[5, 3, 1], created=None)
    )
    after = snap(
        InstanceCounters(
            drafts=600, draft_tokens=1800, accepted_per_pos=[300, 180, 60], created=None
        )
    )
    result = build_result(
        URL, before, after, [middle, Failure(FailureKind.TIMEOUT, "timed out"), restarted]
    ).as_json()
    assert result["data"]["num_drafts"] == 400 + 10 + 590
    assert result["samples"] == {"taken": 3, "failed": 1}
    assert build_result(URL, before, after).as_json()["data"]["num_drafts"] == 500


def test_figures_that_are_not_finite_make_the_result_na_never_ok_with_nulls() -> None:
    """A backstop behind extraction's 2**53 bound: two engines at 1.7e308 sum to inf."""
    huge = 1.7e308

    def reading(value: float) -> Series:
        return {
            SeriesKey(role, (("engine", engine),)): SeriesValue(value)
            for role in (Role.DRAFTS, Role.DRAFT_TOKENS, Role.ACCEPTED)
            for engine in "01"
        }

    result = build_result("http://h:1/metrics", reading(0.0), reading(huge))
    assert result.status == "na" and result.error == INVALID_COUNTERS and result.data is None
    assert result.model_dump_json()  # and it can be written


def test_restarts_count_engines_and_intervals_not_series() -> None:
    """One engine restart resets every family and position of it: 1 restart, 6 series."""

    def at(drafts_0: int, drafts_1: int, created_0: float, created_1: float) -> Series:
        return snap(*(
            InstanceCounters(drafts, 3 * drafts, [drafts, drafts // 2, 0], engine=name, created=created)
            for name, drafts, created in (("0", drafts_0, created_0), ("1", drafts_1, created_1))
        ))  # fmt: skip

    both = window_increase([at(100, 100, 1.0, 1.0), at(10, 10, 2.0, 2.0)])
    assert (both.restarts, both.series_resets) == (2, 12)  # two engines at once
    twice = window_increase([at(100, 100, 1.0, 1.0), at(10, 120, 2.0, 1.0), at(5, 130, 3.0, 1.0)])
    assert (twice.restarts, twice.series_resets) == (2, 6 + 6)  # engine 0, twice
    assert twice.num_drafts == 10 + 5 + 20 + 10


def test_results_stored_with_counter_resets_read_as_series_resets() -> None:
    stored = {"status": "na", "url": URL, "error": "x", "counter_resets": 4}
    result = TargetResult.from_stored(stored, URL)
    assert (result.series_resets, result.restarts) == (4, None)
    assert "counter_resets" not in result.as_json() and result.as_json()["series_resets"] == 4


def test_a_bounded_result_runs_between_the_snapshots_that_enclose_the_phase() -> None:
    def at(drafts: int) -> Series:
        return snap(InstanceCounters(drafts, 3 * drafts, [drafts, drafts // 2, 0]))

    t = [datetime(2026, 11, 30, 12, 0, second, tzinfo=UTC) for second in range(8)]
    points: list[tuple[datetime, str, Reading]] = [
        (t[0], "before", at(0)),
        (t[1], "sample", at(50)),  # traffic before the phase
        (t[2], "sample", at(50)),
        (t[3], "sample", Failure(FailureKind.HTTP_STATUS, "Metrics endpoint returned HTTP 503")),
        (t[5], "sample", at(80)),
        (t[6], "sample", at(90)),  # traffic after the phase
        (t[7], "after", at(120)),
    ]
    phase_start = t[2] + timedelta(milliseconds=400)
    phase_end = t[4]
    result = bounded_result(URL, points, phase_start, phase_end)
    assert result.data is not None and result.data.num_drafts == 80 - 50
    assert result.bounds is not None
    assert (result.bounds.start, result.bounds.start_phase) == (t[2], "sample")
    assert (result.bounds.end, result.bounds.end_phase) == (t[5], "sample")
    # A phase past the last snapshot ends at it; one before the first starts there.
    late = bounded_result(URL, points, t[6], t[7] + timedelta(seconds=5))
    assert late.data is not None and late.data.num_drafts == 120 - 90
    early = bounded_result(URL, points, t[0] - timedelta(seconds=5), t[1])
    assert early.data is not None and early.data.num_drafts == 50
    assert early.bounds is not None and early.bounds.start_phase == "before"
