"""AISBench conventions: model configs read as AISBench reads them, file names, output folders."""

import json
import os
import time
from pathlib import Path

import pytest

from specdec_collector.aisbench.command import parse_aisbench
from specdec_collector.aisbench.configs import (
    ConfigError,
    ModelServer,
    find_config,
    literal_models,
    read_config,
    targets_of_configs,
)
from specdec_collector.aisbench.files import (
    collector_filename,
    newest_output_dir,
    result_filename,
    results_folder,
    write_result,
)
from specdec_collector.aisbench.records import InferenceSpan, inference_span, npy_floats

EVALUATED = """
from ais_bench.benchmark.models import VLLMCustomAPIChat  # not installed: a stand-in

HOST = "127.0.0.1"
PORTS = [9101, 9102]
unrelated = dict(host_ip="10.9.9.9", host_port=1)  # not a model: never a target
models = [
    dict(attr="service", type=VLLMCustomAPIChat, abbr=f"m{i}", host_ip=HOST, host_port=port)
    for i, port in enumerate(PORTS)
]
models[1]["host_port"] = 9103  # a later assignment wins, as in AISBench
models.append(dict(abbr="via-url", host_ip="10.9.9.9", host_port=1,
                   url="http://127.0.0.1:9104/v1/chat/completions"))
models.append(dict(abbr="defaults"))
"""


def test_a_config_is_evaluated_as_aisbench_evaluates_it(tmp_path: Path) -> None:
    config = tmp_path / "cfg.py"
    config.write_text(EVALUATED)
    read = read_config(config)
    assert read.note is None
    assert [server.target() for server in read.servers] == [
        {"host_ip": "127.0.0.1", "host_port": 9101},
        {"host_ip": "127.0.0.1", "host_port": 9103},
        "http://127.0.0.1:9104/metrics",  # where AISBench sends the requests
        {"host_ip": "localhost", "host_port": 8080},  # AISBench's defaults
    ]
    twice = targets_of_configs([config, config])
    assert len(twice.targets) == 4 and twice.problem is None
    assert twice.said == [f"model config {config}: 4 model(s)"] * 2


def test_a_config_that_cannot_be_evaluated_falls_back_to_its_models_literals(
    tmp_path: Path,
) -> None:
    config = tmp_path / "cfg.py"
    config.write_text(
        "from mmengine.config import read_base\n"
        "with read_base():\n"
        "    from .base import *  # a relative import: no package to take it from\n"
        "other = [dict(host_ip='10.9.9.9', host_port=1)]\n"
        "models = [dict(host_ip='10.0.0.1', host_port=1)]\n"
        "models = [dict(abbr='a', host_ip='10.0.0.2', host_port=8080), {'host_ip': '10.0.0.3'}]\n"
    )
    read = read_config(config)
    assert read.servers == [
        ModelServer("a", "10.0.0.2", 8080), ModelServer(None, "10.0.0.3", 8080)
    ]  # fmt: skip
    assert read.note is not None and read.note.startswith("could not be evaluated (ImportError")
    assert read.note.endswith("; read as literals")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("models = [dict(host_ip=HOST, host_port=80)]", "line 1: host_ip is not a literal"),
        ("models = []", "`models` names no model"),
        ("model = [dict(host_ip='h', host_port=1)]", "no `models = \\[...\\]` list"),
        ("models = [dict(", "not Python"),
    ],
)
def test_configs_that_name_no_server(tmp_path: Path, source: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        literal_models(source, filename="cfg.py")
    config = tmp_path / "cfg.py"
    config.write_text(source)
    with pytest.raises(ConfigError):
        read_config(config)


def test_a_config_that_never_finishes_is_given_up(tmp_path: Path) -> None:
    config = tmp_path / "cfg.py"
    config.write_text("while True:\n    pass\nmodels = [dict(host_ip='10.0.0.5', host_port=1)]\n")
    read = read_config(config, timeout_s=1)
    assert read.note == "could not be evaluated (evaluating it took over 1 s); read as literals"
    assert read.servers == [ModelServer(None, "10.0.0.5", 1)]


def test_model_names_are_found_as_aisbench_finds_them(tmp_path: Path) -> None:
    models = tmp_path / "cfgs" / "models"
    (models / "vllm_api").mkdir(parents=True)
    (models / "vllm_api" / "Vllm_API_Chat.py").write_text("")
    (tmp_path / "vllm_api_chat.py").write_text("")  # the current folder: never searched
    (tmp_path / "by_path.py").write_text("")
    assert find_config("vllm_api_chat", tmp_path / "cfgs", tmp_path) == (
        models / "vllm_api" / "Vllm_API_Chat.py"
    )
    assert find_config("by_path.py", tmp_path / "cfgs", tmp_path) == tmp_path / "by_path.py"
    with pytest.raises(ConfigError, match="model config 'missing' not found"):
        find_config("missing", tmp_path / "cfgs", tmp_path)


def test_the_aisbench_command_line() -> None:
    cwd = Path("/runs")
    parsed = parse_aisbench(
        ["/usr/bin/ais_bench", "--models", "a", "b", "--datasets", "d", "-w", "out", "-m", "perf",
         "--spec-decode", "--config-dir", "/cfg"], cwd,
    )  # fmt: skip
    assert parsed is not None
    assert parsed.models == ("a", "b") and parsed.config_dir == Path("/cfg")
    assert parsed.work_dir == cwd / "out" and parsed.spec_decode and parsed.mode == "perf"
    default = parse_aisbench(["python", "-m", "ais_bench", "--models", "a"], cwd)
    assert default is not None and default.work_dir == cwd / "outputs/default"
    assert default.config_dir == cwd / "configs"
    assert parse_aisbench(["vllm", "bench", "serve"], cwd) is None


def test_result_file_names_are_aisbench_names() -> None:
    assert result_filename("10.0.0.1:8080") == "spec_decode_10.0.0.1_8080.json"
    assert result_filename("[::1]:9302") == "spec_decode____1__9302.json"  # as AISBench names it
    assert result_filename("vllm-0.svc:9000") == "spec_decode_vllm-0.svc_9000.json"
    assert collector_filename("[::1]:9302") == "collector_spec_decode____1__9302.json"


def test_a_file_aisbench_wrote_is_never_overwritten(tmp_path: Path) -> None:
    theirs = tmp_path / "spec_decode_h_1.json"
    theirs.write_text('{\n  "status": "ok"\n}')
    result = {"status": "ok", "samples": {"taken": 0, "failed": 0}}
    window = {"id": "w-1", "labels": {}, "started_at": "t0", "stopped_at": "t1"}
    written = write_result(tmp_path, "h:1", result, window)
    assert written.beside_aisbench and written.path == tmp_path / "collector_spec_decode_h_1.json"
    assert theirs.read_text() == '{\n  "status": "ok"\n}'
    assert json.loads(written.path.read_text())["window"] == window
    # A file of the collector's own of the same window (a retry) is replaced.
    again = write_result(tmp_path, "h:1", result, window)
    assert again.path == written.path
    # One of another window (an earlier run into the same folder) is kept: the new one goes
    # to a folder of its window's.
    later = write_result(tmp_path, "h:1", result, {**window, "id": "w-2"})
    assert later.path == tmp_path / "w-2" / "collector_spec_decode_h_1.json"
    assert json.loads(written.path.read_text())["window"]["id"] == "w-1"
    assert results_folder(None, None, "w-3") == Path.cwd() / "specdec-results" / "w-3"
    assert results_folder(tmp_path, None, "w-3") == tmp_path


def test_newest_output_dir_made_by_the_run(tmp_path: Path) -> None:
    work = tmp_path / "outputs" / "default"
    old = work / "20260101_000000" / "performances"
    old.mkdir(parents=True)
    os.utime(old, (1, 1))
    # File times come from a coarse clock and can trail time.time() by a tick: a margin.
    since = time.time() - 1
    assert newest_output_dir(work, since) is None
    new = work / "20261130_111111" / "performances"
    new.mkdir(parents=True)
    assert newest_output_dir(work, since) == new
    assert newest_output_dir(tmp_path / "outputs", since) == new  # one level up too


def test_aisbench_request_records_give_its_inference_phase(tmp_path: Path) -> None:
    """Records as AISBench writes them: time points as `.npy` arrays in its SQLite `db_data`
    (made here with the stand-in's own writer), and plain lists in `tmp/` before its summary."""
    from tests.support.aisbench_standin import write_records

    model = tmp_path / "performances" / "vllm-api"
    write_records(model, "gsm8k", [[10.5, 10.75, 11.0], [12.0, 13.25]])
    (model / "tmp").mkdir()
    (model / "tmp" / "tmp_0.jsonl").write_text(
        '{"success": true, "time_points": [9.5, 14.0]}\n{"success": false, "time_points": []}\nnot json\n'
    )
    span = inference_span(tmp_path / "performances")
    assert span == InferenceSpan(first_sent=9.5, last_received=14.0, requests=3)
    assert inference_span(tmp_path) is None  # a folder with no records
    assert npy_floats(b"not an array") is None


def test_model_names_fall_back_to_the_installed_aisbench_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `--config-dir`, AISBench looks in its own package's configs/models (found here
    without importing the package)."""
    package = tmp_path / "site" / "ais_bench"
    shipped = package / "benchmark" / "configs" / "models" / "vllm_api"
    shipped.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    (shipped / "vllm_api_general_chat.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert find_config("vllm_api_general_chat", tmp_path / "configs", tmp_path) == (
        shipped / "vllm_api_general_chat.py"
    )
    own = tmp_path / "configs" / "models"
    own.mkdir(parents=True)
    (own / "vllm_api_general_chat.py").write_text("")  # --config-dir comes first
    assert find_config("vllm_api_general_chat", tmp_path / "configs", tmp_path) == (
        own / "vllm_api_general_chat.py"
    )
