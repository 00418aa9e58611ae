"""`specdec run`: a benchmark wrapped in a window, as a user runs it, over real processes."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest

from specdec_collector.cli.exits import Exit, error_text
from specdec_collector.cli.runner import run_command
from specdec_collector.core.comparison import NO_INTERVAL
from specdec_collector.core.gates import (
    GATE_FAILED_EXIT,
)
from tests.conftest import ADMIN_KEY
from tests.support import clients
from tests.support.collector import Team, serve_simulator, specdec_command
from tests.support.metrics_server import free_port, serve_metrics
from tests.support.payloads import drafts_payload
from tests.support.waiting import wait_for

SPECDEC = " ".join(specdec_command())


def _env(team: Team) -> dict[str, str]:
    """The environment of a user of `team`: where the collector is and the team's key."""
    return {**os.environ, "SPECDEC_SERVER": team.base_url, "SPECDEC_API_KEY": team.key}


def _run(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [*specdec_command(), "run", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_run_measures_writes_results_where_aisbench_put_its_own_and_keeps_the_exit_code(
    team: Team, tmp_path: Path
) -> None:
    with serve_simulator("--drafts-per-s", "0", "--seed", "7") as simulator:
        target = simulator.removeprefix("http://")
        benchmark = (
            "mkdir -p outputs/default/20261130_101010/performances/vllm-api && "
            f"{SPECDEC} load --url {simulator} --requests 60 --max-tokens 32 && exit 3"
        )
        run = _run(
            [
                "--server",
                team.base_url,
                "--target",
                target,
                "--id",
                "bench-1",
                "--",
                "sh",
                "-c",
                benchmark,
            ],
            tmp_path,
            _env(team),
        )
    assert run.returncode == 3, run.stderr
    assert "Speculative Decoding Metrics  [" + target + "]" in run.stdout
    written = (
        tmp_path
        / "outputs/default/20261130_101010/performances"
        / f"spec_decode_{target.replace(':', '_')}.json"
    )
    result = json.loads(written.read_text())
    window = clients.get(
        f"{team.base_url}/windows/bench-1", headers=team.headers, timeout=30
    ).json()
    assert window["state"] == "closed"
    # The AISBench result, and which window it is of.
    told = result.pop("window")
    assert result == window["targets"][0]["result"]
    assert result["status"] == "ok" and result["data"]["num_drafts"] > 0
    assert told == {key: window[key] for key in ("id", "labels", "started_at", "stopped_at")}


def test_ctrl_c_stops_the_window_and_exits_like_the_command(team: Team, tmp_path: Path) -> None:
    running = tmp_path / "running"
    command = f"import pathlib, time; pathlib.Path({str(running)!r}).touch(); time.sleep(60)"
    with serve_metrics(body=drafts_payload(100)) as server:
        process = subprocess.Popen(
            [*specdec_command(), "run", "--server", team.base_url, "--target", server.target, "--id", "ctrl-c",
             "--output-dir", str(tmp_path / "out"), "--", sys.executable, "-c", command],
            cwd=tmp_path, env=_env(team), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        # The window is open and the command is running (it starts only after the window).
        wait_for(lambda: running.exists() or None, "the command to start")
        server.replace(drafts_payload(250))
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGINT, stderr
    window = clients.get(f"{team.base_url}/windows/ctrl-c", headers=team.headers, timeout=30).json()
    assert window["state"] == "closed"
    assert window["targets"][0]["result"]["data"]["num_drafts"] == 150
    assert (tmp_path / "out" / f"spec_decode_{server.target.replace(':', '_')}.json").exists()
    assert "Drafts                                        150" in stdout


def test_an_unreachable_collector_never_breaks_the_benchmark(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run = _run(
        ["--server", f"http://127.0.0.1:{free_port()}", "--target", "127.0.0.1:9", "--",
         sys.executable, "-c", f"open({str(marker)!r}, 'w').write('yes'); raise SystemExit(5)"],
        tmp_path,
    )  # fmt: skip
    assert run.returncode == 5
    assert marker.read_text() == "yes"
    assert "could not start window" in run.stderr and "running the command anyway" in run.stderr


def test_targets_from_an_aisbench_model_config(team: Team, tmp_path: Path) -> None:
    with (
        serve_metrics(body=drafts_payload(10)) as one,
        serve_metrics(body=drafts_payload(10)) as two,
    ):
        config = tmp_path / "vllm_api_stream_chat.py"
        config.write_text(
            "from ais_bench.benchmark.models import VLLMCustomAPIChat\n"
            "models = [\n"
            f"    dict(attr='service', type=VLLMCustomAPIChat, abbr='a', host_ip='127.0.0.1', host_port={one.port}),\n"
            f"    dict(attr='service', type=VLLMCustomAPIChat, abbr='b', host_ip='127.0.0.1', host_port={two.port}),\n"
            "]\n"
        )
        run = _run(
            [
                "--server",
                team.base_url,
                "--targets-from",
                str(config),
                "--id",
                "cfg",
                "--",
                "true",
            ],
            tmp_path,
            _env(team),
        )
    assert run.returncode == 0, run.stderr
    window = clients.get(f"{team.base_url}/windows/cfg", headers=team.headers, timeout=30).json()
    assert [t["target"] for t in window["targets"]] == [one.target, two.target]
    # Outside an AISBench run's folder, one folder per window: nothing of an earlier run's
    # in the current folder is written over.
    assert (
        len(list((tmp_path / "specdec-results" / "cfg").glob("spec_decode_127.0.0.1_*.json"))) == 2
    )
    assert list(tmp_path.glob("spec_decode_*.json")) == []


def test_client_commands(team: Team, tmp_path: Path) -> None:
    env = _env(team)

    def specdec(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*specdec_command(), *args], env=env, capture_output=True, text=True, timeout=60
        )

    with serve_metrics(body=drafts_payload(100)) as server:
        started = specdec("start", "cli-1", "--target", server.target, "--label", "model=llama")
        assert started.returncode == 0 and f"window cli-1 open on {server.target}" in started.stdout
        server.replace(drafts_payload(500))
        stopped = specdec("stop", "cli-1")
    assert "Drafts                                        400" in stopped.stdout
    got = specdec("get", "cli-1")
    assert f"{server.target}" in got.stdout and "400 drafts" in got.stdout
    as_json = json.loads(specdec("get", "cli-1", "--json").stdout)
    assert as_json["labels"] == {"model": "llama"}
    assert specdec("report", "cli-1").stdout == stopped.stdout
    listed = specdec("ls").stdout.splitlines()
    assert listed[1].startswith("cli-1") and "closed" in listed[1]
    missing = specdec("stop", "nope")
    assert (
        missing.returncode == Exit.REFUSED and "window nope not found (HTTP 404)" in missing.stderr
    )
    # A refused body names the field, in a sentence (not a Python list).
    refused = specdec("start", "cli-2", "--target", "127.0.0.1:99999")
    assert refused.returncode == Exit.REFUSED, refused.stderr
    assert refused.stderr == (
        "specdec: body.targets: Value error, target 0: port 99999 is outside 1-65535 (HTTP 422)\n"
    )
    # A --server that is not a collector, and one that does not answer: told apart.
    with serve_metrics(body=b"", status=404) as elsewhere:
        wrong = specdec("ls", "--server", f"http://{elsewhere.target}")
    assert wrong.returncode == Exit.REFUSED and "is --server (SPECDEC_SERVER)" in wrong.stderr
    gone = specdec("ls", "--server", f"http://127.0.0.1:{free_port()}")
    assert gone.returncode == Exit.UNREACHABLE and "collector unreachable" in gone.stderr


def test_error_texts_name_each_field_and_the_wrong_server() -> None:
    detail = [
        {"loc": ["body", "targets", 0], "msg": "port must be 1-65535", "type": "value_error"},
        {"loc": ["query", "limit"], "msg": "must be at most 500"},
    ]
    assert error_text(422, detail, "http://c:8000") == (
        "body.targets.0: port must be 1-65535; query.limit: must be at most 500 (HTTP 422)"
    )
    for other in ("Not Found", "", "<html><body>nginx</body></html>"):
        said = error_text(404, other, "http://c:8000")
        assert said.startswith("http://c:8000 has no such path (HTTP 404)")
    assert error_text(404, "window w not found", "x") == "window w not found (HTTP 404)"


def test_a_ctrl_c_while_the_command_is_being_started_reaches_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The terminal's Ctrl-C can land before the command exists: it is passed on, not lost."""
    real_popen = subprocess.Popen

    def popen_after_a_ctrl_c(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        os.kill(os.getpid(), signal.SIGINT)  # as the terminal would, to the foreground group
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen_after_a_ctrl_c)
    said: list[str] = []
    code = run_command([sys.executable, "-c", "import time; time.sleep(60)"], said.append)
    assert code == 128 + signal.SIGINT
    assert said == []


def test_specdec_version_names_the_installed_package() -> None:
    from importlib.metadata import version

    shown = subprocess.run(
        [*specdec_command(), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert shown == f"specdec {version('specdec-collector')}\n"


#: What each command's module may not import: a client's no server and no database, the
#: service's commands no client (`serve` imports the service itself when it runs).
_NOT_IMPORTED = {
    "specdec_collector.cli": ["uvicorn", "fastapi", "sqlalchemy", "httpx", "aiohttp", "alembic"],
    "specdec_collector.cli.remote": ["uvicorn", "fastapi", "sqlalchemy", "aiohttp", "alembic"],
    "specdec_collector.cli.service": ["fastapi", "sqlalchemy", "httpx", "aiohttp", "alembic"],
}


@pytest.mark.parametrize("module", list(_NOT_IMPORTED))
def test_a_command_imports_only_what_it_uses(module: str) -> None:
    """Every `specdec` call imports the parser of every command, then its own command's
    module: importing them all cost each call ~0.1-0.2 s of CPU more."""
    code = (
        "import importlib, json, sys; from specdec_collector.cli import build_parser; "
        f"build_parser(); importlib.import_module({module!r}); "
        f"print(json.dumps([m for m in {_NOT_IMPORTED[module]!r} if m in sys.modules]))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(shown.stdout) == []


def test_ls_filters_and_prints_json_and_an_admin_force_closes(team: Team) -> None:
    env = _env(team)

    def specdec(*args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
        environment = {**env, "SPECDEC_API_KEY": key or team.key}
        return subprocess.run(
            [*specdec_command(), *args], env=environment, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip

    with serve_metrics(body=drafts_payload(100)) as server:
        opened = json.loads(specdec("start", "ls-0", "--target", server.target, "--json").stdout)
        assert opened["state"] == "open" and opened["id"] == "ls-0"
        assert specdec("stop", "ls-0").returncode == 0
        for window, model in (("ls-a", "llama"), ("ls-b", "qwen"), ("ls-c", "llama")):
            started = specdec(
                "start", window, "--target", server.target, "--label", f"model={model}"
            )
            assert started.returncode == 0, started.stderr
        as_json = json.loads(specdec("stop", "ls-a", "--json").stdout)
        assert as_json["state"] == "closed" and as_json["targets"][0]["result"]["status"] == "na"
        listed = json.loads(specdec("ls", "--json", "--label", "model=llama").stdout)
        assert [w["id"] for w in listed] == ["ls-c", "ls-a"]
        assert [w["id"] for w in json.loads(specdec("ls", "--json", "--state", "open").stdout)] == [
            "ls-c", "ls-b"
        ]  # fmt: skip
        on_target = json.loads(specdec("ls", "--json", "--target", server.target).stdout)
        assert {w["id"] for w in on_target} == {"ls-0", "ls-a", "ls-b", "ls-c"}
        # Force-closing takes an admin key: the team's own is refused.
        refused = specdec("force-close", "ls-b")
        assert refused.returncode == Exit.REFUSED and "(HTTP 403)" in refused.stderr
        closed = specdec("force-close", "ls-b", "--team", team.name, key=ADMIN_KEY)
        assert closed.returncode == 0, closed.stderr
        assert "window ls-b closed without a final scrape" in closed.stdout
        assert specdec("stop", "ls-c").returncode == 0
    window = clients.get(f"{team.base_url}/windows/ls-b", headers=team.headers, timeout=30).json()
    assert window["state"] == "closed" and window["targets"][0]["result"]["status"] == "na"


def test_export_writes_every_window_with_its_results_as_json_lines_and_csv(
    team: Team, tmp_path: Path
) -> None:
    env = _env(team)

    def specdec(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*specdec_command(), *args], env=env, capture_output=True, text=True, timeout=60
        )

    with serve_metrics(body=drafts_payload(100)) as server:
        assert specdec("start", "ex-1", "--target", server.target, "--label", "m=a").returncode == 0
        server.replace(drafts_payload(300))
        assert specdec("stop", "ex-1").returncode == 0
        assert specdec("start", "ex-2", "--target", server.target).returncode == 0
        lines = specdec("export")
        assert lines.returncode == 0, lines.stderr
        table = specdec("export", "--format", "csv", "--output", str(tmp_path / "all.csv"))
        assert table.returncode == 0, table.stderr
        closed = specdec("export", "--state", "closed", "--format", "csv", "--quiet")
        later = specdec("export", "--since", "2999-01-01T00:00:00Z")
        assert specdec("stop", "ex-2").returncode == 0
    exported = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [window["id"] for window in exported] == ["ex-2", "ex-1"]
    # Each line is the window as GET /windows/{id} answered it then.
    with clients.client(base_url=team.base_url, headers=team.headers, timeout=30) as api:
        assert exported[1] == api.get("/windows/ex-1").json()
    assert "2 windows written to stdout" in lines.stderr
    assert table.stdout == "" and f"written to {tmp_path / 'all.csv'}" in table.stderr
    rows = list(csv.DictReader((tmp_path / "all.csv").open()))
    assert [(row["window"], row["state"]) for row in rows] == [("ex-2", "open"), ("ex-1", "closed")]
    assert rows[0]["status"] == "" and rows[0]["target"] == server.target  # no result yet
    done = rows[1]
    # drafts_payload(d): d drafts of 3 tokens, d/2, d/4, d/8 accepted at positions 0-2.
    drafts, accepted = 300 - 100, (150 - 50) + (75 - 25) + (37 - 12)
    assert int(done["num_drafts"]) == drafts and int(done["draft_tokens"]) == 3 * drafts
    assert int(done["accepted_tokens"]) == accepted
    assert float(done["acceptance_rate"]) == pytest.approx(100 * accepted / (3 * drafts), abs=0.01)
    assert float(done["acceptance_length"]) == pytest.approx(1 + accepted / drafts, abs=0.01)
    assert float(done["position_0"]) == pytest.approx((150 - 50) / drafts, abs=1e-4)  # a share
    assert json.loads(done["labels"]) == {"m": "a"} and done["stopped_at"].endswith("Z")
    assert closed.stderr == ""  # --quiet
    assert [row["window"] for row in csv.DictReader(closed.stdout.splitlines())] == ["ex-1"]
    assert later.returncode == 0 and later.stdout == ""


@pytest.mark.parametrize(
    ("words", "offered"),
    [
        ("specdec for", "force-close"),
        ("specdec ls --sta", "--state"),
        ("specdec wait", "wait-ready"),
    ],
)
def test_shell_completion_completes_commands_and_options(
    tmp_path: Path, words: str, offered: str
) -> None:
    """`specdec completion bash`, sourced in a real bash, completes what a user types."""
    script = tmp_path / "specdec.bash"
    script.write_text(
        subprocess.run(
            [*specdec_command(), "completion", "bash"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    )  # fmt: skip
    asked = words.split()
    completed = subprocess.run(
        ["bash", "-c", f'source "{script}"; COMP_WORDS=({words}); COMP_CWORD={len(asked) - 1}; '
         f'COMP_LINE="{words}"; COMP_POINT=${{#COMP_LINE}}; _shtab_specdec; '
         'printf "%s\\n" "${COMPREPLY[@]}"'],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.split()  # fmt: skip
    assert completed == [offered]


def test_specdec_run_exits_with_the_gates_code_and_keeps_a_failed_commands(
    team: Team, tmp_path: Path
) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*specdec_command(), "run", "--server", team.base_url, "--api-key", team.key, *args],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    with serve_simulator("--drafts-per-s", "0", "--seed", "8") as simulator:
        target = simulator.removeprefix("http://")
        load = [*specdec_command(), "load", "--url", simulator, "--requests", "20"]
        passed = run("--target", target, "--id", "g-pass", "--require", "acceptance_rate>=1",
                     "--junit", "out/junit.xml", "--", *load)  # fmt: skip
        failed = run("--target", target, "--id", "g-fail", "--require", "acceptance_rate>=99.9",
                     "--", *load)  # fmt: skip
        both = run("--target", target, "--id", "g-both", "--require", "acceptance_rate>=99.9",
                   "--", "sh", "-c", " ".join(load) + " && exit 1")  # fmt: skip
        drop = run("--target", target, "--id", "g-drop", "--baseline", "g-pass",
                   "--max-drop", "acceptance_rate=50", "--", *load)  # fmt: skip
        usage = run("--target", target, "--max-drop", "acceptance_rate=2", "--", "true")
        compared = subprocess.run(
            [*specdec_command(), "compare", "--server", team.base_url, "--api-key", team.key,
             "g-pass", "g-fail"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert passed.returncode == 0, passed.stderr
    assert f"PASS  {target}  acceptance_rate>=1" in passed.stdout
    assert ElementTree.parse(tmp_path / "out/junit.xml").getroot().get("failures") == "0"
    assert failed.returncode == GATE_FAILED_EXIT, failed.stderr
    assert f"FAIL  {target}  acceptance_rate>=99.9" in failed.stdout
    assert both.returncode == 1  # the command's own failure wins
    assert drop.returncode == 0 and "judged on the figures" in drop.stdout
    assert usage.returncode not in (0, GATE_FAILED_EXIT) and "needs --baseline" in usage.stderr
    # `specdec compare`: the two runs' differences, without verdicts (unsampled), saying why.
    assert compared.returncode == 0, compared.stderr
    assert "g-fail versus g-pass:" in compared.stdout and NO_INTERVAL in compared.stdout


def _load(url: str, out: Path, requests: int) -> tuple[int, list[dict[str, object]]]:
    """`specdec load` against `url`: the tokens it counted in the answers' usage, and the
    per-request accounts it wrote (the simulator tells each request's steps)."""
    run = subprocess.run(
        [*specdec_command(), "load", "--url", url, "--requests", str(requests),
         "--concurrency", "4", "--max-tokens", "40", "--per-request", str(out)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    counted = re.search(r"(\d+) requests \(0 failed\), (\d+) tokens", run.stdout)
    assert counted is not None and int(counted[1]) == requests, run.stdout
    return int(counted[2]), json.loads(out.read_text())["requests"]


def _seconds(api: httpx.Client, window: str) -> float:
    """The seconds between a window's first and last snapshot, as its timeline tells them."""
    points = api.get(f"/windows/{window}/samples").json()["series"][0]["points"]
    first, last = (datetime.fromisoformat(points[i]["taken_at"]) for i in (0, -1))
    return (last - first).total_seconds()


def test_a_windows_throughput_is_what_the_load_generator_received(
    api: httpx.Client, team: Team, tmp_path: Path
) -> None:
    """One server on one port, served without spec decoding and then with it (a simulator
    that takes 2 ms a step and tells each request's steps, as vLLM's
    `--per-request-spec-decode-metrics summary`): each window's throughput against the load
    generator's own counts; `/compare` gives their speedup."""
    args = ("--drafts-per-s", "0", "--step-ms", "2", "--seed", "5")
    port = free_port()
    windows: dict[str, tuple[int, list[dict[str, object]], dict[str, Any], float]] = {}
    for name, extra in (
        ("tp-plain", ("--no-spec-decoding",)),
        ("tp-drafting", ("--per-request-spec-decode-metrics", "summary")),
    ):
        with serve_simulator(*args, *extra, port=port) as url:
            assert api.post(f"/windows/{name}/start", json={"targets": [url]}).is_success
            tokens, accounts = _load(url, tmp_path / f"{name}.json", 12)
            result = api.post(f"/windows/{name}/stop").json()["targets"][0]["result"]
            windows[name] = (tokens, accounts, result, _seconds(api, name))
    tokens, _, result, seconds = windows["tp-plain"]
    assert result["status"] == "na" and "No spec decode metrics" in result["error"]
    plain_tp = result["throughput"]
    assert plain_tp["generated_tokens"] == tokens == 12 * 40
    assert plain_tp["finished_requests"] == 12 and plain_tp["generated_tokens_per_step"] == 1.0
    assert plain_tp["generated_tokens_per_second"] == tokens / seconds
    assert plain_tp["inter_token_latency_ms"] == 2.0 * (tokens - 12) / (tokens - 12)

    tokens, accounts, result, seconds = windows["tp-drafting"]
    steps = sum(int(account["steps"]) for account in accounts)  # type: ignore[call-overload]
    accepted = sum(int(account["accepted"]) for account in accounts)  # type: ignore[call-overload]
    drafting_tp = result["throughput"]
    assert result["status"] == "ok" and drafting_tp["generated_tokens"] == tokens
    assert drafting_tp["generated_tokens_per_step"] == tokens / steps
    assert drafting_tp["accepted_token_share"] == accepted / tokens * 100
    # One 2 ms latency a step after each request's first, over its tokens after the first.
    assert drafting_tp["inter_token_latency_ms"] == ((steps - 12) * 0.002 / (tokens - 12) * 1000)
    assert drafting_tp["generated_tokens_per_second"] == tokens / seconds

    compared = api.get("/compare", params={"windows": "tp-plain,tp-drafting"}).json()
    (speedup_row,) = compared["targets"][0]["speedups"] or [None]
    assert (speedup_row["window"], speedup_row["versus"]) == ("tp-drafting", "tp-plain")
    assert speedup_row["generated_tokens_per_second"] == (
        drafting_tp["generated_tokens_per_second"] / plain_tp["generated_tokens_per_second"]
    )
    assert speedup_row["inter_token_latency"] == (
        plain_tp["inter_token_latency_ms"] / drafting_tp["inter_token_latency_ms"]
    )
    assert speedup_row["acceptance_length"] == result["data"]["acceptance_length"]
    # `specdec compare` prints the same speedup.
    printed = subprocess.run(
        [*specdec_command(), "compare", "--server", team.base_url, "--api-key", team.key,
         "tp-plain", "tp-drafting"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert (
        f"tp-drafting versus tp-plain (without spec decoding): "
        f"{speedup_row['generated_tokens_per_second']:.2f}x the generated tokens/s, "
        f"{speedup_row['inter_token_latency']:.2f}x faster tokens, "
        f"acceptance length {speedup_row['acceptance_length']:.2f}"
    ) in printed
    assert f"{plain_tp['generated_tokens_per_second']:.2f} generated tokens/s" in printed


@pytest.mark.parametrize("stream", [False, True])
def test_the_per_request_view_beside_a_windows_counters(
    api: httpx.Client, tmp_path: Path, stream: bool
) -> None:
    """`specdec load` against a simulator that tells each request's drafts as vLLM's
    `--per-request-spec-decode-metrics summary` does: the sums are the window's counts."""
    args = ("--drafts-per-s", "0", "--per-request-spec-decode-metrics", "summary", "--seed", "3")
    with serve_simulator(*args) as url:
        window = f"accounts-{stream}"
        assert api.post(f"/windows/{window}/start", json={"targets": [url]}).is_success
        out = tmp_path / "requests.json"
        run = subprocess.run(
            [*specdec_command(), "load", "--url", url, "--requests", "9", "--concurrency", "3",
             "--max-tokens", "30", "--per-request", str(out), *(["--stream"] if stream else [])],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        result = api.post(f"/windows/{window}/stop").json()["targets"][0]["result"]
    written = json.loads(out.read_text())
    requests = written["requests"]
    assert len(requests) == 9 and {r["source"] for r in requests} == {"vllm"}
    data = result["data"]
    assert sum(r["steps"] for r in requests) == data["num_drafts"] == written["summary"]["steps"]
    assert sum(r["drafted"] for r in requests) == data["draft_tokens"]
    assert sum(r["accepted"] for r in requests) == data["accepted_tokens"]
    assert f"{data['draft_tokens']} draft tokens, {data['accepted_tokens']} accepted" in run.stdout
    rates = sorted(r["accepted"] / r["drafted"] * 100 for r in requests)
    assert written["summary"]["acceptance_rate"]["p50"] == rates[4]
