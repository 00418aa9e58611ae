"""The `specdec` command.

Service side: `serve` the collector, `simulate` a vLLM server, manage `keys`.
Client side (of a running collector): `start`, `stop`, `get`, `report`, `ls`, `run`; and `load`.
"""

import argparse
import asyncio
import json
import logging
import os
import secrets
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

from app.targets import TargetPolicy

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy.engine import Engine

    from app.client import CollectorClient


def _serve(args: argparse.Namespace) -> int:
    from app.auth import active_db_keys, is_loopback, parse_env_keys
    from app.config import get_settings
    from app.db import create_db_engine, upgrade_database
    from app.main import create_app

    settings = get_settings()
    try:
        env_keys = parse_env_keys(settings.api_keys)
        TargetPolicy.parse(settings.allowed_targets)
    except ValueError as exc:
        print(f"specdec serve: {exc}", file=sys.stderr)
        return 2
    upgrade_database(settings.database_url)
    engine = create_db_engine(settings.database_url)
    has_keys = bool(env_keys) or active_db_keys(engine) > 0
    engine.dispose()
    anonymous_allowed = is_loopback(args.host) or settings.allow_anonymous
    if not has_keys and not anonymous_allowed:
        print(
            f"specdec serve: refusing to serve on {args.host} without API keys: anyone who can "
            "reach it could use it. Set SPECDEC_API_KEYS, create a key with `specdec keys create`, "
            "bind to 127.0.0.1, or set SPECDEC_ALLOW_ANONYMOUS=true to accept this.",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per scrape and per Alembic plugin is noise at INFO; keep their warnings.
    for noisy in ("httpx", "alembic.runtime.plugins"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # The lifespan applies the migrations before uvicorn accepts the first connection.
    uvicorn.run(
        create_app(settings, anonymous_allowed=anonymous_allowed),
        host=args.host,
        port=args.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=10,
    )
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from app.simulator import SimulatedServer, create_simulator_app

    try:
        server = SimulatedServer(
            engines=args.engines,
            k=len(args.acceptance) if args.acceptance else args.k,
            drafts_per_s=args.drafts_per_s,
            acceptance=args.acceptance or (),
            model_name=args.model_name,
            reset_after=args.reset_after,
            seed=args.seed,
        )
    except ValueError as exc:
        print(f"specdec simulate: {exc}", file=sys.stderr)
        return 2
    print(
        f"simulating a vLLM server: {args.engines} engine(s), k={server.k}, "
        f"per-position acceptance {list(server.acceptance)}, model {server.model_name}\n"
        f"  OpenAI API at http://{args.host}:{args.port}/v1, metrics at /metrics",
        flush=True,
    )
    uvicorn.run(create_simulator_app(server), host=args.host, port=args.port, log_level="warning")
    return 0


# --- the client commands -------------------------------------------------------------------


def _client(args: argparse.Namespace) -> "CollectorClient":
    from app.client import CollectorClient

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
    from app.aisbench import ConfigError, targets_from_config

    targets: list[Any] = list(args.target or [])
    for path in args.targets_from or []:
        try:
            targets += targets_from_config(Path(path).read_text(), filename=path)
        except (OSError, ConfigError) as exc:
            raise SystemExit(f"specdec: --targets-from {path}: {exc}") from None
    if not targets:
        raise SystemExit("specdec: give at least one --target host:port or --targets-from FILE")
    return targets


def _client_call(args: argparse.Namespace, call: "Callable[[CollectorClient], int]") -> int:
    from app.client import CollectorError, CollectorUnavailable

    with _client(args) as client:
        try:
            return call(client)
        except CollectorError as exc:
            print(f"specdec: {exc.detail} (HTTP {exc.status})", file=sys.stderr)
            return 1
        except CollectorUnavailable as exc:
            print(f"specdec: collector unreachable: {exc}", file=sys.stderr)
            return 2


def _start(args: argparse.Namespace) -> int:
    def call(client: "CollectorClient") -> int:
        window = client.start(args.id, _targets(args), _labels(args.label), args.sample_interval)
        print(f"window {window['id']} open on {', '.join(t['target'] for t in window['targets'])}")
        return 0

    return _client_call(args, call)


def _stop(args: argparse.Namespace) -> int:
    def call(client: "CollectorClient") -> int:
        print(client.stop_and_report(args.id), end="")
        return 0

    return _client_call(args, call)


def _get(args: argparse.Namespace) -> int:
    def call(client: "CollectorClient") -> int:
        window = client.get(args.id)
        if args.json:
            print(json.dumps(window, indent=2))
            return 0
        print(f"window {window['id']} ({window['state']}), started {window['started_at']}")
        for target in window["targets"]:
            result = target["result"]
            if result is None:
                print(f"  {target['target']:<28} open")
            elif result["status"] == "ok":
                data = result["data"]
                print(
                    f"  {target['target']:<28} acceptance {data['acceptance_rate']:.2f} %, "
                    f"length {data['acceptance_length']:.2f}, {data['num_drafts']} drafts"
                )
            else:
                print(f"  {target['target']:<28} N/A: {result['error']}")
        return 0

    return _client_call(args, call)


def _report(args: argparse.Namespace) -> int:
    def call(client: "CollectorClient") -> int:
        print(client.report(args.id), end="")
        return 0

    return _client_call(args, call)


def _ls(args: argparse.Namespace) -> int:
    def call(client: "CollectorClient") -> int:
        windows = client.list(limit=args.limit)
        print(f"{'id':<32} {'state':<7} {'started':<20} {'targets':>7}  acceptance (%)")
        for window in windows:
            rates = [
                f"{t['acceptance_rate']:.2f}"
                for t in window["targets"]
                if t["acceptance_rate"] is not None
            ]
            started = window["started_at"][:19].replace("T", " ")
            count = len(window["targets"])
            print(
                f"{window['id']:<32} {window['state']:<7} {started:<20} {count:>7}  "
                f"{', '.join(rates) or '-'}"
            )
        return 0

    return _client_call(args, call)


def _run(args: argparse.Namespace) -> int:
    from app.runner import RunOptions, run_wrapped

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise SystemExit(
            "specdec run: give the command after --, e.g. specdec run --target h:p -- ais_bench ..."
        )
    window_id = args.id or time.strftime("run-%Y%m%d-%H%M%S-") + secrets.token_hex(2)
    options = RunOptions(
        window_id=window_id,
        targets=_targets(args),
        command=command,
        sample_interval_s=args.sample_interval,
        labels=_labels(args.label),
        output_dir=Path(args.output_dir) if args.output_dir else None,
    )
    with _client(args) as client:
        return run_wrapped(client, options)


def _load(args: argparse.Namespace) -> int:
    from app.runner import generate_load

    summary = asyncio.run(
        generate_load(
            args.url,
            args.requests,
            args.concurrency,
            args.max_tokens,
            chat=args.chat,
            stream=args.stream,
            model=args.model,
        )
    )
    print(
        f"{summary.requests} requests ({summary.failed} failed), "
        f"{summary.completion_tokens} tokens in {summary.seconds:.1f} s"
    )
    return 1 if summary.failed else 0


def _wait_ready(args: argparse.Namespace) -> int:
    import httpx

    deadline = time.monotonic() + args.timeout
    # One client for every try: each new one would build a TLS context (~40 ms of CPU).
    with httpx.Client(timeout=2) as http:
        for url in args.urls:
            while True:
                try:
                    if http.get(url).is_success:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    print(
                        f"specdec wait-ready: {url} did not answer in {args.timeout:g} s",
                        file=sys.stderr,
                    )
                    return 1
                time.sleep(0.1)
    return 0


def _keys_engine() -> "Engine":
    from app.config import get_settings
    from app.db import create_db_engine, upgrade_database

    settings = get_settings()
    upgrade_database(settings.database_url)
    return create_db_engine(settings.database_url)


def _keys_create(args: argparse.Namespace) -> int:
    from app.auth import check_role, check_team, create_key

    try:
        check_team(args.team)
        check_role(args.role)
    except ValueError as exc:
        print(f"specdec keys create: {exc}", file=sys.stderr)
        return 2
    engine = _keys_engine()
    row, key = create_key(engine, args.team, args.role)
    engine.dispose()
    print(f"key {row.id} for team {row.team}, role {row.role}. It is shown only this once:")
    print(key)
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    from app.auth import list_keys

    engine = _keys_engine()
    rows = list_keys(engine)
    engine.dispose()
    print(f"{'id':>5}  {'team':<24} {'role':<6} {'prefix':<9} {'created':<20} revoked")
    for row in rows:
        revoked = row.revoked_at.strftime("%Y-%m-%d %H:%M:%S") if row.revoked_at else "-"
        created = row.created_at.strftime("%Y-%m-%d %H:%M:%S")
        print(f"{row.id:>5}  {row.team:<24} {row.role:<6} {row.prefix:<9} {created:<20} {revoked}")
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    from app.auth import revoke_key

    engine = _keys_engine()
    revoked = revoke_key(engine, args.id)
    engine.dispose()
    if not revoked:
        print(f"specdec keys revoke: no active key {args.id}", file=sys.stderr)
        return 1
    print(f"key {args.id} revoked")
    return 0


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="specdec", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="apply migrations, then serve the collector")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(handler=_serve)

    simulate = commands.add_parser(
        "simulate", help="serve a simulated vLLM server (OpenAI API and /metrics)"
    )
    simulate.add_argument("--host", default="127.0.0.1")
    simulate.add_argument("--port", type=int, default=9000)
    simulate.add_argument("--engines", type=_positive_int, default=1, help="data-parallel engines")
    simulate.add_argument("--k", type=_positive_int, default=5, help="speculative tokens per draft")
    simulate.add_argument(
        "--drafts-per-s", type=float, default=50.0, help="drafts a second per engine (0: off)"
    )
    simulate.add_argument(
        "--acceptance", type=_rates, help="per-position acceptance, e.g. 0.8,0.6,0.4 (sets k)"
    )
    simulate.add_argument("--model-name", default="meta-llama/Llama-3.1-8B-Instruct")
    simulate.add_argument(
        "--reset-after", type=_positive_int, help="restart engine 0 every N requests"
    )
    simulate.add_argument("--seed", type=int, help="random seed of the acceptance draws")
    simulate.set_defaults(handler=_simulate)

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
            help="an AISBench model config: its host_ip/host_port entries",
        )
        command.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
        command.add_argument(
            "--sample-interval", type=float, metavar="S", help="sample every S seconds"
        )

    start = client_command("start", "open a window on a collector")
    start.add_argument("id")
    target_options(start)
    start.set_defaults(handler=_start)
    stop = client_command("stop", "close a window and print its report")
    stop.add_argument("id")
    stop.set_defaults(handler=_stop)
    get = client_command("get", "show a window and its results")
    get.add_argument("id")
    get.add_argument("--json", action="store_true", help="the window as JSON")
    get.set_defaults(handler=_get)
    report = client_command("report", "print a window's AISBench console report")
    report.add_argument("id")
    report.set_defaults(handler=_report)
    ls = client_command("ls", "list your team's windows, newest first")
    ls.add_argument("--limit", type=_positive_int, default=50)
    ls.set_defaults(handler=_ls)

    run = client_command("run", "run a benchmark command inside a window")
    target_options(run)
    run.add_argument("--id", help="window id (default: run-<time>-<random>)")
    run.add_argument(
        "--output-dir",
        help="where to write spec_decode_<host>_<port>.json "
        "(default: the newest outputs/**/performances the command made, else .)",
    )
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    run.set_defaults(handler=_run)

    load = commands.add_parser("load", help="send OpenAI completion requests (to the simulator)")
    load.add_argument("--url", default="http://127.0.0.1:9000")
    load.add_argument("--requests", type=_positive_int, default=100)
    load.add_argument("--concurrency", type=_positive_int, default=8)
    load.add_argument("--max-tokens", type=_positive_int, default=64)
    load.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    load.add_argument("--stream", action="store_true")
    load.add_argument("--model")
    load.set_defaults(handler=_load)

    wait = commands.add_parser("wait-ready", help="wait until every URL answers 2xx (for scripts)")
    wait.add_argument("urls", nargs="+", metavar="URL")
    wait.add_argument("--timeout", type=float, default=60.0)
    wait.set_defaults(handler=_wait_ready)

    keys = commands.add_parser("keys", help="manage API keys stored (hashed) in the database")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = key_commands.add_parser("create", help="create a key; it is printed once")
    create.add_argument("--team", required=True)
    create.add_argument("--role", required=True, choices=["read", "write", "admin"])
    create.set_defaults(handler=_keys_create)
    key_commands.add_parser("list", help="list keys (never the keys themselves)").set_defaults(
        handler=_keys_list
    )
    revoke = key_commands.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("id", type=int)
    revoke.set_defaults(handler=_keys_revoke)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `specdec` console script."""
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
