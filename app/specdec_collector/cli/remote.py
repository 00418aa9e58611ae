"""Commands that talk to a running collector (`start`, `stop`, `get`, `report`, `ls`, `run`) or
to a server (`load`, `wait-ready`)."""

import argparse
import asyncio
import contextlib
import dataclasses
import json
import secrets
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdec_collector.cli.exits import Exit, error_text
from specdec_collector.schemas import Source

if TYPE_CHECKING:
    from collections.abc import Callable

    from specdec_collector.cli.runner import Gates
    from specdec_collector.client import CollectorClient
    from specdec_collector.core.results import TargetResult


def _client(args: argparse.Namespace) -> "CollectorClient":
    from specdec_collector.client import CollectorClient

    return CollectorClient(args.server, args.api_key, team=args.team)


def _labels(pairs: Sequence[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"specdec: --label {pair!r} is not key=value")
        labels[key] = value
    return labels


def _targets(args: argparse.Namespace) -> list[Any]:
    """The targets of `--target` and `--targets-from` (`start`: a bad config is an error)."""
    from specdec_collector.aisbench.configs import targets_of_configs

    found = targets_of_configs([Path(path) for path in args.targets_from or []])
    if found.problem is not None:
        raise SystemExit(f"specdec: --targets-from: {found.problem}")
    targets: list[Any] = [*(args.target or []), *found.targets]
    if not targets:
        raise SystemExit("specdec: give at least one --target host:port or --targets-from FILE")
    return targets


# The sample interval of an AISBench perf run when none is given: the inference phase's
# bounds are the samples around it, so they are at most this far off.
AISBENCH_SAMPLE_INTERVAL_S = 1.0


def _run_targets(
    args: argparse.Namespace, command: list[str], cwd: Path
) -> tuple[list[Any], Path, str | None, bool]:
    """`specdec run`'s targets, the command's work dir, why nothing can be measured, and
    whether it is an AISBench perf run (whose inference phase its records bound).

    `--target`/`--targets-from` when given; else, for an AISBench command, the servers of its
    `--models` configs, found as AISBench finds them. A config that cannot be read never stops
    the benchmark: it runs, and the reason is printed.
    """
    from specdec_collector.aisbench.command import parse_aisbench
    from specdec_collector.aisbench.configs import targets_of_configs, targets_of_models

    aisbench = parse_aisbench(command, cwd)
    work_dir = aisbench.work_dir if aisbench is not None else cwd / "outputs"
    if args.target or args.targets_from:
        found = targets_of_configs([Path(path) for path in args.targets_from or []])
    elif aisbench is not None:
        found = targets_of_models(aisbench.models, aisbench.config_dir, cwd)
    else:
        raise SystemExit("specdec run: give --target host:port or --targets-from FILE")
    for line in found.said:
        print(f"specdec: {line}", file=sys.stderr)
    targets: list[Any] = [*(args.target or []), *found.targets]
    problem = found.problem or (None if targets else "no target found")
    return targets, work_dir, problem, aisbench is not None and aisbench.mode == "perf"


def _client_call(args: argparse.Namespace, call: "Callable[[CollectorClient], int]") -> int:
    from specdec_collector.client import CollectorError, CollectorUnavailable

    with _client(args) as client:
        try:
            return call(client)
        except CollectorError as exc:
            print(
                f"specdec: {error_text(exc.status, exc.detail, client.base_url)}", file=sys.stderr
            )
            return Exit.REFUSED
        except CollectorUnavailable as exc:
            print(f"specdec: collector unreachable: {exc}", file=sys.stderr)
            return Exit.UNREACHABLE


def _moment(text: str | None, option: str) -> datetime | None:
    """An RFC 3339 time with its zone (`2026-11-30T12:00:00Z`), or None."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(f"specdec: {option} {text!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise SystemExit(f"specdec: {option} {text!r} needs a zone (Z or +hh:mm)")
    return moment


def start(args: argparse.Namespace) -> int:
    from specdec_collector.client import StartFrom

    source = StartFrom(Source(args.source), at=_moment(args.at, "--at"))

    def call(client: "CollectorClient") -> int:
        window = client.start(
            args.id, _targets(args), _labels(args.label), args.sample_interval, source
        )
        if args.json:
            print(json.dumps(window.model_dump(mode="json"), indent=2))
            return 0
        print(f"window {window.id} open on {', '.join(t.target for t in window.targets)}")
        return 0

    return _client_call(args, call)


def _print_text(args: argparse.Namespace, text_of: "Callable[[CollectorClient], str]") -> int:
    """Print the text `text_of` reads from the collector (a console report)."""

    def call(client: "CollectorClient") -> int:
        print(text_of(client), end="")
        return 0

    return _client_call(args, call)


def stop(args: argparse.Namespace) -> int:
    at = _moment(args.at, "--at")

    def stopped(client: "CollectorClient") -> str:
        window = client.stop(args.id, at)
        if args.json:
            return json.dumps(window.model_dump(mode="json"), indent=2) + "\n"
        return client.report(args.id)

    return _print_text(args, stopped)


def get(args: argparse.Namespace) -> int:
    def call(client: "CollectorClient") -> int:
        window = client.get(args.id)
        if args.json:
            print(json.dumps(window.model_dump(mode="json"), indent=2))
            return 0
        started = window.started_at.isoformat().replace("+00:00", "Z")
        print(f"window {window.id} ({window.state}), started {started}")
        for target in window.targets:
            result = target.result
            if result is None:
                print(f"  {target.target:<28} open")
            elif result.ok and result.data is not None:
                data = result.data
                print(
                    f"  {target.target:<28} acceptance {data.acceptance_rate:.2f} %, "
                    f"length {data.acceptance_length:.2f}, {data.num_drafts} drafts"
                )
            else:
                print(f"  {target.target:<28} N/A: {result.error}")
        return 0

    return _client_call(args, call)


def report(args: argparse.Namespace) -> int:
    return _print_text(args, lambda client: client.report(args.id))


def compare(args: argparse.Namespace) -> int:
    from specdec_collector.core.report import render_comparison

    def call(client: "CollectorClient") -> int:
        comparison = client.compare(args.ids).model_dump(mode="json")
        print(
            json.dumps(comparison, indent=2) if args.json else render_comparison(comparison),
            end="\n" if args.json else "",
        )
        return 0

    return _client_call(args, call)


def ls(args: argparse.Namespace) -> int:
    def call(client: "CollectorClient") -> int:
        windows = client.list(args.limit, args.state, args.label, args.target)
        if args.json:
            listed = [window.model_dump(mode="json") for window in windows]
            print(json.dumps(listed, indent=2))
            return 0
        print(f"{'id':<32} {'state':<7} {'started':<20} {'targets':>7}  acceptance (%)")
        for window in windows:
            rates = [
                f"{t.acceptance_rate:.2f}" for t in window.targets if t.acceptance_rate is not None
            ]
            started = window.started_at.strftime("%Y-%m-%d %H:%M:%S")
            count = len(window.targets)
            print(
                f"{window.id:<32} {window.state:<7} {started:<20} {count:>7}  "
                f"{', '.join(rates) or '-'}"
            )
        return 0

    return _client_call(args, call)


def export(args: argparse.Namespace) -> int:
    """Every window the filters keep, with its results: JSON lines (one window each, as
    `GET /windows/{id}` answers it, written as read) or CSV (one row per window and target)."""
    from specdec_collector.cli.progress import Progress
    from specdec_collector.core.report import windows_results_csv

    since = _moment(args.since, "--since")
    progress = Progress("specdec export", quiet=args.quiet)

    def call(client: "CollectorClient") -> int:
        rows: list[tuple[tuple[object, ...], str, TargetResult | None]] = []
        listed = client.every_window(args.state, args.label, args.target, since)
        count = 0
        with contextlib.ExitStack() as stack:
            out = (
                sys.stdout
                if args.output is None
                else stack.enter_context(open(args.output, "w", encoding="utf-8"))
            )
            for count, summary in enumerate(listed, start=1):
                view = client.get(summary.id)
                if args.format == "jsonl":
                    out.write(view.model_dump_json() + "\n")
                else:
                    labels = json.dumps(view.labels, sort_keys=True) if view.labels else None
                    context = (view.id, view.state, view.started_at, view.stopped_at, labels)
                    rows.extend((context, t.target, t.result) for t in view.targets)
                progress.show(f"{count} windows read, {progress.seconds():.0f} s")
            if args.format == "csv":
                out.write(windows_results_csv(rows))
        progress.done(f"{count} windows written to {args.output or 'stdout'}")
        return 0

    return _client_call(args, call)


def force_close(args: argparse.Namespace) -> int:
    def call(client: "CollectorClient") -> int:
        window = client.force_close(args.id)
        print(f"window {window.id} closed without a final scrape: every result is na")
        return 0

    return _client_call(args, call)


def run(args: argparse.Namespace) -> int:
    from specdec_collector.cli.runner import RunOptions, run_wrapped

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    window_id = args.id or time.strftime("run-%Y%m%d-%H%M%S-") + secrets.token_hex(2)
    if args.from_ is not None or args.to is not None:
        return _run_past(args, window_id, command)
    if not command:
        raise SystemExit(
            "specdec run: give the command after --, e.g. specdec run --target h:p -- ais_bench ..."
        )
    gates = _gates(args)
    targets, work_dir, problem, aisbench_perf = _run_targets(args, command, Path.cwd())
    inference_only = aisbench_perf and not args.whole_command
    interval = args.sample_interval
    prometheus = args.source == Source.PROMETHEUS
    if inference_only and interval is None and not prometheus:
        interval = AISBENCH_SAMPLE_INTERVAL_S  # samples make the phase's bounds tight
    options = RunOptions(
        window_id=window_id,
        targets=targets,
        command=command,
        sample_interval_s=interval,
        labels=_labels(args.label),
        output_dir=Path(args.output_dir) if args.output_dir else None,
        work_dir=work_dir,
        nothing_to_measure=problem,
        aisbench_inference=inference_only,
        from_prometheus=prometheus,
        gates=gates,
    )
    with _client(args) as client:
        return run_wrapped(client, options)


def _gates(args: argparse.Namespace) -> "Gates | None":
    """The gates `specdec run` was given; a usage error naming the option for a bad one."""
    from specdec_collector.cli.runner import Gates
    from specdec_collector.core.gates import parse_max_drop, parse_requirement

    if args.max_drop and not args.baseline:
        raise SystemExit("specdec run: --max-drop needs --baseline ID (the window to compare with)")
    try:
        requirements = [parse_requirement(text) for text in args.require]
        drops = [parse_max_drop(text) for text in args.max_drop]
    except ValueError as exc:
        raise SystemExit(f"specdec run: --require/--max-drop {exc}") from None
    if not requirements and not drops:
        if args.junit:
            raise SystemExit("specdec run: --junit writes the verdicts of --require/--max-drop")
        return None
    junit = Path(args.junit) if args.junit else None
    return Gates(tuple(requirements), tuple(drops), args.baseline, junit)


def _run_past(args: argparse.Namespace, window_id: str, command: list[str]) -> int:
    """`specdec run --source prometheus --from T --to T`: a window over a run that is over,
    read from the collector's Prometheus, in one call; its report printed."""
    if command or args.source != Source.PROMETHEUS:
        raise SystemExit(
            "specdec run: --from/--to measure a past run: --source prometheus, no command"
        )
    start, end = _moment(args.from_, "--from"), _moment(args.to, "--to")
    if start is None or end is None:
        raise SystemExit("specdec run: a past run needs both --from and --to")
    targets = _targets(args)

    def call(client: "CollectorClient") -> int:
        from specdec_collector.cli.runner import write_results

        window = client.measure_past(window_id, targets, start, end, _labels(args.label))
        print(client.report(window_id), end="")
        output_dir = Path(args.output_dir) if args.output_dir else None
        write_results(window, output_dir, lambda line: print(line, file=sys.stderr))
        return 0

    return _client_call(args, call)


def load(args: argparse.Namespace) -> int:
    from specdec_collector.cli.progress import Progress
    from specdec_collector.cli.runner import generate_load
    from specdec_collector.core.request_accounts import render, summarise

    progress = Progress("specdec load", quiet=args.quiet)

    def said(answered: int, failed: int, tokens: int) -> None:
        progress.show(
            f"{answered}/{args.requests} requests, {failed} failed, {tokens} tokens, "
            f"{progress.seconds():.0f} s"
        )

    summary = asyncio.run(
        generate_load(
            args.url,
            args.requests,
            args.concurrency,
            args.max_tokens,
            chat=args.chat,
            stream=args.stream,
            model=args.model,
            temperature=args.temperature,
            prompt=args.prompt,
            progress=said,
        )
    )
    progress.done(f"{summary.requests} requests answered in {summary.seconds:.1f} s")
    uncounted = f" ({summary.uncounted} answers without usage)" if summary.uncounted else ""
    print(
        f"{summary.requests} requests ({summary.failed} failed), "
        f"{summary.completion_tokens} tokens{uncounted} in {summary.seconds:.1f} s"
    )
    view = summarise(summary.accounts)
    if view is not None:
        print(render(view), end="")
    if args.per_request is not None:
        records = [dataclasses.asdict(account) for account in summary.accounts]
        document = {"summary": None if view is None else view.as_json(), "requests": records}
        Path(args.per_request).write_text(json.dumps(document, indent=2) + "\n")
    if summary.first_failure:
        print(f"specdec load: the first failed request: {summary.first_failure}", file=sys.stderr)
    return 1 if summary.failed else 0


def wait_ready(args: argparse.Namespace) -> int:
    import httpx

    from specdec_collector.cli.progress import Progress

    deadline = time.monotonic() + args.timeout
    progress = Progress("specdec wait-ready", quiet=args.quiet)
    # One client for every try: each new one would build a TLS context (the CA bundle loaded).
    with httpx.Client(timeout=2) as http:
        for url in args.urls:
            while True:
                try:
                    answer = http.get(url)
                    if answer.is_success:
                        break
                    why = f"HTTP {answer.status_code}"
                except httpx.HTTPError as exc:
                    why = type(exc).__name__
                if time.monotonic() > deadline:
                    print(
                        f"specdec wait-ready: {url} did not answer in {args.timeout:g} s "
                        f"(last: {why})",
                        file=sys.stderr,
                    )
                    return Exit.UNREACHABLE
                progress.show(f"waiting for {url} ({why}, {progress.seconds():.0f} s)")
                time.sleep(0.1)
        progress.done(f"ready after {progress.seconds():.1f} s")
    return 0
