"""Reading a landing zone back, as open mirroring would: tables, ``_metadata.json``, data files.

What the files mean (key names, defaults, the lenient parse of ``_metadata.json``) is the landing-zone contract,
``connector.landing_zone`` (its ``layout`` and ``metadata``); this module reads them through a ``Storage`` and
parses data files.

``validate`` and ``replay`` both need to see the landing zone the way the mirroring service sees it, and they must
agree on what they see, so the reading lives here once. Everything goes through a ``Storage``, so the same code
checks a local directory and a OneLake landing zone.

What counts as history: the service deletes processed files (keeping the last one) and moves processed files to
``_ProcessedFiles`` or ``_FilesReadyToDelete``, so data files found in those folders are part of the table's history
just like the ones still in the table folder.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from connector.errors import ConfigError, LandingZoneCorrupt
from connector.events import ROW_MARKER_COLUMN
from connector.landing_zone.layout import (
    METADATA_FILE,
    PROCESSED_FOLDERS,
    STAGED_PREFIX,
    TableRef,
    parse_data_file_name,
)
from connector.landing_zone.metadata import (
    DELIMITED_CASTS,
    PARQUET,
    TableFormat,
    TableMetadata,
    parse_table_metadata,
)
from connector.storage.base import TEMP_PREFIX, FileInfo, Storage, join
from connector.storage.local import LocalStorage


def arrow_owned(data: bytes) -> pa.Buffer:
    """Copy ``data`` into Arrow-allocated memory.

    Arrow's worker threads may release the last reference to a buffer; when that buffer wraps a Python
    object the release needs the GIL, and at interpreter exit that aborts the process
    ("terminate called without an active exception"). Arrow-owned memory needs no GIL.
    """
    stream = pa.BufferOutputStream()
    stream.write(data)
    return stream.getvalue()


_UNDECLARED_MARKER_TYPE = pa.int32()


class UnreadableFile(LandingZoneCorrupt):
    """A data file cannot be read or parsed as its table's format says it should."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True)
class DataFile:
    """One 20-digit data file of a table, wherever the mirroring service has left it."""

    number: int
    extension: str
    path: str
    size: int
    location: str
    """``""`` for the table folder, else the processed-files folder holding it."""

    @property
    def name(self) -> str:
        """The file name without folders."""
        return basename(self.path)


@dataclass(frozen=True)
class TableListing:
    """Everything found in a table folder and its processed-files folders."""

    data_files: tuple[DataFile, ...]
    """Every 20-digit file (any extension, duplicates included), by number then location."""
    leftovers: tuple[str, ...]
    """``_staged_*`` and ``_tmp_*`` files: writes that were never finished or cleaned up."""
    unexpected: tuple[str, ...]
    """Files and folders in the table folder that are neither data files nor ``_``-prefixed."""
    processed_folders: tuple[str, ...]
    """Processed-files folders that exist: proof that the service has cleaned up this table."""


def basename(path: str) -> str:
    """Last component of a storage path."""
    return path.rsplit("/", 1)[-1]


def is_leftover(name: str) -> bool:
    """Whether ``name`` is a staged or write-aside file that a finished write would not leave behind."""
    return name.startswith((STAGED_PREFIX, TEMP_PREFIX))


def require_landing_zone(storage: Storage, url: str) -> None:
    """Refuse a local landing zone that does not exist, instead of reading it as one without tables.

    A mistyped path would otherwise "validate" and "replay" as an empty, valid landing zone. Remote
    landing zones are not checked here: their folder is created with the mirrored database, and a
    wrong URL already fails when it is listed.

    Raises:
        ConfigError: ``url`` names a local path that is not a directory.
    """
    if isinstance(storage, LocalStorage) and not Path(url).is_dir():
        what = "is not a directory" if Path(url).exists() else "does not exist"
        msg = f"landing zone {url} {what}"
        raise ConfigError(msg)


def read_json(storage: Storage, path: str) -> Any:
    """Parse the JSON file at ``path``.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        ValueError: the file is not valid JSON (``json.JSONDecodeError`` or a decoding error).
    """
    return json.loads(storage.read_bytes(path))


def read_table_metadata(storage: Storage, table: TableRef) -> TableMetadata | None:
    """A table's ``_metadata.json``, or ``None`` when the table has none.

    Raises:
        LandingZoneCorrupt: the file exists but is not a JSON object.
    """
    path = join(table.folder, METADATA_FILE)
    try:
        raw = read_json(storage, path)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        msg = f"{path} is not valid JSON: {exc}"
        raise LandingZoneCorrupt(msg) from exc
    if not isinstance(raw, dict):
        msg = f"{path} is not a JSON object"
        raise LandingZoneCorrupt(msg)
    return parse_table_metadata(raw)


def scan_table(storage: Storage, table: TableRef) -> TableListing:
    """List a table folder and its processed-files folders as the mirroring service would see them.

    Names in the processed-files folders that are not 20-digit names are ignored: the service owns those
    folders, and only numbered files are history.
    """
    data_files: list[DataFile] = []
    leftovers: list[str] = []
    unexpected: list[str] = []
    processed: list[str] = []
    for entry in storage.list_dir(table.folder):
        name = basename(entry.path)
        if entry.is_dir:
            if name in PROCESSED_FOLDERS:
                processed.append(name)
            elif not name.startswith("_"):
                unexpected.append(entry.path)
        elif not _sort_file(entry, "", data_files, leftovers) and not name.startswith("_"):
            unexpected.append(entry.path)
    for folder in processed:
        for entry in storage.list_dir(join(table.folder, folder)):
            if not entry.is_dir:
                _sort_file(entry, folder, data_files, leftovers)
    order = {"": 0, **{folder: i + 1 for i, folder in enumerate(PROCESSED_FOLDERS)}}
    data_files.sort(key=lambda f: (f.number, order.get(f.location, len(order)), f.extension))
    return TableListing(tuple(data_files), tuple(leftovers), tuple(unexpected), tuple(processed))


def _sort_file(entry: FileInfo, location: str, data_files: list[DataFile], leftovers: list[str]) -> bool:
    """A numbered file or a leftover upload goes to its list; ``False`` when the file is neither."""
    name = basename(entry.path)
    parsed = parse_data_file_name(name)
    if parsed:
        data_files.append(DataFile(parsed[0], parsed[1], entry.path, entry.size, location))
    elif is_leftover(name):
        leftovers.append(entry.path)
    else:
        return False
    return True


def unique_by_number(files: Iterable[DataFile]) -> list[DataFile]:
    """One file per number, in number order, preferring the table folder over processed-files folders.

    A number can be in two places while the service moves a file; both copies hold the same content.
    """
    chosen: dict[int, DataFile] = {}
    for data_file in files:
        chosen.setdefault(data_file.number, data_file)
    return [chosen[number] for number in sorted(chosen)]


def list_data_files(storage: Storage, table: TableRef, extension: str | None = None) -> list[DataFile]:
    """The table's history in application order: one file per number, ``extension`` only when given."""
    files = scan_table(storage, table).data_files
    if extension is not None:
        files = tuple(f for f in files if f.extension == extension)
    return unique_by_number(files)


def read_data_file(storage: Storage, path: str, file_format: TableFormat = PARQUET) -> pa.Table:
    """Read one data file into an Arrow table.

    Raises:
        UnreadableFile: the file is missing, or cannot be parsed in ``file_format``.
    """
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError as exc:
        raise UnreadableFile(path, "file not found") from exc
    try:
        if file_format.delimited:
            return _read_delimited(data, file_format)
        return pq.read_table(pa.BufferReader(arrow_owned(data)))
    except UnreadableFile:
        raise
    except (pa.ArrowException, ValueError, OSError, LookupError, UnicodeError) as exc:
        raise UnreadableFile(path, f"cannot be read as {_format_name(file_format)}: {exc}") from exc


def _format_name(file_format: TableFormat) -> str:
    return f"delimited text ({file_format.extension})" if file_format.delimited else "Parquet"


def _read_delimited(data: bytes, file_format: TableFormat) -> pa.Table:
    """Parse delimited text with the ``_metadata.json`` schema, typing columns ourselves.

    Every column is first read as text so that nothing is guessed: Arrow's inference would turn exact
    decimal text into floats. Columns then get the type their ``SchemaDefinition`` ``DataType`` names;
    undeclared columns stay text (the connector writes decimals as ``String``), except
    ``__rowMarker__``, which the format defines as an integer.
    """
    parse = pacsv.ParseOptions(
        delimiter=file_format.column_separator or ",",
        quote_char=file_format.quote_character or False,
        double_quote=True,
        escape_char=(
            file_format.escape_character
            if file_format.escape_character and file_format.escape_character != file_format.quote_character
            else False
        ),
        newlines_in_values=True,
    )
    declared = [name for name, _ in file_format.columns]
    if file_format.first_row_as_header:
        read = pacsv.ReadOptions(encoding=file_format.encoding)
        names = pacsv.open_csv(
            pa.BufferReader(arrow_owned(data)),
            read_options=pacsv.ReadOptions(encoding=file_format.encoding, block_size=1 << 16),
            parse_options=parse,
        ).schema.names
    else:
        read = pacsv.ReadOptions(encoding=file_format.encoding, column_names=declared)
        names = declared
    # Without a NullValue an empty unquoted field is NULL, and a quoted "" stays an empty string.
    null_values = [file_format.null_value if file_format.null_value is not None else ""]
    convert = pacsv.ConvertOptions(
        column_types=dict.fromkeys(names, pa.string()),
        null_values=null_values,
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )
    text = pacsv.read_csv(
        pa.BufferReader(arrow_owned(data)), read_options=read, parse_options=parse, convert_options=convert
    )
    columns = [
        _typed(column, name, file_format.declared_type(name))
        for name, column in zip(text.column_names, text.columns, strict=True)
    ]
    return pa.Table.from_arrays(columns, names=text.column_names)


def _typed(column: pa.ChunkedArray, name: str, data_type: str | None) -> pa.Array:
    """Convert one text column to its declared type; raises ``ValueError`` naming the column."""
    array = column.combine_chunks()
    if data_type is None:
        return array.cast(_UNDECLARED_MARKER_TYPE) if name == ROW_MARKER_COLUMN else array
    try:
        return _convert(array, data_type)
    except (pa.ArrowException, ValueError) as exc:
        msg = f"column {name!r} is declared {data_type} but holds a value that is not one: {exc}"
        raise ValueError(msg) from exc


def _convert(array: pa.Array, data_type: str) -> pa.Array:
    if data_type in DELIMITED_CASTS:
        return array.cast(DELIMITED_CASTS[data_type])
    if data_type == "DateTime":
        return _timestamps(array)
    if data_type == "ITime":
        return _times(array)
    if data_type == "ByteArray":
        # The connector's encoder writes binary as hex: the only text form that round-trips exactly.
        return pa.array([None if v is None else bytes.fromhex(v) for v in array.to_pylist()], pa.binary())
    return array  # String, and types outside the seed's table (``validate`` reports those)


def _timestamps(array: pa.Array) -> pa.Array:
    """``DateTime`` text → timestamps, keeping what the text says.

    Text with a zone offset becomes UTC timestamps, text without one stays naive (local to the source),
    and the unit is microseconds unless the text has sub-microsecond digits, then nanoseconds: the
    text's precision is kept and nothing is reinterpreted.
    """
    errors: list[str] = []
    for unit in ("us", "ns"):
        for tz in ("UTC", None):
            try:
                return array.cast(pa.timestamp(unit, tz))
            except pa.ArrowInvalid as exc:
                errors.append(str(exc))
    raise ValueError(errors[-1])


def _times(array: pa.Array) -> pa.Array:
    """``ITime`` text → ``time64[us]``; Arrow cannot cast text to a time of day.

    The seed describes ``ITime`` as "a full date and time value", so text with a date is read as a
    ``DateTime`` instead of being cut down to its time.
    """
    values: list[str | None] = array.to_pylist()
    if any(v is not None and ("-" in v[:10]) for v in values):
        return _timestamps(array)
    return pa.array([None if v is None else dt.time.fromisoformat(v) for v in values], pa.time64("us"))


def column_is_all_null(column: pa.ChunkedArray | pa.Array) -> bool:
    """Whether a column carries no value at all (its type then says nothing about the data)."""
    return bool(column.null_count == len(column))
