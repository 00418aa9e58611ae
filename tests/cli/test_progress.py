"""Progress on stderr: redrawn in place on a terminal, a line every few seconds in a log, and
what `load` and `wait-ready` say while they run (stdout stays their answer)."""

import io
import os
import re
import subprocess
import time

import pytest

from specdec_collector.cli.progress import Progress
from tests.support.collector import serve_simulator, specdec_command
from tests.support.metrics_server import free_port


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_log_a_line_every_interval_and_the_last_always(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPECDEC_PROGRESS_S", "5")
    log, clock = io.StringIO(), Clock()
    progress = Progress("specdec load", stream=log, clock=clock)
    progress.show("too soon")
    for step in range(1, 12):
        clock.now = 100 + step
        progress.show(f"at {step} s")
    progress.done("finished")
    assert log.getvalue().splitlines() == [
        "specdec load: at 5 s",
        "specdec load: at 10 s",
        "specdec load: finished",
    ]
    assert progress.seconds() == 11


def test_on_a_terminal_one_line_redrawn_in_place() -> None:
    screen, clock = Terminal(), Clock()
    progress = Progress("specdec wait-ready", stream=screen, clock=clock)
    clock.now += 0.2
    progress.show("waiting for a long url")
    clock.now += 0.2
    progress.show("waiting")
    progress.done("ready")
    shown = screen.getvalue()
    assert shown.count("\n") == 1 and shown.endswith("\n")
    frames = shown.split("\r")[1:]
    assert frames[0] == "specdec wait-ready: waiting for a long url"
    # A shorter line blanks what the longer one left.
    assert frames[1] == "specdec wait-ready: waiting" + " " * len(" for a long url")
    assert frames[2].startswith("specdec wait-ready: ready")


def test_quiet_says_nothing() -> None:
    log, clock = io.StringIO(), Clock()
    progress = Progress("x", stream=log, clock=clock, quiet=True)
    clock.now += 60
    progress.show("a")
    progress.done("b")
    assert log.getvalue() == ""


def _command_env() -> dict[str, str]:
    return {**os.environ, "SPECDEC_PROGRESS_S": "0.3"}


def test_wait_ready_says_what_it_waits_for_until_it_answers() -> None:
    """The server comes up 1.5 s after the command said it waits (timed from that line, not
    from the command's start: starting the interpreter takes a moment of its own)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/models"
    waiting = subprocess.Popen(
        [*specdec_command(), "wait-ready", url, "--timeout", "30"],
        env=_command_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert waiting.stderr is not None
        first = waiting.stderr.readline().rstrip("\n")
        time.sleep(1.5)
        with serve_simulator(port=port):
            stdout, rest = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, rest
    assert stdout == ""
    lines = [first, *rest.splitlines()]
    # The seconds it has waited when it first says so depend on the machine's load.
    waited = re.escape(f"specdec wait-ready: waiting for {url} (ConnectError, ") + r"\d+ s\)"
    assert re.fullmatch(waited, lines[0]), lines[0]
    assert re.fullmatch(r"specdec wait-ready: ready after \d+\.\d s", lines[-1])
    assert float(lines[-1].split()[-2]) >= 1.5


def test_load_says_how_many_requests_answered_as_it_goes() -> None:
    with serve_simulator("--drafts-per-s", "0", "--step-ms", "5") as url:
        ran = subprocess.run(
            [*specdec_command(), "load", "--url", url, "--requests", "60", "--concurrency", "2",
             "--max-tokens", "16"],
            env=_command_env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("60 requests (0 failed), ")
    lines = ran.stderr.splitlines()
    said = [re.fullmatch(r"specdec load: (\d+)/60 requests, 0 failed, (\d+) tokens, \d+ s", line)
            for line in lines[:-1]]  # fmt: skip
    assert said and all(said), lines
    answered = [int(match.group(1)) for match in said if match]
    assert answered == sorted(answered) and 0 < answered[0] < 60
    assert re.fullmatch(r"specdec load: 60 requests answered in \d+\.\d s", lines[-1])
