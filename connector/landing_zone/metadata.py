"""What a table's ``_metadata.json`` and the root's ``_partnerEvents.json`` say.

Key names and their spellings, documented defaults, the delimited-text properties and data types; how the writer
builds them, how the mirroring service reads them (``effective_metadata``) and how a replay reads them leniently
(``parse_table_metadata``). The root's ``_partnerEvents.json`` is also written here
(``ensure_partner_events``), for the table planner and for ``init`` alike: an existing one is kept as it is, so
writing it needs nothing above the landing zone's contract.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson
import pyarrow as pa

from connector.errors import ConnectorError
from connector.landing_zone.layout import PARTNER_EVENTS_FILE
from connector.storage.base import Storage

# -- _metadata.json: key names, defaults and the one rule for each ------------------------------------------
# The seed spells key names in two cases (``keyColumns`` and, in its delimited-text example, ``KeyColumns``).
# The writer's comparison folds case (``effective_metadata``); the lenient reader and the strict checks read
# the spellings below.

KEY_COLUMNS = "keyColumns"
KEY_COLUMNS_ALT = "KeyColumns"
"""The spelling of the seed's delimited-text example; accepted wherever ``keyColumns`` is."""
UPSERT_DEFAULT = "isUpsertDefaultRowMarker"
"""``true``: rows of a file without ``__rowMarker__`` are upserts, not inserts. Absent means ``false``."""
FILE_FORMAT = "FileFormat"
FILE_EXTENSION = "FileExtension"
SCHEMA_DEFINITION = "SchemaDefinition"
FORMAT_PROPERTIES = "FileFormatTypeProperties"
DELIMITED_KEYS = (FILE_EXTENSION, SCHEMA_DEFINITION, FORMAT_PROPERTIES)
"""Keys only delimited text has: with any of them and no ``FileFormat``, the format is CSV."""

PARQUET_FORMAT = "Parquet"
DELIMITED_TEXT_FORMAT = "DelimitedText"
CSV_FORMAT = "CSV"
"""Delimited text whose ``FileExtension`` defaults to ``csv``."""

FIRST_ROW_AS_HEADER = "FirstRowAsHeader"
ROW_SEPARATOR = "RowSeparator"
COLUMN_SEPARATOR = "ColumnSeparator"
QUOTE_CHARACTER = "QuoteCharacter"
ESCAPE_CHARACTER = "EscapeCharacter"
NULL_VALUE = "NullValue"
ENCODING = "Encoding"
DELIMITED_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        FIRST_ROW_AS_HEADER: True,
        ROW_SEPARATOR: "\r\n",
        COLUMN_SEPARATOR: ",",
        QUOTE_CHARACTER: '"',
        ESCAPE_CHARACTER: "\\",
        ENCODING: "UTF-8",
    }
)
"""``FileFormatTypeProperties`` whose absence means a value (the seed's table of defaults); ``NullValue`` has none."""
SUPPORTED_PROPERTY_VALUES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        ROW_SEPARATOR: ("\r\n", "\n", "\r"),
        COLUMN_SEPARATOR: (",", ";", "|", "\t"),
        QUOTE_CHARACTER: ('"', "'", ""),
        ESCAPE_CHARACTER: ("\\", "/", '"', ""),
    }
)
"""The values the seed's delimited-text table lists as supported."""


class DelimitedType(NamedTuple):
    """One row of the seed's table of delimited-text data types, as the connector writes and reads it back."""

    name: str
    written_for: Callable[[pa.DataType], bool]
    """Whether a column of an Arrow type is written under this name (the table's first row that says so)."""
    read_as: pa.DataType | None
    """The Arrow type its text casts to; ``None``: text that needs a reading of its own, or stays text."""


DELIMITED_TYPES: tuple[DelimitedType, ...] = (
    DelimitedType("Int16", lambda t: pa.types.is_int8(t) or pa.types.is_int16(t), pa.int16()),
    DelimitedType("Int32", pa.types.is_int32, pa.int32()),
    DelimitedType("Int64", pa.types.is_int64, pa.int64()),
    DelimitedType("Single", pa.types.is_float32, pa.float32()),
    DelimitedType("Double", pa.types.is_floating, pa.float64()),
    DelimitedType("Boolean", pa.types.is_boolean, pa.bool_()),
    DelimitedType("IDate", pa.types.is_date, pa.date32()),
    DelimitedType("DateTime", pa.types.is_timestamp, None),  # with or without a zone, in us or ns
    DelimitedType("ITime", pa.types.is_time, None),  # Arrow cannot cast text to a time of day
    DelimitedType("ByteArray", pa.types.is_binary, None),  # written as hex: the one text form that round-trips
    # Decimals have no delimited-text type: they travel as exact text.
    DelimitedType("String", lambda _: True, None),
)
"""The seed's table of data types supported in a delimited-text ``SchemaDefinition``, in the writer's order."""
DELIMITED_DATA_TYPES = frozenset(row.name for row in DELIMITED_TYPES)
"""The type names of ``DELIMITED_TYPES``."""
DELIMITED_CASTS: Mapping[str, pa.DataType] = MappingProxyType(
    {row.name: row.read_as for row in DELIMITED_TYPES if row.read_as is not None}
)
"""The delimited-text types whose text is read back by a plain Arrow cast, and the type it casts to."""

DELIMITED_SEPARATORS: Mapping[str, str] = MappingProxyType({"csv": ",", "tsv": "\t", "psv": "|"})
"""The delimited-text extensions this connector writes, with their column separators."""


# -- writing ---------------------------------------------------------------------------------------------


def table_metadata(key_columns: tuple[str, ...], extra: dict[str, Any]) -> dict[str, Any]:
    """The content of a table's ``_metadata.json``; without ``keyColumns`` for a keyless table.

    The seed: "If ``keyColumns`` or ``_metadata.json`` isn't specified, then update/deletes aren't possible", so a
    table without a key is declared with no key rather than an empty one.
    """
    return {KEY_COLUMNS: list(key_columns), **extra} if key_columns else dict(extra)


def delimited_text_metadata(schema: pa.Schema, extension: str) -> dict[str, Any]:
    """``_metadata.json`` keys of a delimited-text table this connector writes (``extension``: a written one)."""
    return {
        SCHEMA_DEFINITION: {
            "Columns": [
                {"Name": f.name, "DataType": delimited_type_name(f.type), "IsNullable": f.nullable} for f in schema
            ]
        },
        FILE_FORMAT: DELIMITED_TEXT_FORMAT,
        FILE_EXTENSION: extension,
        FORMAT_PROPERTIES: {
            FIRST_ROW_AS_HEADER: True,
            ROW_SEPARATOR: "\n",
            COLUMN_SEPARATOR: DELIMITED_SEPARATORS[extension],
            QUOTE_CHARACTER: '"',
            ESCAPE_CHARACTER: '"',
            NULL_VALUE: "",
            ENCODING: "UTF-8",
        },
    }


def delimited_type_name(arrow: pa.DataType) -> str:
    """The landing zone's delimited-text type name of an Arrow type (``DELIMITED_TYPES``)."""
    return next(row.name for row in DELIMITED_TYPES if row.written_for(arrow))


def partner_events(partner_name: str, source_type: str, source_version: str | None) -> dict[str, Any]:
    """The content of ``_partnerEvents.json``."""
    info: dict[str, Any] = {"sourceType": source_type}
    if source_version:
        info["sourceVersion"] = source_version
    return {"partnerName": partner_name, "sourceInfo": info}


def ensure_partner_events(storage: Storage, partner_name: str, source_type: str, source_version: str | None) -> None:
    """Write ``_partnerEvents.json`` at the root if absent (an existing one is left as it is).

    Looked for first: on OneLake a create that finds the file costs six round trips, an existence check one.
    """
    if storage.exists(PARTNER_EVENTS_FILE):
        return
    content = partner_events(partner_name, source_type, source_version)
    try:
        storage.create(PARTNER_EVENTS_FILE, orjson.dumps(content, option=orjson.OPT_INDENT_2))
    except FileExistsError:
        return


_FILE_FORMAT = FILE_FORMAT.lower()
_FILE_EXTENSION = FILE_EXTENSION.lower()
_PROPERTIES = FORMAT_PROPERTIES.lower()
_UPSERT_DEFAULT = UPSERT_DEFAULT.lower()
_CSV = CSV_FORMAT.lower()
_FORMATS = {PARQUET_FORMAT.lower(): PARQUET_FORMAT, DELIMITED_TEXT_FORMAT.lower(): DELIMITED_TEXT_FORMAT}
"""``FileFormat`` values by their lower-case spelling (CSV is apart: it also implies an extension)."""


# -- comparing: what a _metadata.json means, as the mirroring service reads it ---------------------------


class AmbiguousMetadata(ConnectorError, ValueError):
    """A JSON object spells one key twice (names differ only in case) with different values."""


def effective_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` as the mirroring service reads it: flat lower-case key names, absent keys as defaults.

    ``FileFormatTypeProperties`` (when an object) becomes one ``fileformattypeproperties.<name>`` key per
    property, so that a difference names the property. An absent ``FileFormat`` is Parquet, or CSV when
    delimited-text keys are present; ``isUpsertDefaultRowMarker`` is false; delimited text without
    properties has ``DELIMITED_DEFAULTS``.

    Raises:
        AmbiguousMetadata: two names differ only in case and their values differ.
    """
    out = flat_metadata(metadata)
    folded_keys = tuple(k.lower() for k in DELIMITED_KEYS)
    delimited_keys = any(key == k or key.startswith(f"{k}.") for key in out for k in folded_keys)
    file_format = out.get(_FILE_FORMAT)
    if file_format is None:
        file_format = CSV_FORMAT if delimited_keys else PARQUET_FORMAT
    if isinstance(file_format, str):
        file_format = _FORMATS.get(file_format.lower(), file_format)
    if isinstance(file_format, str) and file_format.lower() == _CSV:  # delimited text with its default extension
        file_format = DELIMITED_TEXT_FORMAT
        out.setdefault(_FILE_EXTENSION, _CSV)
    out[_FILE_FORMAT] = file_format
    if file_format == PARQUET_FORMAT:
        out.setdefault(_FILE_EXTENSION, "parquet")
    extension = out.get(_FILE_EXTENSION)
    if isinstance(extension, str):
        out[_FILE_EXTENSION] = extension.lstrip(".").lower()
    if out.get(_UPSERT_DEFAULT) is None:
        out[_UPSERT_DEFAULT] = False
    if file_format == DELIMITED_TEXT_FORMAT and _PROPERTIES not in out:  # (not a non-object value)
        for name, value in DELIMITED_DEFAULTS.items():
            out.setdefault(f"{_PROPERTIES}.{name.lower()}", value)
    return out


def flat_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Lower-case key names, with the properties of an object ``FileFormatTypeProperties`` one level up.

    Raises:
        AmbiguousMetadata: two names differ only in case and their values differ.
    """
    out = _folded(metadata)
    properties = out.get(_PROPERTIES)
    if isinstance(properties, dict):
        del out[_PROPERTIES]
        out.update({f"{_PROPERTIES}.{key}": value for key, value in _folded(properties).items()})
    return out


def metadata_spellings(metadata: Mapping[str, Any]) -> dict[str, str]:
    """Flat lower-case key name (as ``flat_metadata`` has it) → the name as ``metadata`` spells it."""
    names = {name.lower(): name for name in metadata}
    for name, value in metadata.items():
        if name.lower() == _PROPERTIES and isinstance(value, dict):
            names.update({f"{name.lower()}.{key.lower()}": f"{name}.{key}" for key in value})
    return names


def _folded(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with lower-case key names.

    Raises:
        AmbiguousMetadata: two names differ only in case and their values differ.
    """
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for name, value in obj.items():
        key = name.lower()
        if key in out and out[key] != value:
            msg = f"declares {spelled[key]} and {name} with different values"
            raise AmbiguousMetadata(msg)
        out[key] = value
        spelled[key] = name
    return out


# -- reading, leniently: what a reader of the files needs, a malformed key meaning its default -----------


@dataclass(frozen=True)
class TableFormat:
    """How a table's data files are encoded, from its ``_metadata.json``.

    Parquet is the default: only delimited text needs (and has) format keys in ``_metadata.json``.
    ``extension`` is ``None`` when a ``DelimitedText`` table lacks the required ``FileExtension``: the
    expected name of its files is then unknown.
    """

    delimited: bool = False
    extension: str | None = "parquet"
    column_separator: str = DELIMITED_DEFAULTS[COLUMN_SEPARATOR]
    quote_character: str = DELIMITED_DEFAULTS[QUOTE_CHARACTER]
    escape_character: str = DELIMITED_DEFAULTS[ESCAPE_CHARACTER]
    null_value: str | None = None
    encoding: str = DELIMITED_DEFAULTS[ENCODING]
    first_row_as_header: bool = DELIMITED_DEFAULTS[FIRST_ROW_AS_HEADER]
    columns: tuple[tuple[str, str], ...] = ()
    """``SchemaDefinition`` as (name, DataType) pairs, in declaration order."""

    def declared_type(self, column: str) -> str | None:
        """The ``DataType`` declared for ``column``, ``None`` when the column is not declared."""
        for name, data_type in self.columns:
            if name == column:
                return data_type
        return None


PARQUET = TableFormat()


@dataclass(frozen=True)
class TableMetadata:
    """A table's ``_metadata.json``, interpreted."""

    key_columns: tuple[str, ...]
    """Empty when none are declared: then open mirroring cannot apply updates or deletes."""
    file_format: TableFormat
    upsert_by_default: bool
    """``isUpsertDefaultRowMarker``: rows of files without ``__rowMarker__`` are upserts, not inserts."""
    raw: Mapping[str, Any]


def parse_table_metadata(raw: Mapping[str, Any]) -> TableMetadata:
    """A ``_metadata.json`` object, read leniently (see ``table_format``)."""
    return TableMetadata(
        key_columns=key_columns_of(raw) or (),
        file_format=table_format(raw),
        upsert_by_default=raw.get(UPSERT_DEFAULT) is True,
        raw=raw,
    )


def key_columns_of(metadata: Mapping[str, Any]) -> tuple[str, ...] | None:
    """``keyColumns`` (or ``KeyColumns``, the spelling of the seed's delimited-text example).

    Returns ``None`` when it is not a non-empty list of column names (non-empty strings).
    """
    value = metadata.get(KEY_COLUMNS, metadata.get(KEY_COLUMNS_ALT))
    return tuple(value) if is_name_list(value) else None


def is_delimited(metadata: Mapping[str, Any]) -> bool:
    """Whether ``_metadata.json`` describes a delimited-text table.

    ``FileFormat`` defaults to CSV only among the delimited-text keys, so a metadata file without any of
    them (just ``keyColumns``) describes a Parquet table.
    """
    file_format = metadata.get(FILE_FORMAT)
    if isinstance(file_format, str):
        return file_format.lower() != PARQUET_FORMAT.lower()
    return any(key in metadata for key in DELIMITED_KEYS)


def table_format(metadata: Mapping[str, Any]) -> TableFormat:
    """The format a table's ``_metadata.json`` describes, falling back to the seed's defaults.

    This is lenient on purpose (a malformed key means its default): ``metadata_problems`` reports
    malformed keys, and ``replay`` should read whatever the mirroring service could.
    """
    if not is_delimited(metadata):
        return PARQUET
    extension: str | None = None
    raw_extension = metadata.get(FILE_EXTENSION)
    if isinstance(raw_extension, str) and raw_extension.strip("."):
        extension = raw_extension.lstrip(".")
    elif str(metadata.get(FILE_FORMAT, CSV_FORMAT)).lower() == _CSV:
        extension = _CSV
    props = metadata.get(FORMAT_PROPERTIES)
    props = props if isinstance(props, dict) else {}

    def text(key: str) -> str:
        default: str = DELIMITED_DEFAULTS[key]
        value = props.get(key, default)
        return value if isinstance(value, str) else default

    null_value = props.get(NULL_VALUE)
    return TableFormat(
        delimited=True,
        extension=extension,
        column_separator=text(COLUMN_SEPARATOR),
        quote_character=text(QUOTE_CHARACTER),
        escape_character=text(ESCAPE_CHARACTER),
        null_value=null_value if isinstance(null_value, str) else None,
        encoding=text(ENCODING),
        first_row_as_header=props.get(FIRST_ROW_AS_HEADER, True) is not False,
        columns=_schema_columns(metadata.get(SCHEMA_DEFINITION)),
    )


def _schema_columns(definition: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(definition, dict) or not isinstance(definition.get("Columns"), list):
        return ()
    return tuple(
        (column["Name"], str(column.get("DataType", "String")))
        for column in definition["Columns"]
        if isinstance(column, dict) and isinstance(column.get("Name"), str)
    )


def is_name_list(value: Any) -> bool:
    """Whether ``value`` is a non-empty list of non-empty strings (a column list)."""
    return isinstance(value, list) and bool(value) and all(isinstance(item, str) and item for item in value)
