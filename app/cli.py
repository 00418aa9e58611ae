"""The `specdec` command: `serve` the collector, `simulate` a vLLM `/metrics` server."""

import argparse
import logging
import sys
from collections.abc import Sequence

import uvicorn


def _serve(args: argparse.Namespace) -> int:
    from app.config import get_settings
    from app.main import create_app

    settings = get_settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per scrape and per Alembic plugin is noise at INFO; keep their warnings.
    for noisy in ("httpx", "alembic.runtime.plugins"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # The lifespan applies the migrations before uvicorn accepts the first connection.
    uvicorn.run(
        create_app(settings),
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `specdec` console script."""
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
