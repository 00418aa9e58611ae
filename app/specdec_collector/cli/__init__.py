"""The `specdec` command.

Service side: `serve` the collector, `simulate` a vLLM server, manage `keys`.
Client side (of a running collector): `start`, `stop`, `get`, `report`, `ls`, `run`; and `load`.
"""

import argparse
import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any

from specdec_collector import __version__
from specdec_collector.schemas import KeyRole, Source
from specdec_collector.simulator.families import METRICS_PATHS


def _rates(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of rates"
        ) from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


#: Options whose default is never shown in a help text.
_SECRETS = frozenset({"api_key"})


class _HelpWithDefaults(argparse.HelpFormatter):
    """Each option's help with its default, unless the help says it already, there is none,
    or it is a secret (`--api-key`'s default is the key in the environment)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or action.dest in _SECRETS
            or default in (None, False, argparse.SUPPRESS)
            or default == []
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """`specdec`'s parsers: help with defaults (`_HelpWithDefaults`), subcommands alike."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpWithDefaults)
        super().__init__(*args, **kwargs)


def _command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The command `name` of `specdec_collector.cli.<module>`, imported when it runs: each
    command imports what it uses (a client's none of the server, `simulate` no database),
    so that no `specdec` call pays for importing the modules of the others."""

    def run(args: argparse.Namespace) -> int:
        command = getattr(importlib.import_module(f"specdec_collector.cli.{module}"), name)
        return int(command(args))

    return run


def _window_filters(parser: argparse.ArgumentParser) -> None:
    """The filters of a listing of windows: state, labels, target."""
    parser.add_argument("--state", choices=["open", "closed"], help="only open or closed windows")
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only windows with this label (repeatable: all must match)",
    )
    parser.add_argument("--target", metavar="HOST:PORT", help="only windows on this target")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(prog="specdec", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="apply migrations, then serve the collector")
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to bind (beyond loopback: keys)"
    )
    serve.add_argument("--port", type=int, default=8000, help="port to serve on")
    serve.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes serving on the port, each a replica (default: SPECDEC_WORKERS, else one "
        "per core)",
    )
    serve.set_defaults(handler=_command("service", "serve"))

    simulate = commands.add_parser(
        "simulate", help="serve a simulated vLLM server (OpenAI API and /metrics)"
    )
    simulate.add_argument("--host", default="127.0.0.1", help="address to bind")
    simulate.add_argument("--port", type=int, default=9000, help="port to serve on")
    simulate.add_argument(
        "--instances",
        "--engines",
        dest="instances",
        type=_positive_int,
        default=1,
        help="data-parallel instances (vLLM's `engine` label)",
    )
    simulate.add_argument("--k", type=_positive_int, default=5, help="speculative tokens per draft")
    simulate.add_argument(
        "--drafts-per-s", type=float, default=50.0, help="drafts a second per instance (0: off)"
    )
    simulate.add_argument(
        "--acceptance", type=_rates, help="per-position acceptance, e.g. 0.8,0.6,0.4 (sets k)"
    )
    simulate.add_argument(
        "--model-name", default="meta-llama/Llama-3.1-8B-Instruct", help="the model it serves"
    )
    simulate.add_argument(
        "--reset-after", type=_positive_int, help="restart instance 0 every N requests"
    )
    simulate.add_argument("--seed", type=int, help="random seed of the acceptance draws")
    simulate.add_argument(
        "--engine",
        choices=list(METRICS_PATHS),
        default="vllm",
        help="whose spec-decode metrics to serve, with its names, endpoint and printing",
    )
    simulate.add_argument(
        "--per-request-spec-decode-metrics",
        choices=["none", "summary"],
        default="none",
        help="as vLLM's flag: each answer tells its drafts under metrics.speculative_decoding",
    )
    simulate.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="milliseconds each step of a request takes (its inter-token latency; default 0)",
    )
    simulate.add_argument(
        "--no-spec-decoding",
        dest="spec_decoding",
        action="store_false",
        help="a vLLM without spec decoding: one token a step, no spec-decode metrics",
    )
    simulate.set_defaults(handler=_command("service", "simulate"))

    def client_command(name: str, help_text: str) -> argparse.ArgumentParser:
        command = commands.add_parser(name, help=help_text)
        command.add_argument(
            "--server",
            default=os.environ.get("SPECDEC_SERVER", "http://127.0.0.1:8000"),
            help="the collector (default: $SPECDEC_SERVER or http://127.0.0.1:8000)",
        )
        command.add_argument(
            "--api-key",
            default=os.environ.get("SPECDEC_API_KEY"),
            help="a key of your team (default: $SPECDEC_API_KEY)",
        )
        command.add_argument("--team", help="admin keys: the team to act in")
        return command

    def target_options(command: argparse.ArgumentParser) -> None:
        command.add_argument(
            "--target", action="append", help="host:port or URL of /metrics (repeatable)"
        )
        command.add_argument(
            "--targets-from",
            action="append",
            metavar="FILE",
            help="an AISBench model config: the servers of its `models` (for `run -- ais_bench "
            "--models NAME`, found from the command line as AISBench finds them)",
        )
        command.add_argument(
            "--label",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a label of the window (repeatable)",
        )
        command.add_argument(
            "--sample-interval", type=float, metavar="S", help="sample every S seconds"
        )

    start = client_command("start", "open a window on a collector")
    start.add_argument("id", help="the window's id (letters, digits, ._-)")
    target_options(start)
    start.add_argument(
        "--source",
        choices=[s.value for s in Source],
        default=Source.SCRAPE.value,
        help="where the counters come from (prometheus: the collector's SPECDEC_PROMETHEUS_URL)",
    )
    start.add_argument(
        "--at", metavar="TIME", help="prometheus source: start in the past (RFC 3339)"
    )
    start.add_argument("--json", action="store_true", help="the window as JSON")
    start.set_defaults(handler=_command("remote", "start"))
    stop = client_command("stop", "close a window and print its report")
    stop.add_argument("id", help="the window's id")
    stop.add_argument("--at", metavar="TIME", help="prometheus source: stop in the past (RFC 3339)")
    stop.add_argument("--json", action="store_true", help="the window and its results as JSON")
    stop.set_defaults(handler=_command("remote", "stop"))
    get = client_command("get", "show a window and its results")
    get.add_argument("id", help="the window's id")
    get.add_argument("--json", action="store_true", help="the window as JSON")
    get.set_defaults(handler=_command("remote", "get"))
    report = client_command("report", "print a window's AISBench console report")
    report.add_argument("id", help="the window's id")
    report.set_defaults(handler=_command("remote", "report"))
    compare = client_command(
        "compare", "compare windows per target: each difference, its interval and verdict"
    )
    compare.add_argument("ids", nargs="+", metavar="ID", help="two or more window ids")
    compare.add_argument("--json", action="store_true", help="print the answer as JSON")
    compare.set_defaults(handler=_command("remote", "compare"))
    ls = client_command("ls", "list your team's windows, newest first")
    ls.add_argument("--limit", type=_positive_int, default=50, help="at most this many (1-500)")
    _window_filters(ls)
    ls.add_argument("--json", action="store_true", help="the windows as JSON")
    ls.set_defaults(handler=_command("remote", "ls"))
    export = client_command(
        "export", "every window the filters keep, with its results, as JSON lines or CSV"
    )
    _window_filters(export)
    export.add_argument(
        "--since", metavar="TIME", help="only windows started after TIME (RFC 3339)"
    )
    export.add_argument(
        "--format",
        choices=["jsonl", "csv"],
        default="jsonl",
        help="jsonl: a window per line, as GET /windows/ID; csv: a row per window and target",
    )
    export.add_argument("--output", metavar="FILE", help="write here (default: stdout)")
    export.add_argument("--quiet", action="store_true", help="no progress on stderr")
    export.set_defaults(handler=_command("remote", "export"))
    force = client_command(
        "force-close", "admin keys: close an open window at once, without a final scrape"
    )
    force.add_argument("id", help="the window's id")
    force.set_defaults(handler=_command("remote", "force_close"))

    run = client_command("run", "run a benchmark command inside a window")
    target_options(run)
    run.add_argument("--id", help="window id (default: run-<time>-<random>)")
    run.add_argument(
        "--output-dir",
        help="where to write spec_decode_<host>_<port>.json (default: the newest "
        "<work dir>/<run>/performances the command made - AISBench's -w, default "
        "outputs/default - else .); beside AISBench's own file of that name, never over it",
    )
    run.add_argument(
        "--source",
        choices=[s.value for s in Source],
        default=Source.SCRAPE.value,
        help="where the counters come from (prometheus: the collector's SPECDEC_PROMETHEUS_URL)",
    )
    run.add_argument("--from", dest="from_", metavar="TIME", help="a past run's start (RFC 3339)")
    run.add_argument("--to", metavar="TIME", help="a past run's end: with --from, no command")
    run.add_argument(
        "--whole-command",
        action="store_true",
        help="AISBench perf runs: measure the whole command, not only the inference phase "
        "(by default bounded by AISBench's own request records, sampled every 1 s)",
    )
    run.add_argument(
        "--require",
        action="append",
        default=[],
        metavar="FIGURE>=VALUE",
        help="a gate on every target's result, e.g. 'acceptance_rate>=60' or "
        "'acceptance_length>=2.5'; a failed gate exits with code 86 (the command's own code wins "
        "when it failed)",
    )
    run.add_argument("--baseline", metavar="ID", help="a window to compare with (--max-drop)")
    run.add_argument(
        "--max-drop",
        action="append",
        default=[],
        metavar="FIGURE=VALUE",
        help="at most this much below the baseline, judged on the 95%% interval of the drop "
        "where both windows were sampled, e.g. 'acceptance_rate=2' (points)",
    )
    run.add_argument("--junit", metavar="FILE", help="write the gates' verdicts as JUnit XML")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    run.set_defaults(handler=_command("remote", "run"))

    load = commands.add_parser(
        "load", help="send OpenAI completion requests (to the simulator or a real server)"
    )
    load.add_argument("--url", default="http://127.0.0.1:9000", help="the server's base URL")
    load.add_argument("--requests", type=_positive_int, default=100, help="requests to send")
    load.add_argument("--concurrency", type=_positive_int, default=8, help="requests at a time")
    load.add_argument("--max-tokens", type=_positive_int, default=64, help="max_tokens of each")
    load.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    load.add_argument("--stream", action="store_true", help="stream the answers (SSE)")
    load.add_argument("--model", help="the model to ask for (default: the server's first)")
    load.add_argument("--temperature", type=float, default=0.0, help="sent with every request")
    load.add_argument(
        "--prompt",
        default="question {index}",
        help="every request's prompt; {index} is replaced by the request's number "
        "(default: %(default)s)",
    )
    load.add_argument(
        "--per-request",
        metavar="FILE",
        help="write each answer's own account of its drafts (vLLM's metrics.speculative_decoding, "
        "llama.cpp's timings, SGLang's meta_info, a gateway's usage) and their summary as JSON",
    )
    load.add_argument("--quiet", action="store_true", help="no progress on stderr")
    load.set_defaults(handler=_command("remote", "load"))

    wait = commands.add_parser("wait-ready", help="wait until every URL answers 2xx (for scripts)")
    wait.add_argument("urls", nargs="+", metavar="URL", help="URLs that must answer 2xx")
    wait.add_argument("--timeout", type=float, default=60.0, help="seconds to wait in all")
    wait.add_argument("--quiet", action="store_true", help="no progress on stderr")
    wait.set_defaults(handler=_command("remote", "wait_ready"))

    keys = commands.add_parser("keys", help="manage API keys stored (hashed) in the database")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = key_commands.add_parser("create", help="create a key; it is printed once")
    create.add_argument("--team", required=True, help="the team the key acts for")
    create.add_argument(
        "--role",
        required=True,
        choices=[role.value for role in KeyRole],
        help="read (GET only), write (start, stop, read), admin (any team) or metrics (/metrics "
        "only, every team's results: for Prometheus)",
    )
    create.add_argument(
        "--json", action="store_true", help="the new key (and its id, team, role) as JSON"
    )
    create.add_argument(
        "--init",
        action="store_true",
        help="make SPECDEC_DATABASE_URL the collector's database if it is not yet (a first key "
        "before the first serve)",
    )
    create.set_defaults(handler=_command("service", "keys_create"))
    listing = key_commands.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--json", action="store_true", help="the keys as JSON")
    listing.set_defaults(handler=_command("service", "keys_list"))
    revoke = key_commands.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("id", type=int, help="the key's id (`specdec keys list`)")
    revoke.set_defaults(handler=_command("service", "keys_revoke"))
    completion = commands.add_parser(
        "completion", help='print a shell completion script: eval "$(specdec completion bash)"'
    )
    completion.add_argument("shell", choices=["bash", "zsh", "tcsh"], help="the shell")
    completion.set_defaults(handler=_completion)
    return parser


def _completion(args: argparse.Namespace) -> int:
    """The completion script of every subcommand and option, made from this parser (shtab)."""
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `specdec` console script."""
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result
