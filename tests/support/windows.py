"""Window writes the window calls make inside their lanes, each in a transaction of its own."""

from collections.abc import Sequence

from sqlalchemy.engine import Engine

from specdec_collector.core.readings import TargetReading
from specdec_collector.sources.protocol import Chain
from specdec_collector.store.db import write_alone
from specdec_collector.store.store import run_to_end
from specdec_collector.store.tables import utcnow
from specdec_collector.windows.closing import ClosedWindow, add_close, prepare_close
from specdec_collector.windows.storage import add_baseline
from specdec_collector.windows.stored import Actor, StoredWindow


def store_baseline(
    database: Engine, stored: StoredWindow, readings: Sequence[TargetReading]
) -> None:
    """The window's `before` snapshots, stored."""
    write_alone(database, add_baseline, stored, readings)


def close_window(
    database: Engine,
    stored: StoredWindow,
    actor: Actor,
    finals: Sequence[TargetReading],
    at_once: bool = True,
) -> ClosedWindow | None:
    """Close the window with these final readings (in the targets' order), as a scraped
    window's stop does (`at_once`: SPECDEC_STOP_WRITE_AT_ONCE); None if another stop came
    first."""
    chains = [Chain(final) for final in finals]
    prepared = run_to_end(prepare_close(database, stored, chains, utcnow()))
    return write_alone(database, add_close, stored, actor, prepared, at_once)
