"""Check a landing zone against the open-mirroring landing-zone format, before the service trips on it.

Open mirroring reports few of its reasons for stopping a table, and reports them late; this check says
what is wrong, where, in terms a person can act on. Each violation is one ``Problem`` (one printed
line), so the output can be read, grepped and counted, and an empty list means the landing zone follows
every rule checked here.

Numbering rule (per table, over the numbers found in the table folder, ``_ProcessedFiles`` and
``_FilesReadyToDelete`` together, since the service moves processed files there):

* numbers start at 1: the lowest number must be 1, unless the table has a ``_ProcessedFiles`` or
  ``_FilesReadyToDelete`` folder, which shows that the service has processed files and may since have
  removed the oldest (it keeps moved files for seven days, and always keeps the last file in the table
  folder). Number 0 is never valid;
* no gap between the lowest and the highest number, ever: the service processes files in order and
  removes the oldest first, so nothing it does can open a hole in the middle;
* one content per number: a number found in two places (mid-move) is only a problem when the two
  files differ in size.

Type rule: open mirroring writes every table into Delta, so a Parquet column type Delta cannot hold
(``connector.readback.fabric_types``: TIME, decimal precision > 38, nanosecond timestamps, unsigned
integers, nested types that are not JSON text) is reported once per column and type, naming the first
file that has it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.events import ROW_MARKER_COLUMN, ROW_MARKER_VALUES, RowMarker
from connector.landing_zone.layout import (
    METADATA_FILE,
    PARTNER_EVENTS_FILE,
    PROCESSED_FOLDERS,
    SCHEMA_SUFFIX,
    TableRef,
    discover_tables,
)
from connector.landing_zone.metadata import PARQUET, TableFormat, key_columns_of, table_format
from connector.readback.fabric_types import fabric_type_problem
from connector.readback.landing_reader import (
    DataFile,
    TableListing,
    UnreadableFile,
    basename,
    is_leftover,
    read_data_file,
    read_json,
    scan_table,
    unique_by_number,
)
from connector.readback.metadata_checks import metadata_problems, partner_events_problems
from connector.storage.base import Storage, join

_MARKERS_TEXT = "/".join(str(marker) for marker in ROW_MARKER_VALUES)


@dataclass(frozen=True)
class Problem:
    """One violation of the landing-zone format, located by its path in the landing zone."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def validate_landing_zone(storage: Storage) -> list[Problem]:
    """Check every table of the landing zone and its root files; returns the problems found, in order.

    Tables are checked one by one and a problem in one never hides those of another, in the same way as
    the mirroring service stops a broken table and keeps the others going.
    """
    problems = _check_root(storage)
    for table in discover_tables(storage):
        problems.extend(_TableCheck(storage, table).run())
    return problems


def _check_root(storage: Storage) -> list[Problem]:
    problems: list[Problem] = []
    for entry in storage.list_dir(""):
        name = basename(entry.path)
        if not entry.is_dir and is_leftover(name):
            problems.append(_leftover(entry.path))
        elif entry.is_dir and name.endswith(SCHEMA_SUFFIX):
            problems.extend(
                _leftover(child.path)
                for child in storage.list_dir(entry.path)
                if not child.is_dir and is_leftover(basename(child.path))
            )
    if storage.exists(PARTNER_EVENTS_FILE):
        problems.extend(_check_partner_events(storage))
    return problems


def _leftover(path: str) -> Problem:
    return Problem(path, "leftover staged or temporary file: a write was interrupted and never finished or cleaned up")


def _check_partner_events(storage: Storage) -> list[Problem]:
    try:
        content = read_json(storage, PARTNER_EVENTS_FILE)
    except ValueError as exc:
        return [Problem(PARTNER_EVENTS_FILE, f"is not valid JSON: {exc}")]
    return [Problem(PARTNER_EVENTS_FILE, message) for message in partner_events_problems(content)]


class _TableCheck:
    """The checks of one table folder; collects problems instead of stopping at the first."""

    def __init__(self, storage: Storage, table: TableRef) -> None:
        self.storage = storage
        self.table = table
        self.problems: list[Problem] = []
        self.keyless = False

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def run(self) -> list[Problem]:
        metadata = self.check_metadata()
        key_columns = key_columns_of(metadata) if metadata is not None else None
        # A missing _metadata.json is a problem of its own; one without keyColumns declares a keyless table.
        self.keyless = metadata is not None and not key_columns
        file_format = table_format(metadata) if metadata is not None else PARQUET
        listing = scan_table(self.storage, self.table)
        self.check_listing(listing, file_format)
        self.check_numbers(listing)
        wanted = [
            f for f in listing.data_files if file_format.extension is None or f.extension == file_format.extension
        ]
        self.check_contents(unique_by_number(wanted), file_format, key_columns)
        return self.problems

    # -- _metadata.json ------------------------------------------------------------------------------

    def check_metadata(self) -> Mapping[str, Any] | None:
        path = join(self.table.folder, METADATA_FILE)
        try:
            metadata = read_json(self.storage, path)
        except FileNotFoundError:
            self.add(
                self.table.folder,
                f"{METADATA_FILE} is missing: without keyColumns open mirroring cannot apply updates or deletes",
            )
            return None
        except ValueError as exc:
            self.add(path, f"is not valid JSON: {exc}")
            return None
        if not isinstance(metadata, dict):
            self.add(path, "is not a JSON object")
            return None
        for message in metadata_problems(metadata):
            self.add(path, message)
        return metadata

    # -- names and numbers ---------------------------------------------------------------------------

    def check_listing(self, listing: TableListing, file_format: TableFormat) -> None:
        for path in listing.leftovers:
            self.problems.append(_leftover(path))
        expected = f" and .{file_format.extension}" if file_format.extension else ""
        for path in listing.unexpected:
            self.add(
                path,
                f"is not a data file: data files are named with exactly 20 digits{expected}, and other names in a "
                "table folder must start with '_'",
            )
        if self.storage.exists(join(self.table.folder, PARTNER_EVENTS_FILE)):
            self.add(
                join(self.table.folder, PARTNER_EVENTS_FILE),
                "belongs at the landing-zone root, not in a table folder",
            )
        if file_format.extension is None:
            return
        for data_file in listing.data_files:
            if data_file.extension != file_format.extension:
                self.add(
                    data_file.path,
                    f"has extension .{data_file.extension}, but the table's files are .{file_format.extension}",
                )

    def check_numbers(self, listing: TableListing) -> None:
        by_number: dict[int, list[DataFile]] = defaultdict(list)
        for data_file in listing.data_files:
            by_number[data_file.number].append(data_file)
        for number, files in sorted(by_number.items()):
            if len({f.size for f in files}) > 1:
                self.add(
                    self.table.folder,
                    f"number {number} is used by files of different content: {', '.join(f.path for f in files)}",
                )
        numbers = sorted(by_number)
        if not numbers:
            return
        if numbers[0] == 0:
            self.add(self.table.folder, "file number 0 is not valid: numbering starts at 00000000000000000001")
        elif numbers[0] != 1 and not listing.processed_folders:
            self.add(
                self.table.folder,
                f"the lowest file number is {numbers[0]}, expected 1: no {' or '.join(PROCESSED_FOLDERS)} folder "
                "shows that the mirroring service has processed and removed earlier files",
            )
        for low, high in zip(numbers, numbers[1:], strict=False):
            if high > low + 1:
                missing = f"number {low + 1} is" if high == low + 2 else f"numbers {low + 1} to {high - 1} are"
                self.add(
                    self.table.folder,
                    f"{missing} missing: file numbers must be continuous, and open mirroring waits for the next one",
                )

    # -- file contents -------------------------------------------------------------------------------

    def check_contents(
        self, files: list[DataFile], file_format: TableFormat, key_columns: tuple[str, ...] | None
    ) -> None:
        first_with_marker: str | None = None
        types: dict[str, tuple[pa.DataType, str]] = {}
        declared = {name for name, _ in file_format.columns}
        for data_file in files:
            try:
                table = read_data_file(self.storage, data_file.path, file_format)
            except UnreadableFile as exc:
                self.add(data_file.path, f"is unreadable: {exc.reason}")
                continue
            names = table.column_names
            duplicated = sorted({name for name in names if names.count(name) > 1})
            if duplicated:
                self.add(data_file.path, f"has duplicate column names {duplicated}")
            if ROW_MARKER_COLUMN in names:
                self.check_row_marker(data_file.path, table)
                if self.keyless:
                    self.check_inserts_only(data_file.path, table)
                first_with_marker = first_with_marker or data_file.name
            elif first_with_marker is not None:
                self.add(
                    data_file.path,
                    f"has no {ROW_MARKER_COLUMN} column but {first_with_marker} had one: only the initial load may "
                    f"go without it, and a file without it is applied as inserts only",
                )
            for key in key_columns or ():
                self.check_key_column(data_file.path, table, key)
            if file_format.delimited:
                for name in names:
                    if name != ROW_MARKER_COLUMN and name not in declared:
                        self.add(data_file.path, f"column {name!r} is not declared in the SchemaDefinition")
            else:
                self.check_types(data_file, table, types)

    def check_inserts_only(self, path: str, table: pa.Table) -> None:
        """A table without keyColumns: open mirroring has no key to apply an update, delete or upsert by."""
        column = table.column(ROW_MARKER_COLUMN)
        if not pa.types.is_integer(column.type):
            return  # ``check_row_marker`` says so
        others = len(column) - column.null_count - int(pc.sum(pc.equal(column, int(RowMarker.INSERT))).as_py() or 0)
        if others:
            self.add(path, f"{others} rows are not inserts (0), but the table declares no keyColumns to apply them by")

    def check_row_marker(self, path: str, table: pa.Table) -> None:
        names = table.column_names
        index = names.index(ROW_MARKER_COLUMN)
        if index != len(names) - 1:
            self.add(path, f"{ROW_MARKER_COLUMN} is column {index + 1} of {len(names)}: it must be the last column")
        column = table.column(index)
        if not pa.types.is_integer(column.type):
            self.add(path, f"{ROW_MARKER_COLUMN} has type {column.type}: it must be an integer")
            return
        if column.null_count:
            self.add(path, f"{ROW_MARKER_COLUMN} is null in {column.null_count} rows: every row needs a marker")
        valid = pa.array(ROW_MARKER_VALUES, type=column.type)
        present = column.drop_null()
        invalid = present.filter(pc.invert(pc.is_in(present, value_set=valid)))
        if len(invalid):
            values = sorted(pc.unique(invalid).to_pylist())
            self.add(
                path,
                f"{ROW_MARKER_COLUMN} has {len(invalid)} rows with values outside {_MARKERS_TEXT}: {values}",
            )

    def check_key_column(self, path: str, table: pa.Table, key: str) -> None:
        if key not in table.column_names:
            self.add(path, f"key column {key!r} is missing: every file, delete rows included, needs every key column")
            return
        nulls = table.column(table.column_names.index(key)).null_count
        if nulls:
            self.add(path, f"key column {key!r} is null in {nulls} rows: delete rows need every key column too")

    def check_types(self, data_file: DataFile, table: pa.Table, types: dict[str, tuple[pa.DataType, str]]) -> None:
        for field in table.schema:
            if field.name == ROW_MARKER_COLUMN:
                continue
            previous = types.get(field.name)
            problem = fabric_type_problem(field.type)
            if problem is not None and (previous is None or previous[0] != field.type):
                self.add(
                    data_file.path,
                    f"column {field.name!r} has type {field.type}, which Delta/Fabric cannot hold: {problem}",
                )
            if previous is not None and previous[0] != field.type:
                self.add(
                    data_file.path,
                    f"column {field.name!r} changed type from {previous[0]} (in {previous[1]}) to {field.type}: open "
                    "mirroring stops replicating a table whose column type changes",
                )
            if previous is None or previous[0] != field.type:
                # Track the new type so one change is reported once, not in every later file.
                types[field.name] = (field.type, data_file.name)
