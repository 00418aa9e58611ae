"""CI gates: requirements on a run's results, absolute or against a baseline judged on the
interval of the drop; verdicts printed, written as JUnit XML, and an exit code of their own."""

from xml.etree import ElementTree

import pytest

from specdec_collector.core.figures import build_result
from specdec_collector.core.gates import (
    judge,
    junit_xml,
    parse_max_drop,
    parse_requirement,
)
from specdec_collector.core.results import TargetResult
from tests.support.simulated import sampled_chain


def _result(rates: list[float], seed: int, intervals: int = 40) -> TargetResult:
    """A window over an in-process simulator of acceptance `rates`, sampled `intervals` times."""
    chain = sampled_chain(rates, intervals, seed, instances=1, requests=(2, 5), tokens=(16, 64))
    sampled = chain[1:-1] if intervals > 1 else []
    return build_result("http://h:1/metrics", chain[0], chain[-1], sampled)


def test_gates_are_parsed_or_refused_saying_why() -> None:
    assert str(parse_requirement(" acceptance_rate >= 60 ")) == "acceptance_rate>=60"
    assert parse_max_drop("acceptance_length=0.25").value == 0.25
    for bad, said in [
        ("acceptance>=60", "the figure is one of acceptance_rate, acceptance_length"),
        ("acceptance_rate=>60", "write FIGURE>=VALUE"),
        ("acceptance_rate>=-1", "write FIGURE>=VALUE"),
    ]:
        with pytest.raises(ValueError, match=said):
            parse_requirement(bad)
    with pytest.raises(ValueError, match="write FIGURE=VALUE"):
        parse_max_drop("acceptance_rate<2")


def test_absolute_requirements_are_judged_on_the_figure() -> None:
    result = _result([0.8, 0.5, 0.3], seed=1)
    assert result.data is not None and result.data.acceptance_rate is not None
    rate = result.data.acceptance_rate
    verdicts = judge(
        [("h:1", result)],
        [parse_requirement(f"acceptance_rate>={rate - 1:.3f}"),
         parse_requirement(f"acceptance_rate>={rate + 1:.3f}")],
    )  # fmt: skip
    assert [v.passed for v in verdicts] == [True, False]
    assert f"acceptance_rate is {rate:.4g}" in verdicts[1].detail
    missing = judge([("h:2", None)], [parse_requirement("acceptance_length>=2")])
    assert not missing[0].passed and "no result" in missing[0].detail


def test_a_drop_fails_only_when_its_whole_interval_is_beyond_the_allowed() -> None:
    baseline = _result([0.8, 0.5, 0.3], seed=2)
    same = _result([0.8, 0.5, 0.3], seed=3)  # the same drafter: any drop is noise
    worse = _result([0.6, 0.3, 0.1], seed=4)  # 20 points lower a position: 20 points in all
    gate = parse_max_drop("acceptance_rate=2")
    base = {"h:1": baseline}
    (noise,) = judge([("h:1", same)], max_drops=[gate], baseline=base)
    (regression,) = judge([("h:1", worse)], max_drops=[gate], baseline=base)
    assert noise.passed and "95 % interval of the drop" in noise.detail
    assert not regression.passed and "beyond the 2 allowed" in regression.detail
    # Unsampled windows: judged on the figures, and the verdict says so.
    point = judge([("h:1", _result([0.6, 0.3, 0.1], 5, intervals=1))], max_drops=[gate],
                  baseline={"h:1": _result([0.8, 0.5, 0.3], 6, intervals=1)})  # fmt: skip
    assert not point[0].passed and "judged on the figures" in point[0].detail


def test_the_verdicts_as_junit_xml() -> None:
    verdicts = judge(
        [("h:1", _result([0.8, 0.5, 0.3], seed=7))],
        [parse_requirement("acceptance_rate>=10"), parse_requirement("acceptance_length>=9")],
    )
    root = ElementTree.fromstring(junit_xml(verdicts, "specdec run w1"))
    suite = root.find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("2", "1")
    cases = suite.findall("testcase")
    assert [case.get("name") for case in cases] == ["acceptance_rate>=10", "acceptance_length>=9"]
    assert cases[0].find("failure") is None and cases[1].find("failure") is not None
