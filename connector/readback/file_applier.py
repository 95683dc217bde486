"""Open mirroring's rules for applying a table's files, written once for the replay and the Delta oracle.

``replay`` (rows in memory) and the Delta oracle (real Delta tables) must apply a landing zone by the
same rules, or their differential tests compare two opinions instead of two storage engines. So the
rules live here, and each of them only writes down what a file does to its table (``FileChange``):

* files in number order (``landing_reader.list_data_files``: processed-files folders included, one file
  per number), rows in file order; only files with the table's extension;
* ``__rowMarker__`` must be an integer of 0 (insert), 1 (update), 2 (delete) or 4 (upsert) in every row;
  a file without it is all inserts (the initial load), or all upserts when ``_metadata.json`` sets
  ``isUpsertDefaultRowMarker``;
* 0 inserts without a duplicate check (a second insert of a key gives two rows, so a connector that
  double-publishes is caught); 1 and 4 replace every row of the key by the new row, or insert it; 2
  deletes every row of the key and is a no-op when it is absent;
* a table without ``keyColumns`` takes inserts only; every file of a table with keys has every key column;
* the table has the union of all columns, in first-seen order; a column a file lacks is NULL in that
  file's rows (an update carries the full row);
* a column never changes type (open mirroring stops replicating a table whose column type changes),
  with one leniency: a column without any value says nothing about its type (an empty delimited-text
  column, an all-NULL Parquet column), so it never conflicts, and while a column has only ever been
  NULL, a file with values gives it its type (``FileChange.retyped``).

The Delta oracle also refuses the column types Delta cannot hold (``delta_types``;
``connector.readback.fabric_types``), as Fabric does; the replay does not, so that it still shows what a
landing zone holds when Delta refuses it. Every refusal is a ``TableRefused`` naming the table and the
file, as open mirroring stops that table and goes on with the others.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from connector.errors import LandingZoneCorrupt
from connector.events import ROW_MARKER_COLUMN, ROW_MARKER_VALUES, RowMarker
from connector.landing_zone.layout import TableRef
from connector.landing_zone.metadata import PARQUET, TableFormat
from connector.readback.fabric_types import fabric_type_problem
from connector.readback.landing_reader import (
    DataFile,
    column_is_all_null,
    list_data_files,
    read_data_file,
    read_table_metadata,
)
from connector.storage.base import Storage

_INSERT = int(RowMarker.INSERT)
_REPLACING = frozenset({int(RowMarker.UPDATE), int(RowMarker.UPSERT)})


class TableRefused(LandingZoneCorrupt):
    """Open mirroring cannot apply a file of a table: the table stops, others go on."""

    def __init__(self, table: str, path: str, reason: str) -> None:
        super().__init__(table, path, reason)
        self.table = table
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"table {self.table}: {self.path}: {self.reason}"


@dataclass(frozen=True)
class FileChange:
    """What one file does to its table, worked out by the rules so a back end only has to store it."""

    table: TableRef
    data_file: DataFile
    data: pa.Table
    """The file as read, ``__rowMarker__`` included; ``conformed`` gives it in the table's types."""
    keys: list[Any]
    """Each row's key (a tuple for composite keys; ``None`` in a table without ``keyColumns``)."""
    removed: list[int]
    """One row per key whose earlier rows go (updated, upserted or deleted), in file order."""
    kept: list[int]
    """The rows that are in the table after this file, in file order."""
    retyped: list[str]
    """Columns that held only NULLs so far and get their first real type from this file."""
    schema: pa.Schema
    """The table's columns after this file: the union so far, in first-seen order."""

    def refused(self, reason: str) -> TableRefused:
        """The error that stops the table at this file (a back end's own failure, such as a refused write)."""
        return TableRefused(self.table.id, self.data_file.path, reason)


class FileBackend(Protocol):
    """Where a table's files are applied: rows in memory (``replay``) or a Delta table (the Delta oracle)."""

    def apply(self, change: FileChange) -> None:
        """Store what one file does; files come in application order."""


@dataclass
class _Column:
    type: pa.DataType
    typed_by: str | None
    """The file whose values fixed the type; ``None`` while the column has only been NULL."""


@dataclass
class FileApplier:
    """One table's files turned into ``FileChange`` s by the rules; ``open`` reads its ``_metadata.json``."""

    table: TableRef
    key_columns: tuple[str, ...]
    default_marker: int
    """The marker of every row of a file without ``__rowMarker__``."""
    file_format: TableFormat = PARQUET
    delta_types: bool = False
    """Refuse a column type Delta cannot hold, as Fabric does (the Delta oracle), or read anything (``replay``)."""
    columns: dict[str, _Column] = field(default_factory=dict)

    @classmethod
    def open(cls, storage: Storage, table: TableRef, *, delta_types: bool = False) -> FileApplier:
        """The applier of ``table`` as its ``_metadata.json`` describes it (no file: Parquet, no keys, inserts).

        Raises:
            LandingZoneCorrupt: ``_metadata.json`` exists but is not a JSON object.
        """
        metadata = read_table_metadata(storage, table)
        if metadata is None:
            return cls(table, (), _INSERT, delta_types=delta_types)
        default = RowMarker.UPSERT if metadata.upsert_by_default else RowMarker.INSERT
        return cls(table, metadata.key_columns, int(default), metadata.file_format, delta_types)

    @property
    def schema(self) -> pa.Schema:
        """The table's columns so far, in first-seen order."""
        return pa.schema([(name, column.type) for name, column in self.columns.items()])

    def apply_to(self, storage: Storage, backend: FileBackend) -> None:
        """Apply every file of the table, in number order, to ``backend``.

        History the mirroring service has already removed cannot be applied, so the table starts from
        the oldest file still present.

        Raises:
            TableRefused: a file cannot be read or breaks a rule (see the module docstring), or the back
                end refuses it.
        """
        for change in self.changes(storage):
            backend.apply(change)

    def changes(self, storage: Storage) -> Iterator[FileChange]:
        """What each file does, in application order; reads a file only when the previous one is applied."""
        for data_file in list_data_files(storage, self.table, self.file_format.extension):
            try:
                data = read_data_file(storage, data_file.path, self.file_format)
            except LandingZoneCorrupt as exc:
                raise self.refused(data_file, f"cannot be read: {exc}") from exc
            yield self.change(data_file, data)

    def change(self, data_file: DataFile, data: pa.Table) -> FileChange:
        """Check one file against the rules and work out its effect; the column model moves on with it.

        Raises:
            TableRefused: the file breaks a rule.
        """
        markers = self.markers(data_file, data)
        retyped = self.merge_columns(data_file, data)
        if not self.key_columns:
            if any(marker != _INSERT for marker in markers):
                raise self.refused(
                    data_file, "has updates or deletes, but the table declares no keyColumns to apply them by"
                )
            keys: list[Any] = [None] * data.num_rows
        else:
            keys = self.keys(data_file, data)
        removed, kept = file_effect(keys, markers)
        return FileChange(self.table, data_file, data, keys, removed, kept, retyped, self.schema)

    def refused(self, data_file: DataFile, reason: str) -> TableRefused:
        """The error that stops the table at ``data_file``."""
        return TableRefused(self.table.id, data_file.path, reason)

    def markers(self, data_file: DataFile, data: pa.Table) -> list[int]:
        """Each row's marker: ``__rowMarker__``, or the table's default marker for a file without one."""
        if ROW_MARKER_COLUMN not in data.column_names:
            return [self.default_marker] * data.num_rows
        column = data.column(ROW_MARKER_COLUMN)
        if not pa.types.is_integer(column.type):
            raise self.refused(data_file, f"{ROW_MARKER_COLUMN} has type {column.type}, not an integer")
        values: list[int | None] = column.to_pylist()
        invalid = set(values) - set(ROW_MARKER_VALUES)
        if invalid:
            shown = sorted(invalid, key=lambda v: (v is None, v or 0))
            raise self.refused(data_file, f"{ROW_MARKER_COLUMN} has invalid values {shown}")
        return [int(v) for v in values if v is not None]  # no None left: checked above

    def merge_columns(self, data_file: DataFile, data: pa.Table) -> list[str]:
        """Union the file's columns into the table's; returns the all-NULL columns it gives a type.

        Raises:
            TableRefused: a column changes type, or (``delta_types``) has a type Delta cannot hold.
        """
        retyped: list[str] = []
        for name, column in zip(data.column_names, data.columns, strict=True):
            if name == ROW_MARKER_COLUMN:
                continue
            problem = fabric_type_problem(column.type) if self.delta_types else None
            if problem is not None:
                raise self.refused(
                    data_file, f"column {name!r} has type {column.type}, which Delta/Fabric cannot hold: {problem}"
                )
            known = self.columns.get(name)
            empty = column_is_all_null(column)
            if known is None:
                self.columns[name] = _Column(column.type, None if empty else data_file.name)
            elif column.type != known.type and not empty:
                if known.typed_by is not None:
                    raise self.refused(
                        data_file,
                        f"column {name!r} changes type from {known.type} (in {known.typed_by}) to {column.type}: "
                        "open mirroring stops replicating a table whose column type changes",
                    )
                self.columns[name] = _Column(column.type, data_file.name)
                retyped.append(name)
            elif known.typed_by is None and not empty:
                known.typed_by = data_file.name
        return retyped

    def keys(self, data_file: DataFile, data: pa.Table) -> list[Any]:
        """Each row's key: the value of a single key column, a tuple of composite ones."""
        missing = [key for key in self.key_columns if key not in data.column_names]
        if missing:
            raise self.refused(data_file, f"lacks key columns {missing}")
        columns: list[list[Any]] = [data.column(key).to_pylist() for key in self.key_columns]
        if len(columns) == 1:
            return columns[0]
        return list(zip(*columns, strict=True))


def file_effect(keys: list[Any], markers: list[int]) -> tuple[list[int], list[int]]:
    """What one file does to the table: (rows whose key's old rows go, rows in the table after the file).

    A 1/2/4 row removes every row its key held before it (deleted, or replaced by the row itself), so
    for a key with such rows, what the key holds after the file is the last one (if it is an update or
    upsert) followed by the inserts after it; every other insert adds to what was there. This is exactly
    the row-by-row result, in one pass a back end can apply in bulk. The first list names one row per
    touched key; the second is in file order.
    """
    last_change: dict[Any, int] = {}
    for index, (key, marker) in enumerate(zip(keys, markers, strict=True)):
        if marker != _INSERT:
            last_change[key] = index
    kept = []
    for index, (key, marker) in enumerate(zip(keys, markers, strict=True)):
        last = last_change.get(key)
        if last is None or index > last:
            if marker == _INSERT:
                kept.append(index)
        elif index == last and marker in _REPLACING:
            kept.append(index)
    return sorted(last_change.values()), kept


def conformed(data: pa.Table, schema: pa.Schema, *, every_column: bool = False) -> pa.Table:
    """A file's data columns in the table's types, without ``__rowMarker__``.

    Only an all-NULL column can differ from the table's type (the rules refuse other changes); it becomes
    NULLs of the table's type. With ``every_column``, the result has each column of ``schema`` in its
    order, NULL where the file lacks it; else only the file's own columns, in the file's order.
    """
    names = schema.names if every_column else [name for name in data.column_names if name != ROW_MARKER_COLUMN]
    fields = [schema.field(name) for name in names]
    arrays = []
    for target in fields:
        if target.name in data.column_names:
            column = data.column(target.name)
            arrays.append(column if column.type == target.type else pa.nulls(len(column), target.type))
        else:
            arrays.append(pa.nulls(data.num_rows, target.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
