"""A stand-in for the real `ais_bench` (which pulls several GB): what `specdec run` meets.

It behaves as AISBench's source shows (its `cli/workers.py`, `spec_decode/reporter.py`,
`spec_decode/urls.py`, config loading and perf summarizer), read and not copied:

- `--models NAME...`: NAME is a file if one exists at that path; else `NAME.py` is searched,
  recursively and case-insensitively, under `--config-dir`'s `models/` (default `./configs`);
  never in the current folder. The config is Python, executed; only `models` matters.
  A model's `host_ip`/`host_port` default to `localhost`/`8080`; `url`, when set, is where
  requests go.
- `-w/--work-dir DIR` (default `outputs/default`): the run writes into `DIR/<YYYYMMDD_HHMMSS>/`.
- `--mode perf`: sends `--num-prompts` completion requests to every model for each of its
  `--datasets` in turn (`--dataset-pause-s` between two), in the inference phase, which starts after a pause standing for AISBench's imports and config loading
  (`--startup-s`; `--noise-requests N` sends N requests first, standing for another team's
  traffic on a shared server before the benchmark). Each request's record goes to
  `performances/<abbr>/<dataset>_details.jsonl`, its `time_points` (`time.perf_counter()` when
  sent, at the answer) as `{"__db_ref__": id}` into `performances/<abbr>/db_data/<db_name>`, a
  SQLite table `numpy_store(id, arr_blob)` of `.npy` arrays.
- `--spec-decode` (the GitHub source since Aug 2026; the PyPI release refuses it, exit 2 with
  `--pypi`): snapshots `http://{host_ip}:{host_port}/metrics` right before its warm-up request
  (one, unrecorded, as the real one sends: seen against a real vLLM, 16 of its 247 drafts;
  `--warmup-pause-s` stands for the time before the first timed request) and right after the
  inference phase, sums every `vllm:spec_decode*_total` sample, and writes
  `performances/spec_decode_<key>.json` (`indent=2`, no final newline) and its console block.

Run as `ais_bench` through a wrapper script on PATH (`tests/test_aisbench_run.py`).
"""

import argparse
import json
import re
import sqlite3
import struct
import sys
import time
import types
from pathlib import Path
from typing import Any

import httpx


def _find(name: str, config_dir: Path) -> Path:
    if Path(name).is_file():
        return Path(name)
    for path in sorted((config_dir / "models").rglob("*.py")):
        if path.name.lower() == f"{name}.py".lower():
            return path
    print(f"ais_bench: no config matches {name}", file=sys.stderr)
    raise SystemExit(1)


def _models(path: Path) -> list[dict[str, Any]]:
    # The configs import AISBench's model classes: give them some, as the package would.
    for name in ("ais_bench", "ais_bench.benchmark", "ais_bench.benchmark.models"):
        sys.modules.setdefault(name, types.ModuleType(name))
    models_module = sys.modules["ais_bench.benchmark.models"]
    for cls in ("VLLMCustomAPIChat", "VLLMCustomAPIChatStream", "VLLMCustomAPI"):
        setattr(models_module, cls, type(cls, (), {}))
    namespace: dict[str, Any] = {"__file__": str(path)}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return list(namespace["models"])


def _metrics_url(model: dict[str, Any]) -> str:
    host, port = model.get("host_ip", "localhost"), model.get("host_port", 8080)
    host = f"[{host}]" if ":" in str(host) else host
    return f"http://{host}:{port}/metrics"


def _request_base(model: dict[str, Any]) -> str:
    if model.get("url"):
        return str(model["url"]).rstrip("/")
    return _metrics_url(model).removesuffix("/metrics")


def _snapshot(url: str) -> dict[str, float]:
    totals = {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0}
    text = httpx.get(url, timeout=5).text
    for line in text.splitlines():
        match = re.match(r"vllm:spec_decode_(num_\w+?)_total(\{[^}]*\})? (\S+)", line)
        if match and match[1] in totals:
            totals[match[1]] += float(match[3])
    return totals


def _npy(values: list[float]) -> bytes:
    """A one-dimensional float64 array in NumPy's `.npy` format, version 1.0."""
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': ({len(values)},), }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return (
        b"\x93NUMPY\x01\x00"
        + struct.pack("<H", len(header))
        + header.encode()
        + struct.pack(f"<{len(values)}d", *values)
    )


def _send(
    client: httpx.Client, model: dict[str, Any], prompts: int, answers: list[Any] | None = None
) -> list[list[float]]:
    """Send `prompts` requests to the model's server; their time points (perf_counter). Each
    answer's JSON is appended to `answers` where given (the test's own account, not
    AISBench's)."""
    points = []
    for index in range(prompts):
        sent = time.perf_counter()
        body = {"prompt": f"question {index}", "max_tokens": 16}
        answer = client.post(f"{_request_base(model)}/v1/completions", json=body)
        points.append([sent, time.perf_counter()])
        if answers is not None:
            answers.append(answer.json())
    return points


def write_records(folder: Path, dataset: str, points: list[list[float]]) -> None:
    db_name = f"{dataset}.db"
    (folder / "db_data").mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(folder / "db_data" / db_name) as db:
        db.execute("CREATE TABLE numpy_store (id INTEGER PRIMARY KEY AUTOINCREMENT, arr_blob BLOB)")
        lines = []
        for index, request in enumerate(points):
            row = db.execute("INSERT INTO numpy_store (arr_blob) VALUES (?)", (_npy(request),))
            lines.append({"id": index, "success": True, "db_name": db_name, "data_abbr": dataset,
                          "input": f"question {index}", "prediction": "tok " * 16,
                          "input_tokens": 2, "output_tokens": 16,
                          "time_points": {"__db_ref__": row.lastrowid}})  # fmt: skip
    (folder / f"{dataset}_details.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _key(url: str) -> str:
    label = url.split("://", 1)[1].split("/", 1)[0]
    return re.sub(r"[^A-Za-z0-9._-]", "_", label)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ais_bench")
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--datasets", nargs="+", default=[])
    parser.add_argument("--config-dir", default="configs")
    parser.add_argument("-w", "--work-dir", default="outputs/default")
    parser.add_argument("-m", "--mode", default="all")
    parser.add_argument("--spec-decode", action="store_true")
    parser.add_argument("--num-prompts", type=int, default=10)
    parser.add_argument("--startup-s", type=float, default=0.0)
    parser.add_argument("--noise-requests", type=int, default=0)
    parser.add_argument("--warmup-pause-s", type=float, default=0.0)
    # The test's own: a pause between datasets, and every answer by dataset, to a file.
    parser.add_argument("--dataset-pause-s", type=float, default=0.0)
    parser.add_argument("--answers-log")
    parser.add_argument("--pypi", action="store_true", help="behave as the PyPI release")
    args = parser.parse_args(argv)
    if args.pypi and args.spec_decode:
        print("ais_bench: error: unrecognized arguments: --spec-decode", file=sys.stderr)
        return 2
    models = [m for name in args.models for m in _models(_find(name, Path(args.config_dir)))]
    run_dir = Path(args.work_dir) / time.strftime("%Y%m%d_%H%M%S")
    performances = run_dir / "performances"
    with httpx.Client(timeout=60) as client:
        for model in models:
            _send(client, model, args.noise_requests)  # not AISBench's: before its run
        time.sleep(args.startup_s)  # imports, config loading: not measured by AISBench
        before = (
            {_metrics_url(m): _snapshot(_metrics_url(m)) for m in models}
            if args.spec_decode
            else {}
        )
        if args.mode == "perf":
            for model in models:
                _send(client, model, 1)  # the warm-up: counted by its spec-decode, not recorded
            time.sleep(args.warmup_pause_s)
        # Its datasets one after another, each sent to every model.
        records: dict[str, list[list[list[float]]]] = {}
        answers: dict[str, list[Any]] = {}
        for position, dataset in enumerate(args.datasets or ["demo"]):
            if position:
                time.sleep(args.dataset_pause_s)
            answers[dataset] = []
            records[dataset] = [
                _send(client, model, args.num_prompts, answers[dataset]) for model in models
            ]
    for dataset, per_model in records.items():
        for model, points in zip(models, per_model, strict=True):
            folder = performances / str(model.get("abbr", "model"))
            folder.mkdir(parents=True, exist_ok=True)
            if args.mode == "perf" and points:
                write_records(folder, dataset, points)
    if args.answers_log:
        Path(args.answers_log).write_text(json.dumps(answers))
    for url, first in before.items():
        last = _snapshot(url)
        delta = {name: last[name] - first[name] for name in first}
        result = {"status": "ok", "url": url, "error": None, "data": {
            "num_drafts": int(delta["num_drafts"]), "draft_tokens": int(delta["num_draft_tokens"]),
            "accepted_tokens": int(delta["num_accepted_tokens"])}}  # fmt: skip
        (performances / f"spec_decode_{_key(url)}.json").write_text(json.dumps(result, indent=2))
        label = url.split("://", 1)[1].split("/", 1)[0]
        print(f"========== Speculative Decoding Metrics  [{label}] ==========")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
