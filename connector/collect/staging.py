"""Encode and stage: a collected slice's pieces → files under staged names in their table folders.

This runs where the slice was collected: in a Spark task on an executor (``connector.spark.slices``), or in
the driver for the records it collects itself (``convert``, ``spark.decode_on: driver``, ``keep-last``
tables). Each piece is split within the file-size limits, encoded, and written as
``_staged_<batch>_<slice>_<chunk>_<attempt>.<ext>``: the batch id, the piece's first record (topic, partition,
offset) and a token of this staging attempt, so a retried or speculative task writes files of its own and never
one another attempt reported, nor a numbered file. Mirroring ignores ``_``-prefixed names until the driver
renames a file to its number, after the batch's plan is recorded; the files of an attempt that never reported
are orphans, removed at start-up. Only metadata (paths, rows, sizes, SHA-256, column types) goes back to the
driver.
"""

from __future__ import annotations

import hashlib
import io
import secrets
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq

from connector.collect.encoding import FileFormat
from connector.collect.per_table import for_each_table
from connector.collect.pieces import CollectContext, Collected, StagedFile, TablePiece
from connector.collect.table_buffer import MARKER_TYPE
from connector.config import MirrorSettings
from connector.events import ROW_MARKER_COLUMN, RowMarker
from connector.landing_zone.layout import staged_file_name
from connector.storage.base import Storage, join

#: A rewrite of a staged table (``restage``).
TableChange: TypeAlias = Callable[[pa.Table], pa.Table]  # noqa: UP040 - pyarrow has no type stubs

#: The marker a snapshot read carries when a marker-free staged file must take the column after all: a read is
#: the row's whole current state, so an upsert is right whether or not the row is there.
SNAPSHOT_UPSERT_MARKER = 4


def digest(data: bytes) -> str:
    """Content hash recorded in the plan and checked when a destination already exists."""
    return hashlib.sha256(data).hexdigest()


def split_rows(table: pa.Table, mirror: MirrorSettings) -> list[pa.Table]:
    """Chunks within ``max_rows_per_file`` and (estimated from the Arrow size) ``max_bytes_per_file``."""
    rows_per_file = table.num_rows
    if mirror.max_rows_per_file:
        rows_per_file = min(rows_per_file, mirror.max_rows_per_file)
    if mirror.max_bytes_per_file and table.num_rows:
        per_row = max(1, table.nbytes // table.num_rows)
        rows_per_file = min(rows_per_file, max(1, mirror.max_bytes_per_file // per_row))
    rows_per_file = max(1, rows_per_file)
    return [table.slice(start, rows_per_file) for start in range(0, max(table.num_rows, 1), rows_per_file)]


def marker_free_rows(context: CollectContext, file_format: FileFormat, piece: TablePiece, table_id: str) -> int:
    """How many leading rows of ``piece`` go to files without ``__rowMarker__``: its table's initial load.

    ``mirror.initial_load: marker-free``, Parquet (delimited text always has the marker), a table none of whose
    files had the marker and that is not being re-read by a rebuild's incremental snapshot: the piece's leading
    initial-snapshot reads (``InitialLoad.rows``).

    A keyless table's rows are all inserts (an update or delete rebuilds or stops it): every file of it is
    marker-free. The seed makes the marker mandatory "only for incremental changes to apply update/delete/upsert"
    and reads a file without it as whole-file inserts, so such a table never needs the marker, keeps Fabric's
    fast path (marker-free, insert-only Parquet) for good, and identical rows all arrive (no key to match).
    """
    keyless = not piece.key_columns
    if (
        context.mirror.initial_load != "marker-free"
        or file_format.is_delimited
        or table_id in context.incremental
        or (table_id in context.upsert_tables and not keyless)
    ):
        return 0
    return piece.rows if keyless else min(piece.initial.rows, piece.rows)


def stage_slice(landing: Storage, batch_id: int, collected: Collected, context: CollectContext) -> Collected:
    """Write every piece of ``collected`` with rows as staged files; the same outcome with metadata instead of rows.

    A slice of many small tables writes many small files: on OneLake each is a few round trips, so the pieces
    are written ``mirror.publish_parallelism`` at a time (encoding releases the GIL; uploads wait on the network).
    """
    file_format = FileFormat(context.mirror.file_format, context.mirror.compression)
    tids = [tid for tid, piece in collected.pieces.items() if piece.table is not None]
    attempt = secrets.token_hex(4)
    staged = for_each_table(
        lambda tid: stage_piece(landing, batch_id, tid, collected.pieces[tid], context, file_format, attempt),
        tids,
        context.mirror.publish_parallelism,
    )
    collected.pieces.update(zip(tids, staged, strict=True))
    return collected


def stage_piece(
    landing: Storage,
    batch_id: int,
    tid: str,
    piece: TablePiece,
    context: CollectContext,
    file_format: FileFormat,
    attempt: str,
) -> TablePiece:
    """Encode and write one piece's rows; the piece with its staged files and column types, without its rows.

    ``attempt``: the token that keeps this staging attempt's file names apart from every other attempt's.
    """
    table = piece.table
    assert table is not None  # noqa: S101 - callers pass pieces that hold rows
    schema = pa.schema([f for f in table.schema if f.name != ROW_MARKER_COLUMN])
    if not table.num_rows:
        return replace(piece, table=None, schema=schema)
    # The initial load's part first, marker-free; the rest (from the first change event on) with the marker.
    head = marker_free_rows(context, file_format, piece, tid)
    parts = [table.slice(0, head).drop_columns([ROW_MARKER_COLUMN])] if head else []
    if head < table.num_rows:
        parts.append(table.slice(head))
    files = []
    chunks = (chunk for part in parts for chunk in split_rows(part, context.mirror))
    for number, chunk in enumerate(chunks):
        path = join(piece.ref.folder, staged_file_name(batch_id, piece.first, number, attempt, file_format.extension))
        files.append(write_staged(landing, path, chunk, file_format))
    return replace(piece, table=None, files=tuple(files), schema=schema)


def write_staged(landing: Storage, path: str, chunk: pa.Table, file_format: FileFormat) -> StagedFile:
    """Encode ``chunk`` and write it at ``path``, a staged name of this attempt's own (``Storage.write_aside``)."""
    data = file_format.encode(chunk)
    landing.write_aside(path, data)
    return StagedFile(path, chunk.num_rows, len(data), digest(data), ROW_MARKER_COLUMN in chunk.column_names)


def restage(
    landing: Storage, staged: StagedFile, file_format: FileFormat, changes: Sequence[TableChange]
) -> StagedFile:
    """Rewrite a staged Parquet file through ``changes`` under a new staged name (the driver's rare repair).

    Used when a batch's pieces of one table disagree in ways one file cannot show: a column type another
    partition widened, or a marker-free file that would follow a file with the marker.
    """
    table = pq.read_table(io.BytesIO(landing.read_bytes(staged.path)))
    for change in changes:
        table = change(table)
    folder, _, name = staged.path.rpartition("/")
    stem, _, extension = name.rpartition(".")
    new_path = join(folder, f"{stem}_redo.{extension}")
    restaged = write_staged(landing, new_path, table, file_format)
    landing.delete(staged.path)
    return restaged


def with_marker(table: pa.Table, marker: int = SNAPSHOT_UPSERT_MARKER) -> pa.Table:
    """A marker-free (snapshot-only) table with ``__rowMarker__`` appended as upserts (or ``marker``)."""
    markers = pa.array([marker] * table.num_rows, type=MARKER_TYPE)
    return table.append_column(pa.field(ROW_MARKER_COLUMN, MARKER_TYPE, nullable=False), markers)


def with_insert_marker(table: pa.Table) -> pa.Table:
    """A keyless table's marker-free rows with ``__rowMarker__`` appended as inserts (no key to upsert by)."""
    return with_marker(table, int(RowMarker.INSERT))


def cast_to(schema: pa.Schema) -> TableChange:
    """A change giving each column of a table the type ``schema`` has for it (columns keep their order)."""

    def change(table: pa.Table) -> pa.Table:
        types = {f.name: f.type for f in schema}
        fields = [pa.field(f.name, types.get(f.name, f.type), f.nullable, f.metadata) for f in table.schema]
        return table.cast(pa.schema(fields, table.schema.metadata))

    return change
