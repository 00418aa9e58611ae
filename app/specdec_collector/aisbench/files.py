"""Result files as AISBench names and places them, and the rule that keeps AISBench's own.

AISBench (with its own `--spec-decode`) writes `performances/spec_decode_<key>.json`, where
`<key>` is the target's `host:port` with every character but letters, digits, `.`, `_` and
`-` replaced by `_`; `--mode perf_viz --reuse` re-prints every `spec_decode_*.json` of a run as
its own. So the collector writes that name only where AISBench did not: beside AISBench's own
file it writes `collector_spec_decode_<key>.json`, which AISBench never reads. Outside an
AISBench run's folder, each window's files go to a folder of their own
(`specdec-results/<window id>/`), and a file of another window is never written over: every
file says which window it is of (`window`: id, labels, start and stop).
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9._-]")
# Keys only the collector's results have: a file without them is AISBench's.
_COLLECTOR_KEYS = ("samples",)


def result_key(target_name: str) -> str:
    """AISBench's file-name key of a `host:port` target (`[::1]:9302` -> `___1__9302`)."""
    return _NOT_IN_NAMES.sub("_", target_name)


def result_filename(target_name: str) -> str:
    """`spec_decode_<key>.json`, AISBench's name for a target's result."""
    return f"spec_decode_{result_key(target_name)}.json"


def collector_filename(target_name: str) -> str:
    """The collector's name beside AISBench's own file: never matched by `spec_decode_*`."""
    return f"collector_spec_decode_{result_key(target_name)}.json"


def newest_output_dir(work_dir: Path, since: float) -> Path | None:
    """The newest `<work_dir>/<timestamp>/performances` made at or after `since` (AISBench's
    folder of this run's results), also one level deeper for `outputs/` as the root."""
    found = [
        path
        for pattern in ("*/performances", "*/*/performances")
        for path in work_dir.glob(pattern)
        if path.is_dir() and path.stat().st_mtime >= since
    ]
    return max(found, key=lambda path: path.stat().st_mtime) if found else None


def _written_by_aisbench(path: Path) -> bool:
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError):
        return True  # not ours to overwrite either
    return not (isinstance(content, dict) and all(key in content for key in _COLLECTOR_KEYS))


@dataclass(frozen=True, slots=True)
class Written:
    """Where a result went, and whether AISBench's own file of that name was kept beside it."""

    path: Path
    beside_aisbench: bool


#: Where a window's files go outside an AISBench run's folder: `<this>/<window id>/`.
RESULTS_FOLDER = "specdec-results"


def results_folder(output_dir: Path | None, run_folder: Path | None, window_id: str) -> Path:
    """The folder of a window's files: `--output-dir`, else AISBench's run folder, else
    `specdec-results/<window id>` in the current folder (one folder per window)."""
    return output_dir or run_folder or Path.cwd() / RESULTS_FOLDER / window_id


def _window_of(path: Path) -> str | None:
    """The window id a file of the collector's says it is of; None for any other file."""
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    window = content.get("window") if isinstance(content, dict) else None
    return str(window.get("id")) if isinstance(window, dict) else None


def write_result(
    folder: Path, target_name: str, result: dict[str, Any], window: dict[str, Any]
) -> Written:
    """Write `result`, with the `window` it is of, as `spec_decode_<key>.json` in `folder`, or
    beside AISBench's own file; in `folder/<window id>/` where that name holds another
    window's result (an earlier run's is never written over)."""
    path = folder / result_filename(target_name)
    beside = path.exists() and _written_by_aisbench(path)
    if beside:
        path = folder / collector_filename(target_name)
    earlier = _window_of(path) if path.exists() else None
    if earlier is not None and earlier != window["id"]:
        path = folder / str(window["id"]) / path.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**result, "window": window}, indent=2) + "\n")
    return Written(path, beside)
