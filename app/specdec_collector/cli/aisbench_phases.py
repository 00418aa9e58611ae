"""`specdec run` around an AISBench perf run: its inference phase and each of its datasets,
bounded by AISBench's own request records (`aisbench.records`), read once.

The window covers the whole command; the collector's `GET /windows/{id}/results?start&end`
gives a target's result between the snapshots that enclose a stretch of it. The phase is the
first request sent to the last answer received (AISBench's warm-up and its loading left out);
each dataset of a run that held several is its own stretch.
"""

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specdec_collector.aisbench.records import InferenceSpan, dataset_spans, spanning
from specdec_collector.cli.exits import failure_text
from specdec_collector.client import CollectorClient, CollectorError, CollectorUnavailable
from specdec_collector.core.results import DatasetResult, TargetResult

INFERENCE_NOTE = (
    "bounded to AISBench's inference phase by its request records (the snapshots that enclose "
    "its first request sent and its last answer): what ran outside them is left out, AISBench's "
    "warm-up request among it when it ran before the first; the whole command's figures are "
    "under whole_command"
)


def aisbench_phases(
    client: CollectorClient,
    window_id: str,
    run_folder: Path | None,
    whole: list[tuple[str, TargetResult]],
    say: Callable[[str], None],
) -> list[tuple[str, TargetResult]] | None:
    """Every target's result over AISBench's inference phase, with the whole command's figures
    beside it and, where the run held several datasets, each dataset's; None, saying why,
    where the phase is unknown (no records in `run_folder`, or the collector did not answer)."""
    spans = dataset_spans(run_folder) if run_folder is not None else {}
    span = spanning(spans.values())
    if span is None:
        where = run_folder or "the command's work dir"
        say(f"specdec: no AISBench request records in {where}: the window is the whole command")
        return None
    try:
        bounded = _between(client, window_id, span)
    except (CollectorError, CollectorUnavailable) as exc:
        say(
            f"specdec: could not read the inference phase ({failure_text(exc, client.base_url)}): "
            "the window is the whole command"
        )
        return None
    start, end = _wall_time(span.first_sent), _wall_time(span.last_received)
    say(
        f"specdec: AISBench's inference phase: {span.requests} requests, {start:%H:%M:%S.%f}"[:-3]
        + f" to {end:%H:%M:%S.%f}"[:-3]
        + " UTC"
    )
    results = with_whole_command(bounded, dict(whole))
    return _with_datasets(client, window_id, spans, results, say) if len(spans) > 1 else results


def with_whole_command(
    inference: list[tuple[str, TargetResult]], whole: dict[str, TargetResult]
) -> list[tuple[str, TargetResult]]:
    """The inference phase's results, each with the note on what it leaves out and the
    figures of the whole command beside it."""
    told = []
    for key, result in inference:
        everything = whole.get(key)
        notes = [*(result.notes or []), INFERENCE_NOTE]
        update: dict[str, Any] = {"notes": notes}
        if everything is not None and everything.data is not None:
            update["whole_command"] = everything.data
        told.append((key, result.model_copy(update=update)))
    return told


def aisbench_difference(theirs: Path, ours: TargetResult) -> str | None:
    """Why AISBench's own file of a target and the collector's disagree, when they do: AISBench
    reads its counters before its warm-up request; the collector's phase is bounded by its
    request records, which the warm-up is not in. None when they agree or one has no figures."""
    try:
        their_data = json.loads(theirs.read_text()).get("data") or {}
    except (OSError, ValueError, AttributeError):
        return None
    their_drafts = their_data.get("num_drafts")
    if ours.data is None or not isinstance(their_drafts, int | float):
        return None
    if their_drafts == ours.data.num_drafts:
        return None
    whole = ours.whole_command.num_drafts if ours.whole_command is not None else None
    return (
        f"AISBench's {theirs.name} counts {their_drafts:g} drafts, the collector's "
        f"{ours.data.num_drafts} (its inference phase) of {whole} over the whole command: "
        "AISBench reads its counters before its warm-up request, and the phase, bounded by "
        "AISBench's request records, leaves the warm-up out"
    )


def _wall_time(perf_counter_s: float) -> datetime:
    """A `time.perf_counter()` reading of this machine (CLOCK_MONOTONIC, AISBench's clock) as
    wall time."""
    return datetime.fromtimestamp(perf_counter_s + time.time() - time.perf_counter(), UTC)


def _between(
    client: CollectorClient, window_id: str, span: InferenceSpan
) -> list[tuple[str, TargetResult]]:
    """Every target's result between the snapshots that enclose `span`."""
    bounded = client.results_between(
        window_id, _wall_time(span.first_sent), _wall_time(span.last_received)
    )
    return [(item.target, item.result) for item in bounded]


def _with_datasets(
    client: CollectorClient,
    window_id: str,
    spans: dict[str, InferenceSpan],
    results: list[tuple[str, TargetResult]],
    say: Callable[[str], None],
) -> list[tuple[str, TargetResult]]:
    """Each target's result with each dataset's (the snapshots that enclose its first request
    and last answer)."""
    by_dataset: dict[str, dict[str, DatasetResult]] = {}
    for name, span in spans.items():
        try:
            bounded = _between(client, window_id, span)
        except (CollectorError, CollectorUnavailable) as exc:
            why = failure_text(exc, client.base_url)
            say(f"specdec: could not read dataset {name}'s results ({why})")
            continue
        for target, part in bounded:
            by_dataset.setdefault(target, {})[name] = DatasetResult(
                requests=span.requests,
                status=part.status,
                error=part.error,
                data=part.data,
                bounds=part.bounds,
                throughput=part.throughput,
            )
    say(f"specdec: AISBench's run held {len(spans)} datasets: {', '.join(spans)}")
    return [
        (key, result.model_copy(update={"datasets": by_dataset.get(key) or None}))
        for key, result in results
    ]
