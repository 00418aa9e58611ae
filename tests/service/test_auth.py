"""Keys, roles and teams: the pure parts and the database-backed keys."""

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from starlette.concurrency import run_in_threadpool

from specdec_collector.exceptions import NotAllowed, NotAuthenticated
from specdec_collector.schemas import KeyRole
from specdec_collector.service.auth import (
    AnonymousAccess,
    OpenMode,
    Principal,
    authenticate,
    hash_key,
    is_loopback,
    parse_env_keys,
    team_scope,
)
from specdec_collector.service.keys import create_key, list_keys, revoke_key
from specdec_collector.store import small_reads
from specdec_collector.store.db import open_database
from specdec_collector.store.migrate import upgrade_database
from specdec_collector.store.store import Store

KEY_A = "team-a-write-key-0123456789"
KEY_R = "team-a-read-key-0123456789"


def test_env_keys_parse_with_colons_in_the_key() -> None:
    keys = parse_env_keys(f"a:write:{KEY_A}, a:read:{KEY_R},ops:admin:x:y:z-0123456789abcdef")
    assert [k.principal for k in keys] == [
        Principal("a", KeyRole.WRITE, "env:1"),
        Principal("a", KeyRole.READ, "env:2"),
        Principal("ops", KeyRole.ADMIN, "env:3"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a:write", "entry 1 is not team:role:key"),
        ("a:owner:0123456789abcdef0", "role 'owner'"),
        ("a b:read:0123456789abcdef0", "team 'a b'"),
        ("a:read:short", "at least 16"),
    ],
)
def test_bad_env_keys_name_the_entry_never_the_key(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        parse_env_keys(text)
    assert "0123456789abcdef0" not in str(error.value)


def test_authenticate_env_and_database_keys(database: Engine) -> None:
    env = parse_env_keys(f"a:write:{KEY_A}")
    assert authenticate(f"Bearer {KEY_A}", env, database, OpenMode.NEVER) == Principal(
        "a", KeyRole.WRITE, "env:1"
    )
    row, key = create_key(database, "b", "read", "test")
    assert authenticate(f"bearer {key}", env, database, OpenMode.NEVER) == Principal(
        "b", KeyRole.READ, f"key:{row.id}"
    )
    for header in (None, "Bearer nope-nope-nope-nope", f"Basic {KEY_A}", f"Bearer {KEY_A}x"):
        with pytest.raises(NotAuthenticated):
            authenticate(header, env, database, OpenMode.UNTIL_FIRST_KEY)
    assert revoke_key(database, row.id or 0, "test")
    assert not revoke_key(database, row.id or 0, "test")
    with pytest.raises(NotAuthenticated, match="unknown or revoked API key"):
        authenticate(f"Bearer {key}", env, database, OpenMode.NEVER)


def test_keys_are_stored_hashed_and_listed_without_the_key(database: Engine) -> None:
    _, key = create_key(database, "team-x", "admin", "test")
    with database.connect() as connection:
        stored = connection.execute(text("SELECT key_hash, prefix FROM api_key")).one()
    assert stored[0] == hash_key(key) != key
    assert key.startswith(stored[1]) and len(stored[1]) == 8
    assert [(k.team, k.role, k.revoked_at) for k in list_keys(database)] == [
        ("team-x", "admin", None)
    ]


def test_open_mode_only_without_any_key(database: Engine) -> None:
    assert authenticate(None, [], database, OpenMode.UNTIL_FIRST_KEY) == Principal(
        "default", KeyRole.WRITE, "anonymous"
    )
    with pytest.raises(NotAuthenticated):
        authenticate(None, [], database, OpenMode.NEVER)  # bound beyond loopback without permission
    row, _ = create_key(database, "t", "read", "test")
    with pytest.raises(NotAuthenticated):
        authenticate(None, [], database, OpenMode.UNTIL_FIRST_KEY)  # a key exists: auth is on
    # Revoking the last key does not reopen the service (it was fail-open)...
    assert revoke_key(database, row.id or 0, "test")
    with pytest.raises(NotAuthenticated):
        authenticate(None, [], database, OpenMode.UNTIL_FIRST_KEY)
    # ...unless SPECDEC_ALLOW_ANONYMOUS says so explicitly.
    assert authenticate(None, [], database, OpenMode.WHILE_NO_ACTIVE_KEY).key == "anonymous"
    env = parse_env_keys(f"a:write:{KEY_A}")
    with pytest.raises(NotAuthenticated):
        authenticate(None, env, database, OpenMode.WHILE_NO_ACTIVE_KEY)


@pytest.mark.anyio
async def test_open_mode_closes_at_the_first_key_another_process_creates(
    database: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked anew on every request (a key made by `specdec keys create` closes it at once),
    then never again once a key exists; from the event loop, not a thread (on PostgreSQL the
    suite's is on this host: near, its probes allowed more as the suite loads the machine)."""
    monkeypatch.setattr(small_reads, "NEAR_S", 0.05)
    store = Store(database)
    access = AnonymousAccess(OpenMode.UNTIL_FIRST_KEY, [], store)
    on_sqlite = database.dialect.name == "sqlite"
    hops: list[Callable[..., object]] = []

    async def counted_hop(call: Callable[..., object], *args: object) -> object:
        hops.append(call)
        return await run_in_threadpool(call, *args)

    monkeypatch.setattr(small_reads, "run_in_threadpool", counted_hop)
    try:
        assert await access.is_open() and await access.is_open()
        other = open_database(str(database.url.render_as_string(hide_password=False)))
        row, _ = create_key(other, "t", "read", "test")
        assert not await access.is_open()
        assert revoke_key(other, row.id or 0, "test")
        other.dispose()
        assert not await access.is_open()  # closed for good, every key revoked or not
    finally:
        await store.aclose()
    # On PostgreSQL one hop: the loop's connection opened (and the server probed) in a thread.
    assert [getattr(hop, "__name__", hop) for hop in hops] == ([] if on_sqlite else ["_open"])
    store = Store(database)
    reopening = AnonymousAccess(OpenMode.WHILE_NO_ACTIVE_KEY, [], store)
    assert await reopening.is_open() and await reopening.is_open()  # every key revoked
    closed = AnonymousAccess(
        OpenMode.WHILE_NO_ACTIVE_KEY, parse_env_keys(f"a:write:{KEY_A}"), store
    )
    assert not await closed.is_open()
    await store.aclose()


@pytest.mark.anyio
async def test_a_locked_sqlite_file_is_waited_for_in_a_thread_never_on_the_loop(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/locked.db"
    upgrade_database(url)
    store = Store(open_database(url))
    access = AnonymousAccess(OpenMode.UNTIL_FIRST_KEY, [], store)
    # A connection in exclusive locking mode keeps even WAL readers out until it closes.
    holder = sqlite3.connect(f"{tmp_path}/locked.db", check_same_thread=False)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("DELETE FROM api_key")
    holder.commit()
    turns = 0

    async def release_after_ten_turns_of_the_loop() -> None:
        nonlocal turns
        while turns < 10:
            await asyncio.sleep(0.02)
            turns += 1
        holder.close()

    releasing = asyncio.ensure_future(release_after_ten_turns_of_the_loop())
    try:
        # The lock goes only once the loop has turned ten times while the read waits: a read
        # that held the loop would wait out its busy timeout and fail.
        assert await access.is_open()  # no key: open, once the lock is gone
    finally:
        releasing.cancel()
        await store.aclose()
    assert turns == 10


def test_open_mode_of_the_bind_and_the_setting() -> None:
    assert OpenMode.of(True, False) is OpenMode.UNTIL_FIRST_KEY
    assert OpenMode.of(False, False) is OpenMode.NEVER
    assert OpenMode.of(False, True) is OpenMode.WHILE_NO_ACTIVE_KEY


def test_team_scope() -> None:
    writer, admin = Principal("a", KeyRole.WRITE, "env:1"), Principal("ops", KeyRole.ADMIN, "env:2")
    assert team_scope(writer, None) == "a"
    assert team_scope(writer, "a") == "a"
    assert team_scope(admin, "a") == "a"
    assert team_scope(admin, None) == "ops"
    with pytest.raises(NotAllowed, match="only admin keys may name another team"):
        team_scope(writer, "b")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("10.0.0.1", False), ("example.com", False)],
)  # fmt: skip
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
