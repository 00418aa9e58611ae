"""What a benchmark reports: figures with the command that reproduces them, and the table of docs/performance.md.

Every benchmark's `measure()` returns its `Figure`s; run alone (`python -m tests.bench.bench_x`)
it prints them, and `python -m tests.bench` (`make bench`) runs them all and rewrites the
table between docs/performance.md's `bench:begin` / `bench:end` markers.
"""

import os
import platform
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

PERFORMANCE_DOC = Path(__file__).resolve().parents[2] / "docs" / "performance.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured figure: what, the measurement, the target it is held to, and how to rerun it."""

    what: str
    figure: str
    target: str = ""
    met: bool | None = None  # None: a figure with no target (context for the others)
    command: str = ""


def verdict(figure: Figure) -> str:
    if figure.met is None:
        return ""
    return "met" if figure.met else "**not met**"


def show(figures: list[Figure]) -> None:
    """Print figures for a benchmark run on its own."""
    for figure in figures:
        target = f"  [target {figure.target}: {verdict(figure)}]" if figure.target else ""
        print(f"- {figure.what}: {figure.figure}{target}")


def machine() -> str:
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.MULTILINE)
        model = found.group(1).strip() if found else ""
    return f"{os.cpu_count()} cores ({model or platform.machine()}), Python {platform.python_version()}"


def table(figures: list[Figure]) -> str:
    """The table's body: when and where, then one row per figure."""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Measured {when} on {machine()} by `make bench`.",
        "",
        "| what | figure | target | | reproduce |",
        "|---|---|---|---|---|",
    ]
    for figure in figures:
        command = f"`{figure.command}`" if figure.command else ""
        lines.append(
            f"| {figure.what} | {figure.figure} | {figure.target} | {verdict(figure)} | {command} |"
        )
    return "\n".join(lines)


def write_table(figures: list[Figure], readme: Path = PERFORMANCE_DOC) -> None:
    """Replace the text between the markers with the new table."""
    text = readme.read_text()
    begin, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    readme.write_text(text[:begin] + "\n" + table(figures) + "\n" + text[end:])
