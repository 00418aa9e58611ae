"""When AISBench's inference phase ran, from its own per-request records.

In perf mode AISBench writes one JSON line per request to
`performances/<model abbr>/<dataset abbr>_details.jsonl` (before its summary, to
`performances/<model abbr>/tmp/*.jsonl`). A line's `time_points` (when the request was sent and
each chunk came back) is a list, or `{"__db_ref__": id}`: a NumPy array (`.npy` bytes) in the
SQLite file `performances/<model abbr>/db_data/<db_name>` (or `tmp/tmp_<db_name>`), table
`numpy_store(id, arr_blob)`. The times come from `time.perf_counter()`, CLOCK_MONOTONIC on
Linux: one clock for every process of the machine, which `specdec run` turns into wall time
with its own offset between the two clocks.

Read with the standard library only (no NumPy): `.npy` is a short header and raw floats.
"""

import ast
import json
import sqlite3
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_NPY_MAGIC = b"\x93NUMPY"
_FLOAT_FORMATS = {"<f8": "d", "<f4": "f"}


def npy_floats(blob: bytes) -> list[float] | None:
    """The values of a one-dimensional little-endian float `.npy` array, else None."""
    if not blob.startswith(_NPY_MAGIC) or len(blob) < 10:
        return None
    major = blob[6]
    size_bytes = 2 if major == 1 else 4
    (header_len,) = struct.unpack_from("<H" if size_bytes == 2 else "<I", blob, 8)
    start = 8 + size_bytes
    try:
        header = ast.literal_eval(blob[start : start + header_len].decode("latin-1"))
    except (ValueError, SyntaxError):
        return None
    code = _FLOAT_FORMATS.get(header.get("descr", "")) if isinstance(header, dict) else None
    shape = header.get("shape") if isinstance(header, dict) else None
    if (
        code is None
        or header.get("fortran_order")
        or not (isinstance(shape, tuple) and len(shape) == 1)
    ):
        return None
    data = blob[start + header_len :]
    count = shape[0]
    if len(data) < count * struct.calcsize(code):
        return None
    return list(struct.unpack_from(f"<{count}{code}", data))


def _stored_arrays(folder: Path, db_name: str) -> dict[int, bytes]:
    for path in (folder / "db_data" / db_name, folder / "tmp" / f"tmp_{db_name}"):
        if path.is_file():
            try:
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
                    rows = connection.execute("SELECT id, arr_blob FROM numpy_store").fetchall()
            except sqlite3.Error:
                return {}
            return {int(row_id): bytes(blob) for row_id, blob in rows}
    return {}


def _time_points(record: dict[str, Any], folder: Path, cache: dict[str, Any]) -> list[float]:
    points = record.get("time_points")
    if isinstance(points, list):
        return [float(p) for p in points if isinstance(p, int | float)]
    if isinstance(points, dict) and "__db_ref__" in points:
        db_name = str(record.get("db_name", ""))
        if db_name not in cache:
            cache[db_name] = _stored_arrays(folder, db_name)
        blob = cache[db_name].get(points["__db_ref__"])
        return (npy_floats(blob) or []) if blob is not None else []
    return []


@dataclass(frozen=True, slots=True)
class InferenceSpan:
    """The first request sent and the last answer received (perf_counter seconds)."""

    first_sent: float
    last_received: float
    requests: int


def dataset_spans(performances: Path) -> dict[str, InferenceSpan]:
    """When each dataset of the run whose `performances` folder this is ran (its first request
    sent to its last answer received), from every request record of every model, by dataset
    abbreviation: a record's `data_abbr`, else its file's (`<abbr>_details.jsonl`)."""
    spans: dict[str, tuple[float, float, int]] = {}
    for folder in (path for path in performances.iterdir() if path.is_dir()):
        cache: dict[str, Any] = {}
        files = [*folder.glob("*_details.jsonl"), *folder.glob("tmp/*.jsonl")]
        for path in files:
            named = path.name.removesuffix(".jsonl").removesuffix("_details")
            for line in path.read_text(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(record, dict):
                    continue
                points = _time_points(record, folder, cache)
                if len(points) < 2:
                    continue
                dataset = str(record.get("data_abbr") or named)
                first, last, requests = spans.get(dataset, (float("inf"), float("-inf"), 0))
                spans[dataset] = (min(first, points[0]), max(last, points[-1]), requests + 1)
    return {name: InferenceSpan(*span) for name, span in sorted(spans.items())}


def inference_span(performances: Path) -> InferenceSpan | None:
    """When the inference phase of the run whose `performances` folder this is ran, from every
    request record of every model and dataset; None when there is none."""
    return spanning(dataset_spans(performances).values())


def spanning(parts: Iterable[InferenceSpan]) -> InferenceSpan | None:
    """The span that holds every one of `parts` (the datasets of a run), None for none."""
    spans = list(parts)
    if not spans:
        return None
    return InferenceSpan(
        min(span.first_sent for span in spans),
        max(span.last_received for span in spans),
        sum(span.requests for span in spans),
    )
