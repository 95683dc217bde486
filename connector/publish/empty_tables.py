"""Tables of the captured set that no change event announced: published as a zero-row file each.

Debezium's snapshot of an empty table emits nothing, so without this the table has no folder in the landing zone
and Fabric no table until its first row: reports that query it fail. Fabric holds a table once its folder has a
file it can read, so each such table gets ``_metadata.json`` and one zero-row data file with its columns in the
types its events will have (``connector.stream.empty_tables`` finds the tables and their columns).

The file is one more slice of the next batch (``BatchPlanner.with_empty_tables``), numbered, planned in the ledger
and committed with it like any other: a crash completes or redoes it once, the table's next file continues from
it, and a table the ledger knows, or whose folder holds a numbered file, is never published this way again. A
table with events in the same batch is left to them.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from connector.collect.encoding import FileFormat
from connector.collect.pieces import Collected, InitialLoad, PieceFacts, SourceShape, TablePiece
from connector.collect.staging import write_staged
from connector.collect.table_buffer import MARKER_TYPE
from connector.config import MirrorSettings
from connector.events import ROW_MARKER_COLUMN
from connector.landing_zone.layout import TableRef, staged_file_name
from connector.publish.ledger_state import LedgerState
from connector.publish.publisher import highest_number
from connector.storage.base import Storage, join

EMPTY_PARTITION = -2
"""The partition of the zero-row slice's pieces (before the audit's, -1, and every Kafka partition)."""


@dataclass(frozen=True)
class EmptyTable:
    """A captured table to publish without rows: its folder, Debezium topic, columns and key (none when keyless)."""

    ref: TableRef
    topic: str
    schema: pa.Schema  # the data columns, nullable, in the types its events will have
    key_columns: tuple[str, ...]


def pending(tables: Sequence[EmptyTable], state: LedgerState, landing: Storage) -> list[EmptyTable]:
    """The tables still to publish: unknown to the ledger, and no numbered file in their folder (also processed)."""
    return [t for t in tables if t.ref.id not in state.tables and not highest_number(landing, t.ref.folder)]


def empty_slice(
    landing: Storage, batch_id: int, tables: Sequence[EmptyTable], slices: Sequence[Collected], mirror: MirrorSettings
) -> Collected | None:
    """A staged slice with a zero-row file for each of ``tables`` none of ``slices`` holds; ``None`` when none is left.

    The file has no ``__rowMarker__`` when the table's initial load is marker-free (Parquet, ``initial_load:
    marker-free``): it does not make the table's later snapshot files take the marker.
    """
    seen = {tid for part in slices for tid in (*part.pieces, *part.stopped)}
    due = [t for t in tables if t.ref.id not in seen]
    if not due:
        return None
    file_format = FileFormat(mirror.file_format, mirror.compression)
    marker = mirror.initial_load != "marker-free" or file_format.is_delimited
    attempt = secrets.token_hex(4)
    collected = Collected()
    for table in due:
        rows = table.schema.empty_table()
        if marker:
            rows = rows.append_column(
                pa.field(ROW_MARKER_COLUMN, MARKER_TYPE, nullable=False), pa.array([], MARKER_TYPE)
            )
        first = (table.topic, EMPTY_PARTITION, -1)
        path = join(table.ref.folder, staged_file_name(batch_id, first, 0, attempt, file_format.extension))
        collected.pieces[table.ref.id] = TablePiece(
            ref=table.ref,
            key_columns=table.key_columns,
            table=None,
            first=first,
            # No snapshot read yet: the table's initial load goes on (its snapshot rows, if any, follow).
            facts=PieceFacts(initial=InitialLoad(complete=True), shape=SourceShape(tuple(table.schema.names))),
            files=(write_staged(landing, path, rows, file_format),),
            schema=table.schema,
        )
    return collected
