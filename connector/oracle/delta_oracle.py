"""Apply a landing zone to real Delta tables, as Fabric's open mirroring does, and read them back.

The pyarrow ``replay`` reads anything Arrow can; the real consumer writes Delta tables and refuses
what Delta cannot hold. This oracle writes real Delta tables with delta-rs (the ``deltalake`` package,
no JVM), so a landing zone that only our own reader accepts fails here as it would in Fabric:

* a column type Delta cannot hold (``connector.oracle.fabric_types``) refuses the table, naming the
  table, file, column and type;
* a column whose type changes refuses the table (open mirroring stops replicating it);
* new columns are added to the Delta table (schema merge), missing ones are NULL in new rows.

Semantics are those of ``connector.oracle.replay`` (files in number order, rows in file order; marker 0
inserts without a duplicate check, 1 and 4 replace every row of the key or insert, 2 deletes every row
of the key or does nothing; a file without ``__rowMarker__`` is all inserts, or all upserts under
``isUpsertDefaultRowMarker``), applied per file in two Delta commits:

1. a ``MERGE`` on the key columns deletes the target rows of every key the file updates, upserts or
   deletes (the source holds each key once, so the MERGE never sees two source rows for one target row);
2. an append writes the rows that survive the file: for a key touched by a 1/2/4 row, the last such row
   if it is an update or upsert, and the inserts after it; every insert of an untouched key.

This is exactly the row-by-row result (a 1/2/4 row removes everything the key held before it), and it
costs two commits per file however often a key repeats within the file.

One leniency, the same as ``replay``'s: a column without any value says nothing about its type (an empty
delimited-text column, an all-null Parquet column), so it never conflicts; while a column has only ever
been NULL, a file with values retypes it (the Delta table is rewritten with the column in the new type,
which is exact, since it holds only NULLs).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from connector.errors import LandingZoneCorrupt
from connector.events import ROW_MARKER_COLUMN, RowMarker
from connector.landing_zone import PARQUET, TableRef, discover_tables
from connector.oracle.fabric_types import fabric_type_problem
from connector.oracle.landing_reader import (
    DataFile,
    column_is_all_null,
    list_data_files,
    read_data_file,
    read_table_metadata,
    require_landing_zone,
)
from connector.storage import CredentialKind, open_storage
from connector.storage.base import Storage

_INSERT = int(RowMarker.INSERT)
_UPDATE = int(RowMarker.UPDATE)
_DELETE = int(RowMarker.DELETE)
_UPSERT = int(RowMarker.UPSERT)
_VALID_MARKERS = frozenset({_INSERT, _UPDATE, _DELETE, _UPSERT})
_SOURCE = "s"
_TARGET = "t"


class TableRefused(LandingZoneCorrupt):
    """Delta (and so open mirroring) cannot apply a file of a table: the table stops, others go on."""

    def __init__(self, table: str, path: str, reason: str) -> None:
        super().__init__(table, path, reason)
        self.table = table
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"table {self.table}: {self.path}: {self.reason}"


def apply_to_delta(
    landing_zone: str, target_dir: str | Path, *, credential: CredentialKind = "default"
) -> dict[str, pa.Table]:
    """Apply every table of ``landing_zone`` to Delta tables under ``target_dir``; returns them read back.

    Each table is written to ``target_dir/<table folder>`` (``<schema>.schema/<table>`` or ``<table>``),
    replacing what a previous run left there: the Delta tables are a derived view, recomputed whole.
    Rows come back sorted by the key columns, then by the other columns, so that two runs (and the
    pyarrow replay) can be compared row for row.

    Raises:
        ConfigError: ``landing_zone`` is a local folder that does not exist.
        TableRefused: a table has a type Delta cannot hold, a type change, or a file open mirroring
            cannot apply (see ``apply_table_to_delta``).
    """
    storage = open_storage(landing_zone, credential)
    require_landing_zone(storage, landing_zone)
    root = Path(target_dir)
    return {table.id: apply_table_to_delta(storage, table, root / table.folder) for table in discover_tables(storage)}


def apply_table_to_delta(storage: Storage, table: TableRef, target: Path) -> pa.Table:
    """Apply one table's files to a Delta table at ``target`` and read it back (see ``apply_to_delta``).

    Raises:
        TableRefused: a file cannot be read, lacks a key column, has an invalid or null marker, updates
            or deletes rows of a table without ``keyColumns``, changes a column's type, or has a column
            type Delta cannot hold; or delta-rs refuses a write.
    """
    metadata = read_table_metadata(storage, table)
    file_format = metadata.file_format if metadata else PARQUET
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    writer = _DeltaWriter(
        table=table,
        uri=str(target),
        key_columns=metadata.key_columns if metadata else (),
        default_marker=_UPSERT if metadata and metadata.upsert_by_default else _INSERT,
    )
    for data_file in list_data_files(storage, table, file_format.extension):
        try:
            data = read_data_file(storage, data_file.path, file_format)
        except LandingZoneCorrupt as exc:
            raise TableRefused(table.id, data_file.path, f"cannot be read: {exc}") from exc
        writer.apply(data_file, data)
    return writer.read_back()


@dataclass
class _Column:
    type: pa.DataType
    typed_by: str | None
    """The file whose values fixed the type; ``None`` while the column has only been NULL."""


@dataclass
class _DeltaWriter:
    table: TableRef
    uri: str
    key_columns: tuple[str, ...]
    default_marker: int
    columns: dict[str, _Column] = field(default_factory=dict)
    created: bool = False
    delta_columns: set[str] = field(default_factory=set)
    """Columns the Delta table has: a file that adds none and leaves no row needs no append."""

    def refuse(self, data_file: DataFile, reason: str) -> TableRefused:
        return TableRefused(self.table.id, data_file.path, reason)

    def apply(self, data_file: DataFile, data: pa.Table) -> None:
        markers = self.markers(data_file, data)
        retype = self.merge_columns(data_file, data)
        if retype:
            self.retype_null_columns(data_file, retype)
        if not self.key_columns:
            if any(marker != _INSERT for marker in markers):
                raise self.refuse(
                    data_file, "has updates or deletes, but the table declares no keyColumns to apply them by"
                )
            self.append(data_file, self.conform(data))
            return
        missing = [key for key in self.key_columns if key not in data.column_names]
        if missing:
            raise self.refuse(data_file, f"lacks key columns {missing}")
        touched, survivors = _file_effect(self.keys(data), markers)
        if touched and self.created:
            self.delete_keys(data_file, self.conform(data.select(list(self.key_columns))).take(pa.array(touched)))
        self.append(data_file, self.conform(data).take(pa.array(survivors, pa.int64())))

    # -- checks --------------------------------------------------------------------------------------

    def markers(self, data_file: DataFile, data: pa.Table) -> list[int]:
        if ROW_MARKER_COLUMN not in data.column_names:
            return [self.default_marker] * data.num_rows
        column = data.column(ROW_MARKER_COLUMN)
        if not pa.types.is_integer(column.type):
            raise self.refuse(data_file, f"{ROW_MARKER_COLUMN} has type {column.type}, not an integer")
        values: list[int | None] = column.to_pylist()
        invalid = set(values) - _VALID_MARKERS
        if invalid:
            shown = sorted(invalid, key=lambda v: (v is None, v or 0))
            raise self.refuse(data_file, f"{ROW_MARKER_COLUMN} has invalid values {shown}")
        return [int(v) for v in values if v is not None]

    def merge_columns(self, data_file: DataFile, data: pa.Table) -> list[str]:
        """Check the file's columns against the table's; returns the all-NULL columns it gives a type.

        Raises:
            TableRefused: a column has a type Delta cannot hold, or changes type.
        """
        retype: list[str] = []
        for name, column in zip(data.column_names, data.columns, strict=True):
            if name == ROW_MARKER_COLUMN:
                continue
            problem = fabric_type_problem(column.type)
            if problem is not None:
                raise self.refuse(
                    data_file, f"column {name!r} has type {column.type}, which Delta/Fabric cannot hold: {problem}"
                )
            known = self.columns.get(name)
            empty = column_is_all_null(column)
            if known is None:
                self.columns[name] = _Column(column.type, None if empty else data_file.name)
            elif column.type != known.type and not empty:
                if known.typed_by is not None:
                    raise self.refuse(
                        data_file,
                        f"column {name!r} changes type from {known.type} (in {known.typed_by}) to {column.type}: "
                        "open mirroring stops replicating a table whose column type changes",
                    )
                self.columns[name] = _Column(column.type, data_file.name)
                retype.append(name)
            elif known.typed_by is None and not empty:
                known.typed_by = data_file.name
        return retype

    def keys(self, data: pa.Table) -> list[Any]:
        columns: list[list[Any]] = [data.column(key).to_pylist() for key in self.key_columns]
        if len(columns) == 1:
            return columns[0]
        return list(zip(*columns, strict=True))

    # -- Delta writes --------------------------------------------------------------------------------

    def conform(self, data: pa.Table) -> pa.Table:
        """The file's data columns in the table's types (only all-NULL columns can differ), no marker."""
        arrays = []
        names = []
        for name, column in zip(data.column_names, data.columns, strict=True):
            if name == ROW_MARKER_COLUMN:
                continue
            wanted = self.columns[name].type
            arrays.append(column if column.type == wanted else pa.nulls(len(column), wanted))
            names.append(name)
        return pa.Table.from_arrays(arrays, names=names)

    def delete_keys(self, data_file: DataFile, keys: pa.Table) -> None:
        """Delete every target row whose key is one of ``keys`` (each key once) with a Delta MERGE."""
        from deltalake import DeltaTable

        predicate = " AND ".join(
            f"({_TARGET}.{_quote(key)} IS NOT DISTINCT FROM {_SOURCE}.{_quote(key)})" for key in self.key_columns
        )
        try:
            (
                DeltaTable(self.uri)
                .merge(keys, predicate=predicate, source_alias=_SOURCE, target_alias=_TARGET)
                .when_matched_delete()
                .execute()
            )
        except Exception as exc:  # delta-rs raises several unrelated types; the message says what failed
            raise self.refuse(data_file, f"Delta MERGE failed: {exc}") from exc

    def append(self, data_file: DataFile, rows: pa.Table) -> None:
        """Append ``rows``, adding the columns the table does not have yet (even with no rows)."""
        from deltalake import write_deltalake

        if not rows.num_rows and self.created and self.delta_columns.issuperset(rows.column_names):
            return  # nothing to write: a commit would only add an empty file
        try:
            write_deltalake(self.uri, rows, mode="append", schema_mode="merge")
        except Exception as exc:  # delta-rs raises several unrelated types; the message says what failed
            raise self.refuse(data_file, f"Delta write failed: {exc}") from exc
        self.created = True
        self.delta_columns.update(rows.column_names)

    def retype_null_columns(self, data_file: DataFile, names: list[str]) -> None:
        """Rewrite the table with columns that held only NULLs in their first real type."""
        if not self.created:
            return
        from deltalake import write_deltalake

        current = self.read_all()
        arrays = [
            pa.nulls(current.num_rows, self.columns[name].type) if name in names else column
            for name, column in zip(current.column_names, current.columns, strict=True)
        ]
        try:
            write_deltalake(
                self.uri,
                pa.Table.from_arrays(arrays, names=current.column_names),
                mode="overwrite",
                schema_mode="overwrite",
            )
        except Exception as exc:  # delta-rs raises several unrelated types; the message says what failed
            raise self.refuse(data_file, f"Delta rewrite of NULL-only columns {names} failed: {exc}") from exc

    def read_all(self) -> pa.Table:
        from deltalake import DeltaTable

        # to_pyarrow_dataset, not to_pyarrow_table: the latter leaves a Rust-owned buffer that aborts the
        # interpreter at exit ("terminate called without an active exception").
        return DeltaTable(self.uri).to_pyarrow_dataset().to_table()

    def read_back(self) -> pa.Table:
        """The Delta table as Arrow, sorted by the key columns, then by the other columns."""
        if not self.created:
            return pa.table({})  # no file: no Delta table (Fabric creates it with the first file), no columns
        state = self.read_all()
        order = [*self.key_columns, *(name for name in state.column_names if name not in self.key_columns)]
        sortable = [name for name in order if _sortable(state.schema.field(name).type)]
        if state.num_rows and sortable:
            state = state.sort_by([(name, "ascending") for name in sortable])
        return state.combine_chunks()


def _file_effect(keys: list[Any], markers: list[int]) -> tuple[list[int], list[int]]:
    """What one file does to the table: (rows whose key's old rows go, rows appended after that).

    A 1/2/4 row removes every row its key held before it (deleted, or replaced by the row itself), so
    for a key with such rows, what the key holds after the file is the last one (if it is an update or
    upsert) followed by the inserts after it; every other insert adds to what was there. The first list
    names one row per touched key (its key is what the MERGE deletes by); the second is in file order.
    """
    last_change: dict[Any, int] = {}
    for index, (key, marker) in enumerate(zip(keys, markers, strict=True)):
        if marker != _INSERT:
            last_change[key] = index
    survivors = []
    for index, (key, marker) in enumerate(zip(keys, markers, strict=True)):
        last = last_change.get(key)
        if last is None or index > last:
            if marker == _INSERT:
                survivors.append(index)
        elif index == last and marker in (_UPDATE, _UPSERT):
            survivors.append(index)
    return sorted(last_change.values()), survivors


def _quote(name: str) -> str:
    """A column name as a quoted SQL identifier for delta-rs predicates (keeps its case)."""
    return '"' + name.replace('"', '""') + '"'


def _sortable(arrow_type: pa.DataType) -> bool:
    return not (pa.types.is_nested(arrow_type) or pa.types.is_null(arrow_type))
