"""`specdec run -- ais_bench ...` as an AISBench user runs it, with a stand-in `ais_bench`
(`tests/support/aisbench_standin.py`) against `specdec simulate` and a real collector."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import clients
from tests.support.collector import Team, serve_simulator, specdec_command

ROOT = Path(__file__).parents[1]


def _env(team: Team, tmp_path: Path) -> dict[str, str]:
    """A user's environment: the collector, the team's key, and `ais_bench` on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "ais_bench"
    wrapper.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -m tests.support.aisbench_standin "$@"\n'
    )
    wrapper.chmod(0o755)
    return {**os.environ, "SPECDEC_SERVER": team.base_url, "SPECDEC_API_KEY": team.key,
            "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}  # fmt: skip


def _config(host_port: int | str, host_ip: str = "127.0.0.1") -> str:
    return (
        "from ais_bench.benchmark.models import VLLMCustomAPIChat\n"
        "models = [dict(attr='service', type=VLLMCustomAPIChat, abbr='vllm-api',\n"
        f"               host_ip={host_ip!r}, host_port={host_port}, max_out_len=16)]\n"
    )


def _specdec_run(
    args: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*specdec_command(), "run", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def _window(team: Team, window_id: str) -> dict[str, object]:
    answer = clients.get(f"{team.base_url}/windows/{window_id}", headers=team.headers, timeout=30)
    window: dict[str, object] = answer.json()
    return window


def test_aisbench_with_its_own_spec_decode_keeps_its_file_and_gets_ours_beside_it(
    team: Team, tmp_path: Path
) -> None:
    """The config is found as AISBench finds it (not the decoy in the current folder), its
    file is never overwritten, and each tool's console block says whose it is."""
    with serve_simulator("--drafts-per-s", "0", "--seed", "7") as simulator:
        port = simulator.rsplit(":", 1)[1]
        models = tmp_path / "configs" / "models" / "vllm_api"
        models.mkdir(parents=True)
        (models / "Vllm_Api_Stream_Chat.py").write_text(_config(port))
        (tmp_path / "vllm_api_stream_chat.py").write_text(_config(1))  # never used by AISBench
        run = _specdec_run(
            ["--id", "own", "--", "ais_bench", "--models", "vllm_api_stream_chat",
             "--datasets", "demo_gsm8k", "-m", "perf", "--spec-decode", "-w", "work"],
            tmp_path, _env(team, tmp_path),
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (performances,) = (tmp_path / "work").glob("*/performances")
    key = f"127.0.0.1_{port}"
    theirs = json.loads((performances / f"spec_decode_{key}.json").read_text())
    ours = json.loads((performances / f"collector_spec_decode_{key}.json").read_text())
    window = _window(team, "own")
    # Only the inference phase (its bounds in the file), which here is all the traffic.
    assert ours["data"] == window["targets"][0]["result"]["data"]  # type: ignore[index]
    assert ours["bounds"]["start_phase"] in ("before", "sample")
    assert "samples" not in theirs  # AISBench's file, as AISBench wrote it
    # Only AISBench moved the counters: both tools count the same drafts.
    assert ours["data"]["num_drafts"] == theirs["data"]["num_drafts"] > 0
    assert f"model config {models / 'Vllm_Api_Stream_Chat.py'}" in run.stderr
    assert (
        f"AISBench wrote its own spec_decode_{key}.json; the collector's is beside it: "
        f"{performances / f'collector_spec_decode_{key}.json'}"
    ) in run.stderr
    title = f"========== Speculative Decoding Metrics  [127.0.0.1:{port}] =========="
    assert run.stdout.count(title) == 2  # AISBench's block, then the collector's
    assert (
        "(specdec-collector, window own: AISBench's inference phase, from its request records)\n"
        in run.stdout.split(title)[-1]
    )


def test_aisbench_without_spec_decode_gets_the_aisbench_named_file_in_its_work_dir(
    team: Team, tmp_path: Path
) -> None:
    """The PyPI release has no spec-decode of its own: the collector's file takes its name,
    in the run folder of `-w` given as an absolute path."""
    work = tmp_path / "elsewhere" / "work"
    with serve_simulator("--drafts-per-s", "0", "--seed", "3") as simulator:
        port = simulator.rsplit(":", 1)[1]
        config = tmp_path / "my_model.py"
        config.write_text(_config(port))
        run = _specdec_run(
            ["--id", "pypi", "--", "ais_bench", "--models", str(config), "-m", "perf",
             "--pypi", "-w", str(work)],
            tmp_path, _env(team, tmp_path),
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (performances,) = work.glob("*/performances")
    written = json.loads((performances / f"spec_decode_127.0.0.1_{port}.json").read_text())
    assert written["data"] == _window(team, "pypi")["targets"][0]["result"]["data"]  # type: ignore[index]
    assert written["data"]["num_drafts"] > 0
    assert not list(tmp_path.glob("**/collector_spec_decode_*"))


def test_a_config_the_collector_cannot_find_never_stops_the_benchmark(
    team: Team, tmp_path: Path
) -> None:
    run = _specdec_run(
        ["--id", "lost", "--", "ais_bench", "--models", "no_such_model", "--num-prompts", "0"],
        tmp_path, _env(team, tmp_path),
    )  # fmt: skip
    assert run.returncode == 1  # AISBench's own failure to find it, passed through
    assert "specdec: measuring nothing: model config 'no_such_model' not found" in run.stderr
    assert "running the command anyway" in run.stderr
    assert clients.get(f"{team.base_url}/windows/lost", headers=team.headers).status_code == 404


def test_only_aisbench_s_inference_phase_is_measured_not_the_traffic_before_it(
    team: Team, tmp_path: Path
) -> None:
    """On a shared server, traffic before AISBench's inference phase (here sent while it loads)
    leaked into the whole-command window (+70 % drafts in one run). The phase's bounds come
    from AISBench's own request records; its own file measures the same phase."""
    with serve_simulator("--drafts-per-s", "0", "--seed", "11") as simulator:
        port = simulator.rsplit(":", 1)[1]
        (tmp_path / "cfg.py").write_text(_config(port))
        run = _specdec_run(
            ["--id", "phase", "--sample-interval", "0.5", "--", "ais_bench", "--models",
             str(tmp_path / "cfg.py"), "-m", "perf", "--spec-decode", "--noise-requests", "8",
             "--startup-s", "2", "--warmup-pause-s", "1.2", "--num-prompts", "6"],
            tmp_path, _env(team, tmp_path),
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (performances,) = (tmp_path / "outputs" / "default").glob("*/performances")
    key = f"127.0.0.1_{port}"
    theirs = json.loads((performances / f"spec_decode_{key}.json").read_text())
    ours = json.loads((performances / f"collector_spec_decode_{key}.json").read_text())
    whole = _window(team, "phase")["targets"][0]["result"]  # type: ignore[index]
    # AISBench counts from before its warm-up request; the phase, bounded by its request
    # records, leaves the warm-up out (a sample falls between them), and says what it left.
    assert 0 < ours["data"]["num_drafts"] < theirs["data"]["num_drafts"]
    assert whole["data"]["num_drafts"] > theirs["data"]["num_drafts"]  # the noise, left out
    assert ours["whole_command"] == whole["data"]
    assert any("AISBench's inference phase by its request records" in n for n in ours["notes"])
    assert (
        f"specdec: AISBench's spec_decode_{key}.json counts {theirs['data']['num_drafts']} "
        f"drafts, the collector's {ours['data']['num_drafts']} (its inference phase) of "
        f"{whole['data']['num_drafts']} over the whole command: AISBench reads its counters "
        "before its warm-up request"
    ) in run.stderr
    whole_row = f"{'Whole command':<45} {whole['data']['num_drafts']} drafts, "
    assert whole_row in run.stdout
    bounds = ours["bounds"]
    assert bounds["start_phase"] == "sample"  # a sample between the noise and the phase
    assert bounds["start"] <= bounds["requested_start"] <= bounds["requested_end"] <= bounds["end"]
    assert "specdec: AISBench's inference phase: 6 requests, " in run.stderr


def test_an_aisbench_run_of_several_datasets_gets_a_result_per_dataset(
    team: Team, tmp_path: Path
) -> None:
    """Two datasets one after another, a pause longer than a sample interval between them:
    each dataset's figures are what its own answers told of their drafts (the simulator's
    per-request accounts, as vLLM's `--per-request-spec-decode-metrics summary`), beside the
    whole run's."""
    args = ("--drafts-per-s", "0", "--seed", "7", "--per-request-spec-decode-metrics", "summary")
    answers = tmp_path / "answers.json"
    with serve_simulator(*args) as simulator:
        port = simulator.rsplit(":", 1)[1]
        (tmp_path / "cfg.py").write_text(_config(port))
        run = _specdec_run(
            ["--id", "two-sets", "--sample-interval", "0.5", "--", "ais_bench", "--models",
             str(tmp_path / "cfg.py"), "-m", "perf", "--datasets", "gsm8k", "mmlu",
             "--warmup-pause-s", "1.2", "--dataset-pause-s", "1.5", "--num-prompts", "5",
             "--answers-log", str(answers)],
            tmp_path, _env(team, tmp_path),
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (performances,) = (tmp_path / "outputs" / "default").glob("*/performances")
    key = f"127.0.0.1_{port}"
    ours = json.loads((performances / f"spec_decode_{key}.json").read_text())
    told = json.loads(answers.read_text())
    assert set(ours["datasets"]) == {"gsm8k", "mmlu"}
    for name in ("gsm8k", "mmlu"):
        accounts = [answer["metrics"]["speculative_decoding"] for answer in told[name]]
        steps = sum(account["num_spec_steps"] for account in accounts)
        accepted = sum(account["num_accepted_draft_tokens"] for account in accounts)
        drafted = sum(account["num_draft_tokens"] for account in accounts)
        part = ours["datasets"][name]
        assert part["requests"] == 5 and part["status"] == "ok"
        assert part["data"]["num_drafts"] == steps
        assert part["data"]["accepted_tokens"] == accepted
        assert part["data"]["acceptance_rate"] == accepted / drafted * 100
        assert f"---------- Dataset {name}  [127.0.0.1:{port}] ----------" in run.stdout
    # The whole run is both datasets (the warm-up left out by the records' bounds).
    both = (
        ours["datasets"]["gsm8k"]["data"]["num_drafts"]
        + ours["datasets"]["mmlu"]["data"]["num_drafts"]
    )
    assert ours["data"]["num_drafts"] == both
    assert "specdec: AISBench's run held 2 datasets: gsm8k, mmlu" in run.stderr
