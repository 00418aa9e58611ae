"""The `specdec` command: `serve` the collector, `simulate` a vLLM server, manage `keys`."""

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import uvicorn

from app.targets import TargetPolicy

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


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

    server = SimulatedServer(engines=args.engines, k=args.k, drafts_per_s=args.drafts_per_s)
    print(
        f"simulating a vLLM server: {args.engines} engine(s), k={args.k}, "
        f"per-position acceptance {list(server.acceptance)} -> http://{args.host}:{args.port}/metrics",
        flush=True,
    )
    uvicorn.run(create_simulator_app(server), host=args.host, port=args.port, log_level="warning")
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

    simulate = commands.add_parser("simulate", help="serve a vLLM-shaped /metrics that grows")
    simulate.add_argument("--host", default="127.0.0.1")
    simulate.add_argument("--port", type=int, default=9000)
    simulate.add_argument("--engines", type=_positive_int, default=1, help="data-parallel engines")
    simulate.add_argument("--k", type=_positive_int, default=5, help="speculative tokens per draft")
    simulate.add_argument(
        "--drafts-per-s", type=float, default=50.0, help="drafts per second per engine"
    )
    simulate.set_defaults(handler=_simulate)

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
