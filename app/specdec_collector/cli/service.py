"""Service-side commands: `serve` the collector, `simulate` a vLLM server, manage `keys`."""

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING

import uvicorn

from specdec_collector.core.targets import TargetPolicy
from specdec_collector.service.connections import GuardedHttpToolsProtocol, raise_open_files_limit

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from specdec_collector.simulator.server import SimulatedServer
    from specdec_collector.store.tables import ApiKey


#: The event loop `specdec serve` runs on: asyncio's own, not uvloop (uvicorn's choice where it
#: is installed). uvloop's libuv accepts one new connection per turn of the loop, so under load
#: the connections waiting to be accepted pile up in the kernel's queue, and a start, the first
#: call on a benchmark run's connection, waits there before the service sees it. asyncio's
#: loop accepts every waiting connection at its next turn.
EVENT_LOOP = "asyncio"


def serve(args: argparse.Namespace) -> int:
    from specdec_collector.service.allocator import start_with_tuned_allocator

    start_with_tuned_allocator()  # large answers reuse heap blocks: see `service.allocator`
    from specdec_collector.config import get_settings
    from specdec_collector.service.auth import active_db_keys, is_loopback, parse_env_keys
    from specdec_collector.service.main import ANONYMOUS_ALLOWED_ENV, configure_logging, create_app
    from specdec_collector.store.db import connections_left, open_database
    from specdec_collector.store.migrate import upgrade_database

    settings = get_settings()
    workers = settings.workers if args.workers is None else args.workers
    try:
        env_keys = parse_env_keys(settings.api_keys)
        TargetPolicy.parse(settings.allowed_targets)
        if workers < 1:
            raise ValueError(f"--workers must be 1 or more, not {workers}")
    except ValueError as exc:
        print(f"specdec serve: {exc}", file=sys.stderr)
        return 2
    # Once, before any worker starts: N workers would otherwise race to migrate.
    upgrade_database(settings.database_url)
    database = open_database(settings.database_url)
    has_keys = bool(env_keys) or active_db_keys(database) > 0
    left = connections_left(database)
    database.dispose()
    # Each worker's pool and as many in overflow, and its small reads' own (`store.small_reads`).
    most = workers * (2 * settings.db_pool_size + 1)
    if left is not None and most > left:
        print(
            POOL_WARNING.format(workers=workers, pool=settings.db_pool_size, most=most, left=left),
            file=sys.stderr,
        )
    anonymous_allowed = is_loopback(args.host) or settings.allow_anonymous
    if not has_keys and not anonymous_allowed:
        print(
            f"specdec serve: refusing to serve on {args.host} without API keys: anyone who can "
            "reach it could use it. Set SPECDEC_API_KEYS, create a key with "
            "`specdec keys create --init`, bind to 127.0.0.1, or set SPECDEC_ALLOW_ANONYMOUS=true "
            "to accept this.",
            file=sys.stderr,
        )
        return 2
    configure_logging(settings)
    raise_open_files_limit()  # before the workers start: they inherit it
    common = {
        "host": args.host,
        "port": args.port,
        "log_level": settings.log_level,
        "timeout_graceful_shutdown": 10,
        "http": GuardedHttpToolsProtocol,
        "loop": EVENT_LOOP,
    }
    if workers == 1:
        uvicorn.run(create_app(settings, anonymous_allowed=anonymous_allowed), **common)
        return 0
    # N processes accept on one socket; each is a replica of its own (its own sampler, with
    # leases deciding which one samples a window; see `windows.leases`), on one database.
    os.environ[ANONYMOUS_ALLOWED_ENV] = "1" if anonymous_allowed else "0"
    from specdec_collector.telemetry import MULTIPROCESS_DIR_ENV

    own_directory = None
    if not os.environ.get(MULTIPROCESS_DIR_ENV):
        own_directory = tempfile.mkdtemp(prefix="specdec-metrics-")
        os.environ[MULTIPROCESS_DIR_ENV] = own_directory
    try:
        uvicorn.run(
            "specdec_collector.service.main:create_worker_app",
            factory=True,
            workers=workers,
            **common,
        )
    finally:
        if own_directory is not None:
            shutil.rmtree(own_directory, ignore_errors=True)
    return 0


def simulated_server(args: argparse.Namespace) -> "SimulatedServer":
    """The server `specdec simulate ARGS` serves; `ValueError` naming what is wrong."""
    from specdec_collector.simulator.server import SimulatedServer

    return SimulatedServer(
        instances=args.instances,
        k=len(args.acceptance) if args.acceptance else args.k,
        drafts_per_s=args.drafts_per_s,
        acceptance=args.acceptance or (),
        model_name=args.model_name,
        reset_after=args.reset_after,
        seed=args.seed,
        engine=args.engine,
        per_request_metrics=args.per_request_spec_decode_metrics == "summary",
        step_seconds=args.step_ms / 1000,
        spec_decoding=args.spec_decoding,
    )


def simulate(args: argparse.Namespace) -> int:
    from specdec_collector.simulator.server import create_simulator_app

    try:
        server = simulated_server(args)
    except ValueError as exc:
        print(f"specdec simulate: {exc}", file=sys.stderr)
        return 2
    from specdec_collector.simulator.families import METRICS_PATHS

    print(
        f"simulating a {server.engine} server: {args.instances} data-parallel instance(s), "
        f"k={server.k}, "
        f"per-position acceptance {list(server.acceptance)}, model {server.model_name}\n"
        f"  OpenAI API at http://{args.host}:{args.port}/v1, "
        f"metrics at {METRICS_PATHS[server.engine]}",
        flush=True,
    )
    uvicorn.run(create_simulator_app(server), host=args.host, port=args.port, log_level="warning")
    return 0


# --- the client commands -------------------------------------------------------------------


POOL_WARNING = (
    "specdec serve: warning: {workers} worker(s) may open up to {most} PostgreSQL connections "
    "(2 x SPECDEC_DB_POOL_SIZE={pool} + 1 each), and the server takes {left} more: under load "
    "some calls would wait for a connection or fail. Lower SPECDEC_WORKERS or "
    "SPECDEC_DB_POOL_SIZE, or raise PostgreSQL's max_connections."
)

NOT_THE_SERVICES = (
    "specdec keys {command}: {url} is not a collector's database ({why}): keys stored there would "
    "never be accepted. Run this with the service's SPECDEC_DATABASE_URL (from where `make run` "
    "runs, for its ./data), or add --init to make this one the collector's before its first serve."
)


def keys_database(command: str, init: bool = False) -> "Engine | None":
    """The service's database, migrated, having said which it is on stderr; None (having said
    why) for one the collector never migrated, unless `init` makes it one."""
    from specdec_collector.config import get_settings
    from specdec_collector.store.db import open_database, shown_url
    from specdec_collector.store.migrate import not_collector_database, upgrade_database

    url = get_settings().database_url
    why = None if init else not_collector_database(url)
    if why is not None:
        print(
            NOT_THE_SERVICES.format(command=command, url=shown_url(url), why=why), file=sys.stderr
        )
        return None
    upgrade_database(url)
    print(f"specdec keys {command}: database {shown_url(url)}", file=sys.stderr)
    return open_database(url)


def _cli_actor() -> str:
    """Who changes a key from the command line, for the audit trail: `cli:<user>`."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # a uid without a name (containers)
        return f"cli:uid-{os.getuid()}"


def keys_create(args: argparse.Namespace) -> int:
    from specdec_collector.service.auth import check_role, check_team
    from specdec_collector.service.keys import create_key

    try:
        check_team(args.team)
        check_role(args.role)
    except ValueError as exc:
        print(f"specdec keys create: {exc}", file=sys.stderr)
        return 2
    database = keys_database("create", args.init)
    if database is None:
        return 1
    row, key = create_key(database, args.team, args.role, _cli_actor())
    database.dispose()
    if args.json:
        print(json.dumps({**_key_json(row), "key": key}))
        return 0
    print(f"key {row.id} for team {row.team}, role {row.role}. It is shown only this once:")
    print(key)
    return 0


def _key_json(row: "ApiKey") -> dict[str, object]:
    """A stored key as `GET /keys` answers it (never the key, nor its hash)."""
    from specdec_collector.store.tables import as_utc

    revoked = None if row.revoked_at is None else as_utc(row.revoked_at).isoformat()
    return {
        "id": row.id,
        "team": row.team,
        "role": row.role,
        "prefix": row.prefix,
        "created_at": as_utc(row.created_at).isoformat(),
        "revoked_at": revoked,
    }


def keys_list(args: argparse.Namespace) -> int:
    from specdec_collector.service.keys import list_keys

    database = keys_database("list")
    if database is None:
        return 1
    rows = list_keys(database)
    database.dispose()
    if args.json:
        print(json.dumps([_key_json(row) for row in rows], indent=2))
        return 0
    print(f"{'id':>5}  {'team':<24} {'role':<6} {'prefix':<9} {'created':<20} revoked")
    for row in rows:
        revoked = row.revoked_at.strftime("%Y-%m-%d %H:%M:%S") if row.revoked_at else "-"
        created = row.created_at.strftime("%Y-%m-%d %H:%M:%S")
        print(f"{row.id:>5}  {row.team:<24} {row.role:<6} {row.prefix:<9} {created:<20} {revoked}")
    return 0


def keys_revoke(args: argparse.Namespace) -> int:
    from specdec_collector.service.keys import revoke_key

    database = keys_database("revoke")
    if database is None:
        return 1
    revoked = revoke_key(database, args.id, _cli_actor())
    database.dispose()
    if not revoked:
        print(f"specdec keys revoke: no active key {args.id}", file=sys.stderr)
        return 1
    print(f"key {args.id} revoked")
    return 0
