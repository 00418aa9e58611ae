"""Many rows given to one PostgreSQL statement as one JSON text (`json_to_recordset`).

A write that would send a statement per row, or wait for one statement's answer before the
next, sends them all at once: the writes' lane waits for each round trip (`store.lanes`). One
JSON text, encoded in one pass, rather than an array parameter per column: psycopg escapes
each quote of a text array's JSON values one by one in Python.
"""

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Text, bindparam, cast, column, func, literal
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import TableValuedAlias

from specdec_collector.store.db import compact_json


def rows_json(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """`rows` (their `columns`) as the JSON text `given_rows` reads."""
    return compact_json([{name: row[name] for name in columns} for row in rows])


def given_rows(
    parameter: str, columns: Mapping[str, Any], encoded: Collection[str] = ()
) -> tuple[list[ColumnElement[Any]], TableValuedAlias]:
    """The rows of the JSON text bound to `parameter` (`rows_json`), as a table to select
    from and its columns of these SQLAlchemy types, in order. A JSON column named in
    `encoded` holds JSON text already (it is cast back); a JSON column's null is JSON's null,
    as any other write of such a column stores it."""
    declared = [column(name, Text if name in encoded else kind) for name, kind in columns.items()]
    rows = func.json_to_recordset(cast(bindparam(parameter, type_=Text), JSON))
    given = rows.table_valued(*declared).render_derived(with_types=True)
    null = cast(literal("null"), JSON)
    selected: list[ColumnElement[Any]] = []
    for name, kind in columns.items():
        value = given.c[name]
        if name in encoded:
            selected.append(cast(value, JSON))
        elif isinstance(kind, JSON):
            selected.append(func.coalesce(value, null))
        else:
            selected.append(value)
    return selected, given
