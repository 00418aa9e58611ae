"""Gates for CI: requirements a run's results must meet, absolute or against a baseline
window, judged target by target; their verdicts as lines and as JUnit XML. Pure functions.

An absolute requirement (`acceptance_rate>=60`) is judged on the figure. A largest drop from a
baseline (`acceptance_rate=2`: at most 2 points lower) is judged on the interval of the
difference where both windows were sampled (`core.uncertainty`): it fails only when the whole
95 % interval of the drop is beyond what is allowed, so noise alone does not fail a build; where
either window has no interval it is judged on the figures, and the verdict says so.
"""

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from xml.etree import ElementTree

from specdec_collector.core.comparison import judged_difference
from specdec_collector.core.results import TargetResult

#: The exit code of `specdec run` when the command succeeded and a gate failed.
GATE_FAILED_EXIT = 86


class GateFigure(StrEnum):
    """A figure a gate can require."""

    ACCEPTANCE_RATE = "acceptance_rate"
    ACCEPTANCE_LENGTH = "acceptance_length"


_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}
_REQUIREMENT = re.compile(r"\s*([a-z_]+)\s*(>=|<=|>|<)\s*([0-9]+(?:\.[0-9]*)?)\s*")
_DROP = re.compile(r"\s*([a-z_]+)\s*=\s*([0-9]+(?:\.[0-9]*)?)\s*")
_FIGURES = ", ".join(figure.value for figure in GateFigure)


@dataclass(frozen=True, slots=True)
class Requirement:
    """`figure op value`, e.g. acceptance_rate >= 60."""

    figure: GateFigure
    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.figure.value}{self.op}{self.value:g}"


@dataclass(frozen=True, slots=True)
class MaxDrop:
    """At most `value` lower than the baseline (points of acceptance rate, or length)."""

    figure: GateFigure
    value: float

    def __str__(self) -> str:
        return f"{self.figure.value} at most {self.value:g} below the baseline"


def _figure(name: str, text: str) -> GateFigure:
    try:
        return GateFigure(name)
    except ValueError:
        raise ValueError(f"{text!r}: the figure is one of {_FIGURES}") from None


def parse_requirement(text: str) -> Requirement:
    """`acceptance_rate>=60` as a `Requirement`; `ValueError` saying what is wrong."""
    match = _REQUIREMENT.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r}: write FIGURE>=VALUE, e.g. acceptance_rate>=60")
    return Requirement(_figure(match[1], text), match[2], float(match[3]))


def parse_max_drop(text: str) -> MaxDrop:
    """`acceptance_rate=2` as a `MaxDrop`; `ValueError` saying what is wrong."""
    match = _DROP.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r}: write FIGURE=VALUE, e.g. acceptance_rate=2")
    return MaxDrop(_figure(match[1], text), float(match[2]))


@dataclass(frozen=True, slots=True)
class Verdict:
    """One gate on one target: whether it passed, and why, in a sentence."""

    target: str
    gate: str
    passed: bool
    detail: str


def _value(result: TargetResult | None, figure: GateFigure) -> float | None:
    if result is None or not result.ok or result.data is None:
        return None
    value: float | None = getattr(result.data, figure.value)
    return value


def _absolute(target: str, result: TargetResult | None, gate: Requirement) -> Verdict:
    value = _value(result, gate.figure)
    if value is None:
        why = "no result" if result is None else (result.error or "the figure is not given")
        return Verdict(target, str(gate), False, f"no {gate.figure.value}: {why}")
    passed = _COMPARISONS[gate.op](value, gate.value)
    return Verdict(target, str(gate), passed, f"{gate.figure.value} is {value:.4g}")


def _drop(
    target: str, result: TargetResult | None, base: TargetResult | None, gate: MaxDrop
) -> Verdict:
    value, before = _value(result, gate.figure), _value(base, gate.figure)
    if value is None or before is None:
        which = "this run" if value is None else "the baseline"
        return Verdict(target, str(gate), False, f"no {gate.figure.value} in {which}")
    assert result is not None and base is not None
    drop = before - value
    # The baseline minus this run: a difference of independent windows.
    change = judged_difference(before, base, value, result, gate.figure.value)
    if change is None:
        passed = drop <= gate.value
        return Verdict(
            target,
            str(gate),
            passed,
            f"{drop:+.4g} below the baseline ({before:.4g} to {value:.4g}); judged on the figures: "
            "a window without a confidence interval (sample both windows to judge on it)",
        )
    low, high = change.low, change.high
    passed = low <= gate.value
    said = "beyond" if not passed else ("within" if high <= gate.value else "not surely beyond")
    return Verdict(
        target,
        str(gate),
        passed,
        f"{drop:+.4g} below the baseline ({before:.4g} to {value:.4g}), 95 % interval of the "
        f"drop {low:+.4g} to {high:+.4g}: {said} the {gate.value:g} allowed",
    )


def judge(
    results: Sequence[tuple[str, TargetResult | None]],
    requirements: Sequence[Requirement] = (),
    max_drops: Sequence[MaxDrop] = (),
    baseline: Mapping[str, TargetResult] | None = None,
) -> list[Verdict]:
    """Every gate on every target of `results` (a drop against the baseline window's result
    of the same target)."""
    verdicts = []
    for target, result in results:
        verdicts += [_absolute(target, result, gate) for gate in requirements]
        if max_drops:
            base = (baseline or {}).get(target)
            verdicts += [_drop(target, result, base, gate) for gate in max_drops]
    return verdicts


def render(verdicts: Sequence[Verdict]) -> str:
    """The verdicts as lines for a terminal."""
    return "".join(
        f"{'PASS' if v.passed else 'FAIL'}  {v.target}  {v.gate}: {v.detail}\n" for v in verdicts
    )


def junit_xml(verdicts: Sequence[Verdict], suite: str) -> str:
    """The verdicts as a JUnit XML report (one test case per target and gate), as CI systems
    read them."""
    failures = sum(not v.passed for v in verdicts)
    root = ElementTree.Element(
        "testsuites", name="specdec", tests=str(len(verdicts)), failures=str(failures)
    )
    node = ElementTree.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(verdicts)),
        failures=str(failures),
        errors="0",
        skipped="0",
    )
    for verdict in verdicts:
        case = ElementTree.SubElement(
            node, "testcase", classname=f"specdec.{verdict.target}", name=verdict.gate
        )
        if verdict.passed:
            ElementTree.SubElement(case, "system-out").text = verdict.detail
        else:
            ElementTree.SubElement(case, "failure", message=verdict.detail).text = verdict.detail
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
