"""The tables a MySQL/MariaDB schema change event describes: their columns after the DDL, as Debezium lists them.

Debezium's MySQL and MariaDB connectors write each DDL to the schema change topic (its ``topic.prefix``, with
``include.schema.changes``) before the rows that follow it: ``payload.tableChanges`` holds every table the DDL
touched, with its columns in order, whether each is optional and whether it has a default. That lets the sink act
on a table altered and then left untouched (``ALTER TABLE … ADD COLUMN … DEFAULT`` rewrites no row, so no row event
would ever show the column). Postgres has no such topic; its changes show at the table's next event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connector.events import KafkaRecord


@dataclass(frozen=True)
class AlteredTable:
    """One table of a schema change event: the data topic its rows go to, and its columns after the DDL."""

    topic: str
    columns: tuple[str, ...]
    unfilled: frozenset[str]  # nullable columns with no default (rows that existed before them hold NULL)
    position: tuple[str, int, int]  # the schema change record, for messages


def altered_tables(record: KafkaRecord, payload: Mapping[str, Any]) -> list[AlteredTable]:
    """The tables a schema change event created or altered, with their columns; dropped tables are left out.

    The data topic is ``<schema change topic>.<database>.<table>``, as Debezium names it: the schema change topic is
    the connector's ``topic.prefix``. Entries without a table or columns (a ``DROP``, a database-level DDL) say
    nothing about a table's columns.
    """
    out = []
    for change in payload.get("tableChanges") or ():
        if not isinstance(change, Mapping) or change.get("type") not in ("CREATE", "ALTER"):
            continue
        table = change.get("table")
        name = _table_name(change.get("id"))
        if not isinstance(table, Mapping) or name is None:
            continue
        columns = [c for c in table.get("columns") or () if isinstance(c, Mapping) and isinstance(c.get("name"), str)]
        if not columns:
            continue
        columns.sort(key=lambda c: c.get("position") or 0)
        unfilled = frozenset(str(c["name"]) for c in columns if c.get("optional") is True and not _has_default(c))
        database = name[0] or payload.get("databaseName")
        out.append(
            AlteredTable(
                topic=f"{record.topic}.{database}.{name[1]}",
                columns=tuple(str(c["name"]) for c in columns),
                unfilled=unfilled,
                position=(record.topic, record.partition, record.offset),
            )
        )
    return out


def _has_default(column: Mapping[str, Any]) -> bool:
    """Whether Debezium says the column has a default (``hasDefaultValue``; older releases only the expression)."""
    if column.get("hasDefaultValue") is not None:
        return bool(column["hasDefaultValue"])
    return column.get("defaultValueExpression") is not None


def _table_name(table_id: Any) -> tuple[str | None, str] | None:
    """``"db"."table"`` (Debezium's quoted table id) as (database, table); ``None`` when it is not one."""
    if not isinstance(table_id, str):
        return None
    parts = [part.strip('"') for part in table_id.split('"."')]
    if len(parts) == 2:
        return parts[0] or None, parts[1]
    if len(parts) == 1 and parts[0]:
        return None, parts[0]
    return None
