"""Apply a landing zone to real Delta tables, as Fabric's open mirroring does, and read them back.

The pyarrow ``replay`` reads anything Arrow can; the real consumer writes Delta tables and refuses
what Delta cannot hold. This oracle writes real Delta tables with delta-rs (the ``deltalake`` package,
no JVM), so a landing zone that only our own reader accepts fails here as it would in Fabric: the rules
are ``connector.readback.file_applier``'s, the same as ``replay``'s, with Delta's type limits
(``connector.readback.fabric_types``) on; this module is the applier's Delta back end.

Each file is applied in two Delta commits:

1. a ``MERGE`` on the key columns deletes the target rows of every key the file updates, upserts or
   deletes (``FileChange.removed``: each key once, so the MERGE never sees two source rows for one
   target row);
2. an append writes the rows that survive the file (``FileChange.kept``), adding the columns the table
   does not have yet (schema merge; a column a file lacks is NULL in its rows).

This costs two commits per file however often a key repeats within the file. A column that has only
ever been NULL and gets its type from a file (``FileChange.retyped``) is rewritten in the new type,
which is exact, since it holds only NULLs.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from connector.landing_zone.layout import TableRef, discover_tables
from connector.readback.file_applier import FileApplier, FileChange, TableRefused, conformed
from connector.readback.landing_reader import require_landing_zone
from connector.storage.base import Storage
from connector.storage.location import StorageLocation, as_location

__all__ = ["DeltaWriter", "TableRefused", "apply_table_to_delta", "apply_to_delta"]
_SOURCE = "s"
_TARGET = "t"


def apply_to_delta(landing_zone: StorageLocation | str | Storage, target_dir: str | Path) -> dict[str, pa.Table]:
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
    if isinstance(landing_zone, Storage):
        storage = landing_zone  # opened, and found to be a landing zone, by the caller
    else:
        location = as_location(landing_zone)
        storage = location.open()
        require_landing_zone(storage, location.url)
    root = Path(target_dir)
    return {table.id: apply_table_to_delta(storage, table, root / table.folder) for table in discover_tables(storage)}


def apply_table_to_delta(storage: Storage, table: TableRef, target: Path) -> pa.Table:
    """Apply one table's files to a Delta table at ``target`` and read it back (see ``apply_to_delta``).

    Raises:
        LandingZoneCorrupt: ``_metadata.json`` is not a JSON object.
        TableRefused: a file cannot be read, breaks one of ``file_applier``'s rules (a missing key column,
            an invalid or null marker, updates or deletes in a table without ``keyColumns``, a column type
            change) or has a column type Delta cannot hold; or delta-rs refuses a write.
    """
    applier = FileApplier.open(storage, table, delta_types=True)
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    writer = DeltaWriter(uri=str(target), key_columns=applier.key_columns)
    applier.apply_to(storage, writer)
    return writer.read_back()


@dataclass
class DeltaWriter:
    """The Delta back end: one Delta table, written file by file.

    The tests' Fabric replicator double keeps one per table across its polls, as Fabric keeps its table.
    """

    uri: str
    key_columns: tuple[str, ...]
    created: bool = False
    delta_columns: set[str] = field(default_factory=set)
    """Columns the Delta table has: a file that adds none and leaves no row needs no append."""

    def apply(self, change: FileChange) -> None:
        """Store what one file does: retype NULL-only columns, delete the keys it removes, append what it keeps."""
        if change.retyped:
            self.retype_null_columns(change)
        if change.removed and self.created:
            keys = conformed(change.data.select(list(self.key_columns)), change.schema)
            self.delete_keys(change, keys.take(pa.array(change.removed, pa.int64())))
        self.append(change, conformed(change.data, change.schema).take(pa.array(change.kept, pa.int64())))

    # -- Delta writes --------------------------------------------------------------------------------

    def delete_keys(self, change: FileChange, keys: pa.Table) -> None:
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
            msg = f"Delta MERGE failed: {exc}"
            raise change.refused(msg) from exc

    def append(self, change: FileChange, rows: pa.Table) -> None:
        """Append ``rows``, adding the columns the table does not have yet (even with no rows)."""
        from deltalake import write_deltalake

        if not rows.num_rows and self.created and self.delta_columns.issuperset(rows.column_names):
            return  # nothing to write: a commit would only add an empty file
        try:
            write_deltalake(self.uri, rows, mode="append", schema_mode="merge")
        except Exception as exc:  # delta-rs raises several unrelated types; the message says what failed
            msg = f"Delta write failed: {exc}"
            raise change.refused(msg) from exc
        self.created = True
        self.delta_columns.update(rows.column_names)

    def retype_null_columns(self, change: FileChange) -> None:
        """Rewrite the table with columns that held only NULLs in their first real type."""
        if not self.created:
            return
        from deltalake import write_deltalake

        names = change.retyped
        current = self.read_all()
        arrays = [
            pa.nulls(current.num_rows, change.schema.field(name).type) if name in names else column
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
            msg = f"Delta rewrite of NULL-only columns {names} failed: {exc}"
            raise change.refused(msg) from exc

    def read_all(self) -> pa.Table:
        """The Delta table as Arrow, in no particular order."""
        from deltalake import DeltaTable
        from pyarrow import fs

        # Arrow's own local filesystem, not deltalake's default (a PyFileSystem over Python file objects). With
        # the default, each read returns a buffer wrapping a Python object, and the scan's asynchronous reads
        # complete on Arrow's I/O threads, which may drop the last reference to such a buffer after to_table()
        # has returned; freeing it needs the GIL. If the interpreter is finalizing by then, CPython ends that
        # thread inside the C++ destructor and the process aborts after its work is done ("terminate called
        # without an active exception", exit 134; issue 35). Buffers Arrow allocated itself are freed without
        # the GIL (landing_reader.arrow_owned applies the same rule to the landing zone's files).
        local = fs.SubTreeFileSystem(str(Path(self.uri).resolve()), fs.LocalFileSystem())
        return DeltaTable(self.uri).to_pyarrow_dataset(filesystem=local).to_table()

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


def _quote(name: str) -> str:
    """A column name as a quoted SQL identifier for delta-rs predicates (keeps its case)."""
    return '"' + name.replace('"', '""') + '"'


def _sortable(arrow_type: pa.DataType) -> bool:
    return not (pa.types.is_nested(arrow_type) or pa.types.is_null(arrow_type))
