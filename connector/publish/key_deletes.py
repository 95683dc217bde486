"""Delete rows for given keys of a ledger table, as a slice of the sink's next batch (``MirrorSink.queue_deletes``).

The continuous audit asks for them (``connector.audit``): keys Fabric holds that the source no longer has. They are
published like any change, ahead of the batch's Kafka records, numbered and committed with it, so the ledger and the
files' continuity stay the sink's. A delete row carries the table's key columns (invariant 5, docs/guarantees.md) and
NULL elsewhere, in the table's established column types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from connector.collect.pieces import Collected, PieceFacts, TablePiece
from connector.collect.table_buffer import MARKER_TYPE
from connector.events import ROW_MARKER_COLUMN, RowMarker
from connector.landing_zone.layout import TableRef
from connector.publish.ledger_state import TableState

DELETES_PARTITION = -1
"""The partition of the deletes' slice: it sorts before every Kafka partition, so its deletes come first."""


def table_ref(table_id: str, folder: str) -> TableRef:
    """The ``TableRef`` of a ledger table, from its folder (``<schema>.schema/<table>`` or ``<table>``)."""
    head, _, name = folder.rpartition("/")
    schema = head.removesuffix(".schema") if head else None
    return TableRef(schema or None, name or table_id)


def delete_rows(table: TableState, keys: Sequence[tuple[Any, ...]]) -> pa.Table:
    """Delete rows for ``keys`` in the table's established types (keys set, other columns NULL), marker last."""
    schema = table.arrow_schema()
    if schema is None or not table.key_columns:
        msg = f"table {table.folder} has no established columns or keys yet: nothing to delete from"
        raise ValueError(msg)
    columns = []
    for field in schema:
        if field.name in table.key_columns:
            position = table.key_columns.index(field.name)
            columns.append(pa.array([key[position] for key in keys], field.type))
        else:
            columns.append(pa.nulls(len(keys), field.type))
    fields = [field.with_nullable(field.nullable or field.name not in table.key_columns) for field in schema]
    rows = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    markers = pa.array([int(RowMarker.DELETE)] * len(keys), MARKER_TYPE)
    return rows.append_column(pa.field(ROW_MARKER_COLUMN, MARKER_TYPE, nullable=False), markers)


def delete_slice(tables: Mapping[str, TableState], deletes: Mapping[str, Sequence[tuple[Any, ...]]]) -> Collected:
    """One slice (not staged yet) holding each table's delete rows, ahead of the batch's Kafka records."""
    collected = Collected()
    for table_id, keys in deletes.items():
        table = tables.get(table_id)
        if table is None or not keys or table.topic is None:
            continue
        collected.pieces[table_id] = TablePiece(
            ref=table_ref(table_id, table.folder),
            key_columns=table.key_columns,
            table=delete_rows(table, keys),
            first=(table.topic, DELETES_PARTITION, -1),
            facts=PieceFacts(events={"d": len(keys)}),
        )
        collected.records += len(keys)
    return collected
