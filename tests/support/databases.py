"""Migrated databases for tests whose subject is not the migrations.

Each fresh SQLite file of such a test is a copy of one this process migrated once: running
every migration on each took ~60 ms of CPU in a warm process and ~0.25 s in a new one (the
Alembic import and its scripts), for hundreds of databases in a run of the suite. The
migrations themselves are still run on empty databases by the tests that are about them
(`tests/store/test_db.py`), by each process's first copy, and by every collector a test starts on a
database of its own (`run_collector`). PostgreSQL schemas are migrated as before.
"""

import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path

from sqlalchemy.engine import make_url

from specdec_collector.store.migrate import upgrade_database

_made: Path | None = None
_lock = threading.Lock()


def _template() -> Path:
    """This process's migrated SQLite file, made on first use."""
    global _made
    with _lock:
        if _made is None:
            path = Path(tempfile.mkdtemp(prefix="specdec-migrated-")) / "migrated.db"
            upgrade_database(f"sqlite:///{path}")
            # Everything in the main file: a copy of it alone is the whole database.
            with sqlite3.connect(path) as connection:
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            connection.close()
            _made = path
        return _made


def migrate(database_url: str) -> None:
    """Bring `database_url` to head: a copy of the migrated file where it is a SQLite file not
    made yet, else the migrations."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        path = Path(url.database)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_template(), path)
    upgrade_database(database_url)
