"""Apply a landing zone's files the way open mirroring does, to get the tables it would hold.

This is the oracle of the end-to-end tests: the state replayed from the landing zone must equal the
source database. So it follows the documented semantics literally, including the unfriendly ones:

* files in number order, rows in file order;
* ``__rowMarker__`` 0 inserts without a duplicate check (a second insert of a key gives two rows, which
  the state keeps, so a connector that double-publishes is caught); 1 (update) and 4 (upsert) replace
  every row with the key by the new row, or insert it when the key is absent; 2 deletes every row with
  the key and is a no-op when it is absent;
* a file without ``__rowMarker__`` is all inserts (the initial load), or all upserts when
  ``_metadata.json`` sets ``isUpsertDefaultRowMarker``;
* an update carries the full row: a column its file does not have is NULL in the resulting row;
* the result has the union of all columns, in first-seen order.

Rows are tracked as (file, row) references and the result is gathered with Arrow ``take``, so values
(decimals, timestamps with their unit and zone) come out exactly as they went in, and only the key and
marker columns ever become Python objects.

``connector.oracle.delta_oracle`` applies the same semantics to real Delta tables, as Fabric does, and
refuses what Delta cannot hold; ``verify`` and ``replay --format delta`` use it. This pyarrow replay
stays the default of ``replay`` because it earns its place three ways: it reads anything Arrow can, so
it still shows what a landing zone holds when Delta refuses it (the refusal is the answer to "will
Fabric take it", this is the answer to "what did the connector write"); it writes no transaction log
and commits nothing, so it is the fast view of a large landing zone; and it is an independent
implementation of the semantics that the Delta oracle is tested against (differential tests).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq

from connector.errors import ConfigError, LandingZoneCorrupt
from connector.events import ROW_MARKER_COLUMN, RowMarker
from connector.landing_zone import PARQUET, TableRef, discover_tables
from connector.oracle.extra import require_extra
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

_Ref = tuple[int, int]
"""(index of the file in application order, index of the row in that file)."""


def replay_landing_zone(storage: Storage) -> dict[str, pa.Table]:
    """Replay every table of the landing zone; maps table id (``schema.table`` or ``table``) to its state.

    Raises:
        LandingZoneCorrupt: a table cannot be replayed (see ``replay_table``).
    """
    return {table.id: state for table, state in _replay_tables(storage)}


def _replay_tables(storage: Storage) -> list[tuple[TableRef, pa.Table]]:
    return [(table, replay_table(storage, table)) for table in discover_tables(storage)]


REPLAY_FORMATS = ("parquet", "delta")
"""``replay --format``: Parquet files from the pyarrow replay, or Delta tables from the Delta oracle."""


def replay_to(
    landing_zone: str,
    output_dir: str | os.PathLike[str],
    output_format: str,
    *,
    credential: CredentialKind = "default",
) -> dict[str, pa.Table]:
    """Replay ``landing_zone`` into ``output_dir`` in ``output_format``; returns each table's state.

    ``delta`` writes one Delta table per table (``<schema>.schema/<table>`` or ``<table>``) with the Delta
    oracle, and returns the tables read back from Delta; ``parquet`` writes ``write_replay``'s files.

    Raises:
        ConfigError: ``landing_zone`` is a local folder that does not exist, or the format is unknown.
        MissingExtra: ``delta`` without the ``verify`` extra (``deltalake``).
        LandingZoneCorrupt: a table cannot be replayed (``TableRefused`` when Delta refuses it).
    """
    storage = open_storage(landing_zone, credential)
    require_landing_zone(storage, landing_zone)
    if output_format == "delta":
        from connector.oracle.delta_oracle import apply_to_delta

        require_extra("replay --format delta", ("deltalake",))

        return apply_to_delta(landing_zone, Path(output_dir), credential=credential)
    if output_format != "parquet":
        msg = f"replay format {output_format!r} is not one of {list(REPLAY_FORMATS)}"
        raise ConfigError(msg)
    states = _replay_tables(storage)
    _write_parquet(states, output_dir)
    return {table.id: state for table, state in states}


def write_replay(storage: Storage, output_dir: str | os.PathLike[str]) -> dict[str, int]:
    """Replay the landing zone and write each table as Parquet under ``output_dir``; returns row counts.

    Files mirror the landing-zone layout (``<schema>.schema/<table>.parquet`` or ``<table>.parquet``) so
    that a replayed table is found where a person would look for it. Existing files are replaced: a
    replay is a derived view, recomputed whole each time.
    """
    states = _replay_tables(storage)
    _write_parquet(states, output_dir)
    return {table.id: state.num_rows for table, state in states}


def _write_parquet(states: list[tuple[TableRef, pa.Table]], output_dir: str | os.PathLike[str]) -> None:
    root = Path(output_dir)
    for table, state in states:
        target = root / f"{table.folder}.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(state, target)


def replay_table(storage: Storage, table: TableRef) -> pa.Table:
    """The state of one table after applying all of its files; rows sorted by key.

    Only files with the table's extension are applied (others are not the table's files: ``validate``
    reports them). History that the mirroring service has already removed cannot be replayed, so the
    state starts from the oldest file still present.

    Raises:
        LandingZoneCorrupt: a file cannot be read, lacks a key column, has an invalid or null
            ``__rowMarker__``, updates or deletes rows of a table without ``keyColumns``, or changes the
            type of a column (which also stops open mirroring).
    """
    metadata = read_table_metadata(storage, table)
    file_format = metadata.file_format if metadata else PARQUET
    state = _TableState(
        table=table,
        key_columns=metadata.key_columns if metadata else (),
        default_marker=_UPSERT if metadata and metadata.upsert_by_default else _INSERT,
    )
    for data_file in list_data_files(storage, table, file_format.extension):
        state.apply(data_file, read_data_file(storage, data_file.path, file_format))
    return state.result()


@dataclass
class _Column:
    """A column of the replayed table: its type, and whether a non-null value has fixed that type."""

    type: pa.DataType
    typed_by: str | None
    """The file whose values fixed the type; ``None`` while only all-null columns were seen."""


@dataclass
class _TableState:
    table: TableRef
    key_columns: tuple[str, ...]
    default_marker: int
    files: list[pa.Table] = field(default_factory=list)
    columns: dict[str, _Column] = field(default_factory=dict)
    rows: dict[Any, list[_Ref]] = field(default_factory=dict)
    """Key → the rows holding it, in application order (several after repeated inserts)."""
    keyless_rows: list[_Ref] = field(default_factory=list)

    def fail(self, data_file: DataFile, reason: str) -> LandingZoneCorrupt:
        return LandingZoneCorrupt(f"table {self.table.id}: {data_file.path}: {reason}")

    def apply(self, data_file: DataFile, data: pa.Table) -> None:
        self.merge_columns(data_file, data)
        file_index = len(self.files)
        self.files.append(data)
        markers = self.markers(data_file, data)
        if not self.key_columns:
            self.apply_keyless(data_file, file_index, markers, data.num_rows)
            return
        keys = self.keys(data_file, data)
        rows = self.rows
        for row_index, (key, marker) in enumerate(zip(keys, markers, strict=True)):
            if marker == _INSERT:
                existing = rows.get(key)
                if existing is None:
                    rows[key] = [(file_index, row_index)]
                else:
                    existing.append((file_index, row_index))
            elif marker == _UPDATE or marker == _UPSERT:
                rows[key] = [(file_index, row_index)]
            else:  # markers() let through only valid values
                rows.pop(key, None)

    def apply_keyless(self, data_file: DataFile, file_index: int, markers: list[int], count: int) -> None:
        if any(marker != _INSERT for marker in markers):
            raise self.fail(
                data_file,
                "has updates or deletes, but the table declares no keyColumns to apply them by",
            )
        self.keyless_rows.extend((file_index, row_index) for row_index in range(count))

    def merge_columns(self, data_file: DataFile, data: pa.Table) -> None:
        """Union the file's columns into the table's, refusing a type change as open mirroring does.

        A column with no value in a file says nothing about its type (delimited text cannot tell an
        empty timestamp column's zone, for one), so all-null columns never conflict.
        """
        for name, column in zip(data.column_names, data.columns, strict=True):
            if name == ROW_MARKER_COLUMN:
                continue
            known = self.columns.get(name)
            empty = column_is_all_null(column)
            if known is None:
                self.columns[name] = _Column(column.type, None if empty else data_file.name)
            elif column.type != known.type and not empty:
                if known.typed_by is not None:
                    raise self.fail(
                        data_file,
                        f"column {name!r} changes type from {known.type} (in {known.typed_by}) to {column.type}",
                    )
                self.columns[name] = _Column(column.type, data_file.name)
            elif known.typed_by is None and not empty:
                known.typed_by = data_file.name

    def markers(self, data_file: DataFile, data: pa.Table) -> list[int]:
        if ROW_MARKER_COLUMN not in data.column_names:
            return [self.default_marker] * data.num_rows
        column = data.column(ROW_MARKER_COLUMN)
        if not pa.types.is_integer(column.type):
            raise self.fail(data_file, f"{ROW_MARKER_COLUMN} has type {column.type}, not an integer")
        values: list[int | None] = column.to_pylist()
        invalid = set(values) - {_INSERT, _UPDATE, _DELETE, _UPSERT}
        if invalid:
            shown = sorted(invalid, key=lambda v: (v is None, v or 0))
            raise self.fail(data_file, f"{ROW_MARKER_COLUMN} has invalid values {shown}")
        return cast("list[int]", values)  # no None left: checked above

    def keys(self, data_file: DataFile, data: pa.Table) -> list[Any]:
        missing = [key for key in self.key_columns if key not in data.column_names]
        if missing:
            raise self.fail(data_file, f"lacks key columns {missing}")
        columns: list[list[Any]] = [data.column(key).to_pylist() for key in self.key_columns]
        if len(columns) == 1:
            return columns[0]
        return list(zip(*columns, strict=True))

    def result(self) -> pa.Table:
        refs = sorted(ref for refs in self.rows.values() for ref in refs) if self.key_columns else self.keyless_rows
        by_file: dict[int, list[int]] = {}
        for file_index, row_index in refs:
            by_file.setdefault(file_index, []).append(row_index)
        schema = pa.schema([(name, column.type) for name, column in self.columns.items()])
        parts = [self.gather(self.files[file_index], rows, schema) for file_index, rows in sorted(by_file.items())]
        state = pa.concat_tables(parts) if parts else schema.empty_table()
        if self.key_columns and state.num_rows:
            # Stable: repeated inserts of one key stay in the order they were applied.
            state = state.sort_by([(key, "ascending") for key in self.key_columns])
        return state.combine_chunks()

    @staticmethod
    def gather(data: pa.Table, rows: list[int], schema: pa.Schema) -> pa.Table:
        taken = data.take(pa.array(rows, pa.int64()))
        arrays = []
        for target in schema:
            if target.name in taken.column_names:
                column = taken.column(target.name)
                # Only an all-null column can differ from the table's type (merge_columns refused others).
                arrays.append(column if column.type == target.type else pa.nulls(len(column), target.type))
            else:
                arrays.append(pa.nulls(len(rows), target.type))
        return pa.Table.from_arrays(arrays, schema=schema)
