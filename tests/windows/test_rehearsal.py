"""The start-up rehearsal of a window: it compiles what a start and a stop run, keeps nothing."""

from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlmodel import Session

from specdec_collector.store.tables import TABLES
from specdec_collector.windows.catalogue import _KNOWN
from specdec_collector.windows.rehearsal import rehearse_window


def _rows(database: Engine) -> dict[str, int]:
    with database.connect() as connection:
        return {
            name: connection.execute(select(func.count()).select_from(table)).scalar_one()
            for name, table in TABLES.items()
        }


def test_the_rehearsal_stores_nothing_and_remembers_no_series(database: Engine) -> None:
    before = _rows(database)
    rehearse_window(database)
    assert _rows(database) == before
    with Session(database) as session:
        known = _KNOWN.of(session)
    assert known.ids == {} and known.keys == {}
