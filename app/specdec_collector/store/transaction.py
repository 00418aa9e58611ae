"""A write transaction as its writes see it: the session, and what they must know of the
transaction they run in.

A write function takes a `WriteTransaction`, never a bare session for writing: whether it
runs in a group (and so may wait for no lock another process holds), which teams' locks the
transaction holds, whether it read the catalogue's purge count, and which catalogue rows it
added are the transaction's, reset at each commit or rollback (`commit`, `rollback`), so that
nothing a write learnt outlives the transaction it learnt it in.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session


class RunAlone(Exception):
    """Raised by a write in a group, before it wrote anything, when it would wait for a lock
    another process holds: it runs again alone, in a transaction of its own, once the group
    is committed."""


@dataclass(slots=True, eq=False)
class WriteTransaction:
    """One write transaction through `session` (a `db.write_session`'s): it holds every lock
    it takes until it ends.

    `together`: it holds a group of writes (`store.lanes`), so a write takes no lock it would
    wait for (`RunAlone`). `teams_locked`: the teams whose lock it holds. `purges_read`: it
    read the catalogue's purge count (no purge comes until it ends). `on_commit`: what runs
    once it is committed (the catalogue's rows it added are remembered only then: a rollback
    takes them back)."""

    session: Session
    together: bool = False
    teams_locked: set[str] = field(default_factory=set)
    purges_read: bool = False
    on_commit: list[Callable[[], Any]] = field(default_factory=list)
    # The catalogue's rows this transaction added or read since it added one: remembered
    # once it is committed (`windows.catalogue`).
    catalogue_rows: list[Any] | None = None

    def __post_init__(self) -> None:
        self.session.info[_KEY] = self

    @staticmethod
    def of(session: Session) -> "WriteTransaction | None":
        """The write transaction `session` runs, if it writes: for what is read alike in a
        read and in a write (a write's uncommitted rows are not yet everyone's)."""
        return session.info.get(_KEY)

    def commit(self) -> None:
        """Commit, run what waited for it, and begin anew."""
        self.session.commit()
        done, self.on_commit = self.on_commit, []
        self._forget()
        for run in done:
            run()

    def rollback(self) -> None:
        """Roll back, forgetting what the transaction held and added."""
        self.session.rollback()
        self.on_commit = []
        self._forget()

    def _forget(self) -> None:
        self.teams_locked = set()
        self.purges_read = False
        self.catalogue_rows = None


#: The `Session.info` key of a write session's transaction (its only one).
_KEY = "specdec_write_transaction"
