"""`specdec run` and `specdec load`: a benchmark wrapped in a window, and a small load generator.

`run_wrapped` starts a window, runs the command, stops the window even when the command fails
or is interrupted, prints the report (each block followed by a line naming the window, so it
is never taken for AISBench's own), writes one `spec_decode_<key>.json` per target (beside
AISBench's own file of that name, never over it: `aisbench.files`), and returns the
command's exit code. A collector that cannot be reached, or targets that cannot be found,
never stop the benchmark: the reason is printed and the command runs all the same.
"""

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import httpx

from specdec_collector.aisbench.files import newest_output_dir, results_folder, write_result
from specdec_collector.cli.aisbench_phases import aisbench_difference, aisbench_phases
from specdec_collector.cli.exits import failure_text
from specdec_collector.client import (
    CollectorClient,
    CollectorError,
    CollectorUnavailable,
    StartFrom,
    Target,
)
from specdec_collector.core.gates import GATE_FAILED_EXIT, MaxDrop, Requirement, judge, junit_xml
from specdec_collector.core.gates import render as render_verdicts
from specdec_collector.core.report import render_block, render_dataset_block
from specdec_collector.core.request_accounts import RequestAccount, account_of, merged_chunks
from specdec_collector.core.results import TargetResult
from specdec_collector.schemas import Source, WindowView


@dataclass
class RunOptions:
    """What `specdec run` was asked to do."""

    window_id: str
    targets: Sequence[Target]
    command: Sequence[str]
    sample_interval_s: float | None = None
    labels: dict[str, str] | None = None
    output_dir: Path | None = None
    # Where the command writes its runs (AISBench's work dir): results go to its newest run.
    work_dir: Path = Path("outputs")
    # Why there is nothing to measure (no targets found): the command runs unmeasured.
    nothing_to_measure: str | None = None
    # Measure AISBench's inference phase only, bounded by its own request records.
    aisbench_inference: bool = False
    # Read the window from the collector's Prometheus instead of scraping.
    from_prometheus: bool = False
    # Requirements the results must meet (CI gates), judged after the stop.
    gates: "Gates | None" = None


@dataclass(frozen=True, slots=True)
class Gates:
    """`specdec run --require/--baseline/--max-drop/--junit`."""

    requirements: tuple[Requirement, ...] = ()
    max_drops: tuple[MaxDrop, ...] = ()
    baseline: str | None = None
    junit: Path | None = None


def run_command(command: Sequence[str], say: Callable[[str], None]) -> int:
    """Run `command` in the foreground and return its exit code (128 + N for signal N).

    Ctrl-C reaches the command from the terminal; here the first one is only noted, so the
    window is still stopped once the command ends. A second asks the command to terminate,
    a third kills it.
    """
    interrupts = 0
    child: subprocess.Popen[bytes] | None = None

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        if child is not None and interrupts == 2:
            child.terminate()
        elif child is not None and interrupts > 2:
            child.kill()

    # Noted from before the command exists: a Ctrl-C while it is being started is not lost.
    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        try:
            child = subprocess.Popen(list(command))
        except OSError as exc:
            say(f"specdec: cannot run {command[0]}: {exc.strerror}")
            return 127
        if interrupts:
            # The terminal's Ctrl-C came before the command could receive it: pass it on.
            child.send_signal(signal.SIGINT)
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    return 128 - code if code < 0 else code


def run_wrapped(
    client: CollectorClient, options: RunOptions, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """Start a window, run the command, stop the window, report; the command's exit code."""

    def say(message: str) -> None:
        print(message, file=err, flush=True)

    started = False
    if options.nothing_to_measure is not None:
        say(f"specdec: measuring nothing: {options.nothing_to_measure}")
        say("specdec: running the command anyway, without measuring")
        return run_command(options.command, say)
    try:
        window = client.start(
            options.window_id,
            options.targets,
            options.labels,
            options.sample_interval_s,
            StartFrom(Source.PROMETHEUS if options.from_prometheus else Source.SCRAPE),
        )
        started = True
        say(f"specdec: window {options.window_id} started on {len(window.targets)} target(s)")
    except (CollectorError, CollectorUnavailable) as exc:
        why = failure_text(exc, client.base_url)
        say(f"specdec: could not start window {options.window_id} ({why})")
        say("specdec: running the command anyway, without measuring")
    began = time.time()
    code = run_command(options.command, say)
    if not started:
        return _judged(client, options, [], code, out, say)
    try:
        stopped = client.stop(options.window_id)
    except (CollectorError, CollectorUnavailable) as exc:
        why = failure_text(exc, client.base_url)
        say(f"specdec: could not stop window {options.window_id} ({why})")
        say(f"specdec: stop it later with: specdec stop {options.window_id}")
        return _judged(client, options, [], code, out, say)
    run_folder = newest_output_dir(Path.cwd() / options.work_dir, began - 1)
    results = [(t.target, t.result) for t in stopped.targets if t.result is not None]
    footer = f"(specdec-collector, window {options.window_id})\n"
    if options.aisbench_inference:
        phases = aisbench_phases(client, options.window_id, run_folder, results, say)
        if phases is not None:
            results = phases
            footer = (
                f"(specdec-collector, window {options.window_id}: AISBench's inference phase, "
                "from its request records)\n"
            )
    for key, result in results:
        print(render_block(key, result) + footer, file=out, end="")
        for name, part in (result.datasets or {}).items():
            print(render_dataset_block(key, name, part), file=out, end="")
    out.flush()
    folder = results_folder(options.output_dir, run_folder, options.window_id)
    for key, result in results:
        written = write_result(folder, key, result.as_json(), window_of(stopped))
        if written.beside_aisbench:
            theirs = written.path.with_name(written.path.name.removeprefix("collector_"))
            say(
                f"specdec: AISBench wrote its own {theirs.name}; "
                f"the collector's is beside it: {written.path}"
            )
            difference = aisbench_difference(theirs, result)
            if difference:
                say(f"specdec: {difference}")
        else:
            say(f"specdec: wrote {written.path}")
    return _judged(client, options, results, code, out, say)


def window_of(window: WindowView) -> dict[str, Any]:
    """What a result file says of the window it is of."""
    return window.model_dump(mode="json", include={"id", "labels", "started_at", "stopped_at"})


def write_results(window: WindowView, output_dir: Path | None, say: Callable[[str], None]) -> None:
    """A closed window's results as files (`aisbench.files`), outside any AISBench run."""
    folder = results_folder(output_dir, None, window.id)
    for target in window.targets:
        if target.result is not None:
            written = write_result(
                folder, target.target, target.result.as_json(), window_of(window)
            )
            say(f"specdec: wrote {written.path}")


def _judged(
    client: CollectorClient,
    options: RunOptions,
    results: Sequence[tuple[str, TargetResult]],
    code: int,
    out: TextIO,
    say: Callable[[str], None],
) -> int:
    """The gates' verdicts printed (and written as JUnit XML); the exit code: the command's
    when it failed, else `GATE_FAILED_EXIT` when a gate failed (a window that gave no results
    fails every gate: a CI job must not pass on figures it never had)."""
    gates = options.gates
    if gates is None:
        return code
    # No results (the collector could not be reached): one verdict per gate, each failed.
    measured: list[tuple[str, TargetResult | None]] = list(results) or [("(no result)", None)]
    baseline: dict[str, TargetResult] = {}
    if gates.baseline is not None and gates.max_drops:
        try:
            view = client.get(gates.baseline)
            baseline = {t.target: t.result for t in view.targets if t.result is not None}
        except (CollectorError, CollectorUnavailable) as exc:
            why = failure_text(exc, client.base_url)
            say(f"specdec: could not read the baseline window {gates.baseline} ({why})")
    verdicts = judge(measured, gates.requirements, gates.max_drops, baseline)
    print(render_verdicts(verdicts), file=out, end="", flush=True)
    if gates.junit is not None:
        gates.junit.parent.mkdir(parents=True, exist_ok=True)
        gates.junit.write_text(junit_xml(verdicts, f"specdec run {options.window_id}"))
        say(f"specdec: wrote {gates.junit}")
    failed = sum(not verdict.passed for verdict in verdicts)
    if failed:
        say(f"specdec: {failed} of {len(verdicts)} gate(s) failed")
    if code != 0:
        return code
    return GATE_FAILED_EXIT if failed else 0


@dataclass
class LoadSummary:
    """What a load run did."""

    requests: int
    failed: int
    completion_tokens: int
    seconds: float
    uncounted: int = 0  # streamed answers that gave no usage
    first_failure: str | None = None  # why the first failed request failed
    # What the answers told of each request's speculative decoding (`core.request_accounts`).
    accounts: tuple[RequestAccount, ...] = ()


#: httpx's words for a connection closed before any answer to the request came.
STALE_CONNECTION = "Server disconnected without sending a response"


@dataclass(frozen=True, slots=True)
class _Answer:
    """One completion: whether it was answered 200, why not, the tokens the server says it
    generated (None for a streamed answer without usage), and its request's account."""

    ok: bool
    why: str | None = None
    tokens: int | None = None
    account: RequestAccount | None = None


async def _one_request(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], stream: bool
) -> _Answer:
    """Send one completion and read its answer (a stream's chunks merged into one)."""
    try:
        if stream:
            chunks = []
            async with http.stream("POST", path, json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        chunks.append(json.loads(line[6:]))
            if response.status_code != 200:
                return _Answer(False, f"HTTP {response.status_code}")
            answer = merged_chunks(chunks)
        else:
            response = await http.post(path, json=body)
            if response.status_code != 200:
                return _Answer(False, f"HTTP {response.status_code}")
            answer = response.json()
    except httpx.HTTPError as exc:
        return _Answer(False, f"{type(exc).__name__}: {exc}")
    usage = answer.get("usage")
    tokens = None if not usage else int(usage["completion_tokens"])
    return _Answer(True, None, tokens, account_of(answer))


async def generate_load(
    base_url: str,
    requests: int,
    concurrency: int,
    max_tokens: int,
    *,
    chat: bool = False,
    stream: bool = False,
    model: str | None = None,
    temperature: float = 0.0,
    prompt: str = "question {index}",
    progress: Callable[[int, int, int], None] | None = None,
) -> LoadSummary:
    """Send `requests` OpenAI completion requests, `concurrency` at a time; each one's prompt
    is `prompt` with `{index}` replaced by the request's number.

    Tokens are the server's own count, `usage.completion_tokens`; streamed requests ask for it
    with `stream_options.include_usage`, and a streamed answer without it is counted as such
    (`uncounted`), never guessed from its text. `progress` is told after each request how many
    have answered, how many of them failed, and the tokens so far.
    """
    path = "/v1/chat/completions" if chat else "/v1/completions"
    queue = iter(range(requests))
    failed = tokens = uncounted = answered = 0
    first_failure: str | None = None
    accounts: list[RequestAccount] = []

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal failed, tokens, uncounted, first_failure, answered
        for index in queue:
            body: dict[str, Any] = {
                "max_tokens": max_tokens,
                "stream": stream,
                "model": model,
                "temperature": temperature,
            }
            if stream:
                body["stream_options"] = {"include_usage": True}
            text = prompt.replace("{index}", str(index))
            if chat:
                body["messages"] = [{"role": "user", "content": text}]
            else:
                body["prompt"] = text
            for attempt in range(2):
                answer = await _one_request(http, path, body, stream)
                # A kept-alive connection that the server closed as the request left on it
                # (llama-server does, now and then): no answer began, the request is sent once
                # more on a new connection. The server's own counters tell if it had run.
                if answer.ok or attempt or STALE_CONNECTION not in (answer.why or ""):
                    break
            if answer.ok and answer.tokens is None:
                uncounted += 1
            elif answer.ok and answer.tokens is not None:
                tokens += answer.tokens
            if answer.account is not None:
                accounts.append(answer.account)
            failed += not answer.ok
            first_failure = first_failure or answer.why
            answered += 1
            if progress is not None:
                progress(answered, failed, tokens)

    began = time.monotonic()
    async with httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=120) as http:
        await asyncio.gather(*(worker(http) for _ in range(max(1, concurrency))))
    seconds = time.monotonic() - began
    return LoadSummary(requests, failed, tokens, seconds, uncounted, first_failure, tuple(accounts))
