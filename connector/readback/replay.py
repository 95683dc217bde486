"""Apply a landing zone's files the way open mirroring does, to get the tables it would hold.

This is the oracle of the end-to-end tests: the state replayed from the landing zone must equal the
source database. The rules (file order, ``__rowMarker__``, the default marker, added columns, the type
change and no-keys refusals) are ``connector.readback.file_applier``'s, which the Delta oracle applies
too; this module is its in-memory back end. It keeps the unfriendly parts of the semantics literally: a
second insert of a key gives two rows, which the state keeps, so a connector that double-publishes is
caught.

Rows are tracked as (file, row) references and the result is gathered with Arrow ``take``, so values
(decimals, timestamps with their unit and zone) come out exactly as they went in, and only the key and
marker columns ever become Python objects.

``connector.readback.delta_oracle`` applies the same rules to real Delta tables, as Fabric does, and
refuses what Delta cannot hold; ``verify`` and ``replay --format delta`` use it. This pyarrow replay
stays the default of ``replay`` because it earns its place three ways: it reads anything Arrow can, so
it still shows what a landing zone holds when Delta refuses it (the refusal is the answer to "will
Fabric take it", this is the answer to "what did the connector write"); it writes no transaction log
and commits nothing, so it is the fast view of a large landing zone; and it stores rows by another
route than Delta's MERGE, append and schema merge, which the Delta oracle is tested against
(differential tests).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from connector.errors import ConfigError
from connector.landing_zone.layout import TableRef, discover_tables
from connector.readback.extra import require_extra
from connector.readback.file_applier import FileApplier, FileChange, conformed
from connector.readback.landing_reader import require_landing_zone
from connector.storage.base import Storage
from connector.storage.location import StorageLocation, as_location

_Ref = tuple[int, int]
"""(index of the file in application order, index of the row in that file)."""


def replay_landing_zone(storage: Storage) -> dict[str, pa.Table]:
    """Replay every table of the landing zone; maps table id (``schema.table`` or ``table``) to its state.

    Raises:
        LandingZoneCorrupt: a table cannot be replayed (``TableRefused``, see ``replay_table``).
    """
    return {table.id: state for table, state in _replay_tables(storage)}


def _replay_tables(storage: Storage) -> list[tuple[TableRef, pa.Table]]:
    return [(table, replay_table(storage, table)) for table in discover_tables(storage)]


REPLAY_FORMATS = ("parquet", "delta")
"""``replay --format``: Parquet files from the pyarrow replay, or Delta tables from the Delta oracle."""


def replay_to(
    landing_zone: StorageLocation | str, output_dir: str | os.PathLike[str], output_format: str
) -> dict[str, pa.Table]:
    """Replay ``landing_zone`` into ``output_dir`` in ``output_format``; returns each table's state.

    ``delta`` writes one Delta table per table (``<schema>.schema/<table>`` or ``<table>``) with the Delta
    oracle, and returns the tables read back from Delta; ``parquet`` writes ``write_replay``'s files.

    Raises:
        ConfigError: ``landing_zone`` is a local folder that does not exist, or the format is unknown.
        MissingExtra: ``delta`` without the ``verify`` extra (``deltalake``).
        LandingZoneCorrupt: a table cannot be replayed (``TableRefused`` when Delta refuses it).
    """
    location = as_location(landing_zone)
    storage = location.open()
    require_landing_zone(storage, location.url)
    if output_format == "delta":
        from connector.readback.delta_oracle import apply_to_delta

        require_extra("replay --format delta", ("deltalake",))

        return apply_to_delta(storage, Path(output_dir))
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

    Raises:
        LandingZoneCorrupt: ``_metadata.json`` is not a JSON object.
        TableRefused: a file cannot be read or breaks one of ``file_applier``'s rules (a missing key
            column, an invalid or null ``__rowMarker__``, updates or deletes in a table without
            ``keyColumns``, a column type change, which also stops open mirroring).
    """
    applier = FileApplier.open(storage, table)
    rows = _Rows()
    applier.apply_to(storage, rows)
    return rows.result(applier.schema, applier.key_columns)


@dataclass
class _Rows:
    """The in-memory back end: which rows of which files the table holds."""

    files: list[pa.Table] = field(default_factory=list)
    by_key: dict[Any, list[_Ref]] = field(default_factory=dict)
    """Key → the rows holding it (several after repeated inserts; all rows under ``None`` without keys)."""

    def apply(self, change: FileChange) -> None:
        file_index = len(self.files)
        self.files.append(change.data)
        keys = change.keys
        for row_index in change.removed:
            self.by_key.pop(keys[row_index], None)
        for row_index in change.kept:
            self.by_key.setdefault(keys[row_index], []).append((file_index, row_index))

    def result(self, schema: pa.Schema, key_columns: tuple[str, ...]) -> pa.Table:
        """The rows in application order, in the final ``schema``, then sorted (stably) by key."""
        by_file: dict[int, list[int]] = {}
        for file_index, row_index in sorted(ref for refs in self.by_key.values() for ref in refs):
            by_file.setdefault(file_index, []).append(row_index)
        parts = [
            conformed(self.files[file_index].take(pa.array(rows, pa.int64())), schema, every_column=True)
            for file_index, rows in sorted(by_file.items())
        ]
        state = pa.concat_tables(parts) if parts else schema.empty_table()
        if key_columns and state.num_rows:
            # Stable: repeated inserts of one key stay in the order they were applied.
            state = state.sort_by([(key, "ascending") for key in key_columns])
        return state.combine_chunks()
