"""Renderings: the AISBench console block of a window's results, and timelines as CSV."""

import csv
import io
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from specdec_collector.core.arithmetic import TIMELINE_FIELDS
from specdec_collector.core.results import DatasetResult, ResultData, TargetResult, Throughput


def _row(label: str, value: object) -> str:
    return f"{label:<45} {value}"


def _fixed(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.2f}"


def _shown(value: object) -> object:
    return "N/A" if value is None else value


#: The widest a row of the block gets: longer per-position rates go on to further lines.
ROW_WIDTH = 120
_VALUE_COLUMN = 46  # `f"{label:<45} "`


def _per_position(rates: dict[str, float]) -> str:
    """AISBench's `{0: 0.9939, 1: ...}`; past `ROW_WIDTH` (llama.cpp drafts 48 positions and
    more) it goes on to further lines, indented to the value column."""
    items = sorted(rates.items(), key=lambda item: int(item[0]))
    parts = [f"{pos}: {rate:.4f}" for pos, rate in items]
    lines, line = [], "{"
    for index, part in enumerate(parts):
        piece = part + ("}" if index == len(parts) - 1 else ",")
        if len(line) > 1 and _VALUE_COLUMN + len(line) + 1 + len(piece) > ROW_WIDTH:
            lines.append(line)
            line = " " * _VALUE_COLUMN + piece
        else:
            line += ("" if line.endswith("{") else " ") + piece
    lines.append(line if parts else "{}")
    return "\n".join(lines)


def render_comparison(comparison: dict[str, Any]) -> str:
    """`GET /compare`'s answer for a terminal: per target, each window's figures and, for
    each later window, its differences from the first with their verdicts."""
    lines = []
    for row in comparison["targets"]:
        lines.append(f"{row['target']}")
        for result in row["results"]:
            if result is None:
                continue
            rate, length = _fixed(result["acceptance_rate"]), _fixed(result["acceptance_length"])
            shown = f"{result['window']:<32} {result['status']:<4}"
            throughput = result.get("throughput") or {}
            per_second = throughput.get("generated_tokens_per_second")
            speed = "" if per_second is None else f", {per_second:.2f} generated tokens/s"
            lines.append(f"  {shown} acceptance {rate} %, length {length}{speed}")
        for change in row["differences"]:
            lines.append(f"  {change['window']} versus {change['versus']}:")
            for figure, verdict in change["verdicts"].items():
                lines.append(f"    {figure:<18} {_verdict_text(verdict)}")
            lines += [f"    settings differ: {said}" for said in change["mismatches"]]
        for faster in row.get("speedups", []):
            tokens, latency = faster["generated_tokens_per_second"], faster["inter_token_latency"]
            lines.append(
                f"  {faster['window']} versus {faster['versus']} (without spec decoding): "
                f"{_times(tokens)} the generated tokens/s, {_times(latency)} faster tokens, "
                f"acceptance length {_fixed(faster['acceptance_length'])}"
            )
    return "\n".join(lines) + "\n"


def _times(ratio: float | None) -> str:
    return "N/A" if ratio is None else f"{ratio:.2f}x"


def _verdict_text(verdict: dict[str, Any]) -> str:
    if verdict["difference"] is None:
        return str(verdict["reason"])
    change = f"{verdict['difference']:+.4f}"
    if verdict["verdict"] is None:
        return f"{change} ({verdict['reason']})"
    return (
        f"{change}, 95 % interval {verdict['low']:+.4f} to {verdict['high']:+.4f}: "
        f"{verdict['verdict']} (the smallest this pair could detect: {verdict['detectable']:.4f})"
    )


def render_block(target: str, result: TargetResult) -> str:
    """One target's block as AISBench prints it (a blank line, the framed title, one row per
    value), then, where the result has more to say, a second block of what the collector
    adds: intervals, throughput, flags, restarts, the engine."""
    title = f"========== Speculative Decoding Metrics  [{target}] =========="
    separator = "=" * len(title)
    data = result.data
    if result.ok and data is not None:
        rows = _figure_rows(data)
    else:
        rows = [_row("Status", "N/A"), _row("Reason", result.error)]
    block = "\n".join(["", separator, title, separator, *rows]) + "\n"
    more = _details(result)
    if not more:
        return block
    title = f"---------- Beside AISBench's block  [{target}] ----------"
    return block + "\n".join(["", title, *more]) + "\n"


def _figure_rows(data: ResultData) -> list[str]:
    """AISBench's rows of a window's figures."""
    rates = data.per_position_acceptance_rates
    return [
        _row("Acceptance rate (%)", _fixed(data.acceptance_rate)),
        _row("Acceptance length", _fixed(data.acceptance_length)),
        _row("Drafts", _shown(data.num_drafts)),
        _row("Draft tokens", _shown(data.draft_tokens)),
        _row("Accepted tokens", _shown(data.accepted_tokens)),
        _row("Per-position acceptance rates", "N/A" if rates is None else _per_position(rates)),
    ]


def _details(result: TargetResult) -> list[str]:
    """The rows of the second block (`render_block`)."""
    rows = []
    confidence = result.confidence if result.ok else None
    if confidence is not None and confidence.acceptance_rate is not None:
        low, high = confidence.acceptance_rate.low, confidence.acceptance_rate.high
        rows.append(_row("Acceptance rate, 95% interval (%)", f"{_fixed(low)} to {_fixed(high)}"))
    if confidence is not None and confidence.acceptance_length is not None:
        low, high = confidence.acceptance_length.low, confidence.acceptance_length.high
        rows.append(_row("Acceptance length, 95% interval", f"{_fixed(low)} to {_fixed(high)}"))
    throughput = result.throughput
    if throughput is not None and throughput.generated_tokens:
        for label, value in (
            ("Generated tokens/s", throughput.generated_tokens_per_second),
            ("Inter-token latency (ms)", throughput.inter_token_latency_ms),
            ("Generated tokens per step", throughput.generated_tokens_per_step),
            ("Accepted drafts in output (%)", throughput.accepted_token_share),
        ):
            if value is not None:
                rows.append(_row(label, _fixed(value)))
    whole = result.whole_command
    if whole is not None:
        counted = (
            f"{_shown(whole.num_drafts)} drafts, {_shown(whole.draft_tokens)} draft tokens, "
            f"{_shown(whole.accepted_tokens)} accepted tokens"
        )
        rows.append(_row("Whole command", counted))
    for flag in result.flags or []:
        rows.append(_row("Flag", flag.reason))
    if result.restarts:
        # The figures lost what the engine counted before a restart: never shown without it.
        rows.append(_row("Restarts", f"{result.restarts} (see notes)"))
    if result.engine not in (None, "vllm"):
        # AISBench's rows are vLLM's: another engine says so.
        exactness = "" if result.exact else " (approximate: see notes)"
        rows.append(_row("Engine", f"{result.engine}{exactness}"))
    return rows


def render_dataset_block(target: str, name: str, part: DatasetResult) -> str:
    """One dataset's figures of an AISBench run that held several, after the run's blocks."""
    title = f"---------- Dataset {name}  [{target}] ----------"
    data = part.data
    if part.status == "ok" and data is not None:
        rows = [_row("Requests", str(part.requests)), *_figure_rows(data)]
    else:
        rows = [
            _row("Requests", str(part.requests)),
            _row("Status", "N/A"),
            _row("Reason", part.error),
        ]
    throughput = part.throughput
    if throughput is not None and throughput.generated_tokens_per_second is not None:
        rows.append(_row("Generated tokens/s", _fixed(throughput.generated_tokens_per_second)))
    return "\n".join(["", title, *rows]) + "\n"


def render_report(results: Iterable[tuple[str, TargetResult]]) -> str:
    """The blocks of every (`host:port`, result) pair, in the order given."""
    return "".join(render_block(target, result) for target, result in results)


def timeline_csv(series: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> str:
    """Timelines of (`host:port`, rows) as CSV: a header row, then one row per snapshot.

    Per-position rates become one column each (`position_0`, `position_1`, ...).
    """
    positions = sorted(
        {
            int(pos)
            for _, rows in series
            for row in rows
            for pos in row["per_position_acceptance_rates"] or {}
        }
    )
    plain = [name for name in TIMELINE_FIELDS if name != "per_position_acceptance_rates"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["target", *plain, *(f"position_{pos}" for pos in positions)])
    for target, rows in series:
        for row in rows:
            rates = row["per_position_acceptance_rates"] or {}
            writer.writerow(
                [
                    csv_cell(target),
                    *(csv_cell(row[name]) for name in plain),
                    *(csv_cell(rates.get(str(pos))) for pos in positions),
                ]
            )
    return out.getvalue()


# A text cell starting with one of these is a formula to a spreadsheet (OWASP's CSV injection):
# it gets a leading apostrophe, which spreadsheets show as text and do not evaluate.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A value as a CSV cell: empty for None, times in UTC with Z, formula-like text defused."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def windows_csv(windows: Sequence[Any]) -> str:
    """A page of windows as CSV: one row per window and target."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "id",
            "state",
            "started_at",
            "stopped_at",
            "labels",
            "target",
            "status",
            "engine",
            "exact",
            "restarts",
            "acceptance_rate",
            "acceptance_length",
            "num_drafts",
        ]
    )
    for window in windows:
        labels = ";".join(f"{k}={v}" for k, v in sorted(window.labels.items()))
        for target in window.targets or [None]:
            writer.writerow(
                [
                    window.id,
                    window.state,
                    csv_cell(window.started_at),
                    csv_cell(window.stopped_at),
                    csv_cell(labels),
                    *(
                        [
                            target.target,
                            csv_cell(target.status),
                            csv_cell(target.engine),
                            csv_cell(target.exact),
                            csv_cell(target.restarts),
                            csv_cell(target.acceptance_rate),
                            csv_cell(target.acceptance_length),
                            csv_cell(target.num_drafts),
                        ]
                        if target is not None
                        else [""] * 8
                    ),
                ]
            )
    return out.getvalue()


def results_csv(results: Iterable[tuple[str, TargetResult]]) -> str:
    """A window's results as CSV, one row per target: AISBench's figures, then what the
    collector adds beside them (95 % intervals, throughput, flags)."""
    return _results_table((), (((), target, result) for target, result in results))


# The columns of a window that `windows_results_csv` puts before each of its targets' results.
WINDOW_COLUMNS = ("window", "state", "started_at", "stopped_at", "labels")


def windows_results_csv(
    rows: Iterable[tuple[Sequence[object], str, TargetResult | None]],
) -> str:
    """Many windows' results as one CSV (`specdec export`), one row per window and target: the
    window's `WINDOW_COLUMNS`, then `results_csv`'s columns (empty for a target without a
    result: an open window's)."""
    return _results_table(WINDOW_COLUMNS, rows)


def _results_table(
    context: Sequence[str], rows: Iterable[tuple[Sequence[object], str, TargetResult | None]]
) -> str:
    triples = list(rows)
    positions = sorted(
        {
            int(pos)
            for _, _, result in triples
            if result is not None and result.data is not None
            for pos in result.data.per_position_acceptance_rates or {}
        }
    )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header = [
        *context,
        *_RESULT_COLUMNS,
        *(f"position_{p}" for p in positions),
        *_THROUGHPUT_COLUMNS,
        "flags",
    ]
    writer.writerow(header)
    for values, target, result in triples:
        known = [*values, target]
        cells = known if result is None else [*known, *_result_cells(result, positions)]
        row = [csv_cell(cell) for cell in cells]
        writer.writerow([*row, *[""] * (len(header) - len(row))])
    return out.getvalue()


_RESULT_COLUMNS = (
    "target",
    "status",
    "error",
    "engine",
    "exact",
    "restarts",
    "num_drafts",
    "draft_tokens",
    "accepted_tokens",
    "acceptance_rate",
    "acceptance_rate_low",
    "acceptance_rate_high",
    "acceptance_length",
    "acceptance_length_low",
    "acceptance_length_high",
)
_THROUGHPUT_COLUMNS = (
    "seconds",
    "generated_tokens",
    "generated_tokens_per_second",
    "inter_token_latency_ms",
    "generated_tokens_per_step",
    "accepted_token_share",
)


def _result_cells(result: TargetResult, positions: Sequence[int]) -> list[object]:
    """A result's cells after its target: `_RESULT_COLUMNS`, the positions', the throughput's
    and the flags."""
    data, confidence, throughput = result.data, result.confidence, result.throughput
    rate = confidence.acceptance_rate if confidence else None
    length = confidence.acceptance_length if confidence else None
    counts = (
        (None,) * 3 if data is None else (data.num_drafts, data.draft_tokens, data.accepted_tokens)
    )
    rates = (data.per_position_acceptance_rates or {}) if data else {}
    return [
        result.status,
        result.error,
        result.engine,
        result.exact,
        result.restarts,
        *counts,
        data.acceptance_rate if data else None,
        rate.low if rate else None,
        rate.high if rate else None,
        data.acceptance_length if data else None,
        length.low if length else None,
        length.high if length else None,
        *(rates.get(str(p)) for p in positions),
        *_throughput_cells(throughput),
        ";".join(flag.kind.value for flag in result.flags or []) or None,
    ]


def _throughput_cells(throughput: Throughput | None) -> tuple[object, ...]:
    if throughput is None:
        return (None,) * len(_THROUGHPUT_COLUMNS)
    return (
        throughput.seconds,
        throughput.generated_tokens,
        throughput.generated_tokens_per_second,
        throughput.inter_token_latency_ms,
        throughput.generated_tokens_per_step,
        throughput.accepted_token_share,
    )
