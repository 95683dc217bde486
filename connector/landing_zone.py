"""The Fabric landing-zone contract, in one place: where things live and what the files say.

Table folders (and finding them), the 20-digit file names and the reserved names; ``_metadata.json``
(key names and their spellings, documented defaults, the delimited-text properties and data types) and
``_partnerEvents.json``. The writer (``publish``) builds and compares its files with these functions, and
the reader, the validator and the read-back tools (``readback``) read and check them with the same ones, so the
two sides cannot drift apart. Three ways to read ``_metadata.json``, each for its reader:

* ``effective_metadata``: what the mirroring service understands (case-folded names, absent keys as their
  defaults); the writer compares an existing file with its own through it;
* ``parse_table_metadata`` / ``table_format``: lenient (a malformed key means its default), for replaying
  whatever the service could read;
* ``metadata_problems`` / ``partner_events_problems``: strict, one message per broken rule, for ``validate``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from connector.config import MirrorSettings
from connector.errors import ConnectorError
from connector.storage.base import Storage

FILE_NUMBER_DIGITS = 20
PROCESSED_FOLDERS = ("_ProcessedFiles", "_FilesReadyToDelete")
METADATA_FILE = "_metadata.json"
PARTNER_EVENTS_FILE = "_partnerEvents.json"
STAGED_PREFIX = "_staged_"
"""Prefix of a staged data file: written before its batch's plan is recorded, published by renaming it to its
number. Not the storage layer's ``TEMP_PREFIX`` (``_tmp_``): start-up deletes every ``_tmp_`` file unasked,
while a staged file a recorded plan names must survive a crash so recovery can publish it."""
SCHEMA_SUFFIX = ".schema"
# Root and table-level folders that are not tables: the mirroring service's and the connector's own (``_``),
# and hidden ones a person keeps beside the tables (``.``).
_NOT_TABLE_PREFIXES = ("_", ".")

_DATA_FILE = re.compile(r"^(\d{20})\.([A-Za-z0-9]+)$")


@dataclass(frozen=True)
class TableRef:
    """A mirrored table: its id (``schema.table``) and its folder in the landing zone."""

    schema: str | None
    name: str

    @property
    def id(self) -> str:
        """``schema.table``, or ``table`` without a schema; used in metrics, logs and the ledger."""
        return f"{self.schema}.{self.name}" if self.schema else self.name

    @property
    def folder(self) -> str:
        """``<schema>.schema/<table>`` per the landing-zone format, or ``<table>``."""
        return f"{self.schema}.schema/{self.name}" if self.schema else self.name


def table_for_topic(topic: str, mirror: MirrorSettings) -> TableRef:
    """Map a Debezium topic ``<prefix>.<schema>.<table>`` to its table, honouring config overrides."""
    override = mirror.table_settings(topic)
    parts = topic.split(".")
    schema = parts[-2] if len(parts) >= 3 else None
    name = parts[-1]
    return TableRef(override.schema_name or schema, override.table or name)


def data_file_name(number: int, extension: str) -> str:
    """``00000000000000000001.parquet``."""
    return f"{number:0{FILE_NUMBER_DIGITS}d}.{extension}"


def parse_data_file_name(name: str) -> tuple[int, str] | None:
    """Return (number, extension) for a data file name, ``None`` for anything else."""
    match = _DATA_FILE.match(name)
    if not match:
        return None
    return int(match[1]), match[2]


def staged_batch_prefix(batch_id: int) -> str:
    """The start of every staged file name of batch ``batch_id`` (``staged_file_name``)."""
    return f"{STAGED_PREFIX}{batch_id}_"


def staged_file_name(batch_id: int, first: tuple[str, int, int], chunk: int, attempt: str, extension: str) -> str:
    """Name of a file staged before its batch is planned; the leading underscore keeps mirroring off it.

    The batch, the piece's first record (topic, partition, offset), the chunk, and the staging attempt: every
    attempt of a task (retried, speculative, or a zombie of a lost executor) writes names of its own, so one
    attempt never writes over a file another attempt reported, and a staged file needs no atomic upload. The
    topic is hashed: names stay short and free of characters a file system may refuse.
    """
    topic, partition, offset = first
    slice_id = f"{hashlib.sha1(topic.encode(), usedforsecurity=False).hexdigest()[:12]}-{partition}-{offset}"
    return f"{staged_batch_prefix(batch_id)}{slice_id}_{chunk}_{attempt}.{extension}"


def discover_tables(storage: Storage) -> list[TableRef]:
    """Table folders of the landing zone, sorted by table id.

    Folders starting with ``_`` are not tables (the mirroring service ignores them, and the connector
    uses the prefix for its own files); nor are hidden folders starting with ``.`` (a ``.state`` folder
    that a person keeps beside the tables is not data to replay). A root folder ``<schema>.schema``
    holds one folder per table; any other root folder is a table without a schema.
    """
    tables: list[TableRef] = []
    for entry in storage.list_dir(""):
        name = entry.path.rsplit("/", 1)[-1]
        if not entry.is_dir or name.startswith(_NOT_TABLE_PREFIXES):
            continue
        if name.endswith(SCHEMA_SUFFIX) and len(name) > len(SCHEMA_SUFFIX):
            schema = name[: -len(SCHEMA_SUFFIX)]
            for child in storage.list_dir(entry.path):
                child_name = child.path.rsplit("/", 1)[-1]
                if child.is_dir and not child_name.startswith(_NOT_TABLE_PREFIXES):
                    tables.append(TableRef(schema, child_name))
        else:
            tables.append(TableRef(None, name))
    return sorted(tables, key=lambda table: table.id)


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
DELIMITED_DATA_TYPES = frozenset(
    {"Double", "Single", "Int16", "Int64", "Int32", "DateTime", "IDate", "ITime", "String", "Boolean", "ByteArray"}
)
"""The seed's table of data types supported in a delimited-text ``SchemaDefinition``."""

DELIMITED_SEPARATORS: Mapping[str, str] = MappingProxyType({"csv": ",", "tsv": "\t", "psv": "|"})
"""The delimited-text extensions this connector writes, with their column separators."""


# -- writing ---------------------------------------------------------------------------------------------


def table_metadata(key_columns: tuple[str, ...], extra: dict[str, Any]) -> dict[str, Any]:
    """The content of a table's ``_metadata.json``."""
    return {KEY_COLUMNS: list(key_columns), **extra}


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
    """The landing zone's delimited-text type names (the seed's table of supported data types)."""
    if pa.types.is_int8(arrow) or pa.types.is_int16(arrow):
        return "Int16"
    if pa.types.is_int32(arrow):
        return "Int32"
    if pa.types.is_int64(arrow):
        return "Int64"
    if pa.types.is_float32(arrow):
        return "Single"
    if pa.types.is_floating(arrow):
        return "Double"
    if pa.types.is_boolean(arrow):
        return "Boolean"
    if pa.types.is_date(arrow):
        return "IDate"
    if pa.types.is_timestamp(arrow):
        return "DateTime"
    if pa.types.is_time(arrow):
        return "ITime"
    if pa.types.is_binary(arrow):
        return "ByteArray"
    # Decimals have no delimited-text type: they travel as exact text.
    return "String"


def partner_events(partner_name: str, source_type: str, source_version: str | None) -> dict[str, Any]:
    """The content of ``_partnerEvents.json``."""
    info: dict[str, Any] = {"sourceType": source_type}
    if source_version:
        info["sourceVersion"] = source_version
    return {"partnerName": partner_name, "sourceInfo": info}


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
    return tuple(value) if _is_name_list(value) else None


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


def _is_name_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, str) and item for item in value)


# -- checking, strictly: every rule of the format, one message per violation -----------------------------


def metadata_problems(metadata: Mapping[str, Any]) -> list[str]:
    """What breaks the format's rules in a ``_metadata.json`` object, one message per problem, in order."""
    problems = _key_column_problems(metadata)
    if is_delimited(metadata):
        problems.extend(_delimited_problems(metadata))
    return problems


def _key_column_problems(metadata: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    spellings = [key for key in (KEY_COLUMNS, KEY_COLUMNS_ALT) if key in metadata]
    if not spellings:
        problems.append("declares no keyColumns: open mirroring cannot apply updates or deletes without them")
    for key in spellings:
        value = metadata[key]
        if not _is_name_list(value):
            problems.append(f"{key} must be a non-empty list of column names, found {value!r}")
        elif len(set(value)) != len(value):
            problems.append(f"{key} lists a column more than once: {value!r}")
    if len(spellings) == 2 and metadata[KEY_COLUMNS] != metadata[KEY_COLUMNS_ALT]:
        problems.append(f"{KEY_COLUMNS} and {KEY_COLUMNS_ALT} are both present and differ")
    return problems


def _delimited_problems(metadata: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    file_format = metadata.get(FILE_FORMAT)
    if file_format is not None and (
        not isinstance(file_format, str) or file_format.lower() not in (DELIMITED_TEXT_FORMAT.lower(), _CSV)
    ):
        problems.append(
            f"{FILE_FORMAT} must be {DELIMITED_TEXT_FORMAT}, {CSV_FORMAT} or {PARQUET_FORMAT}, found {file_format!r}"
        )
    extension = metadata.get(FILE_EXTENSION)
    if extension is None:
        problems.append(f"{FILE_EXTENSION} is required for delimited text")
    elif not isinstance(extension, str) or not extension.strip("."):
        problems.append(f"{FILE_EXTENSION} must be an extension such as csv, found {extension!r}")
    problems.extend(_schema_definition_problems(metadata.get(SCHEMA_DEFINITION)))
    props = metadata.get(FORMAT_PROPERTIES)
    if props is None:
        return problems
    if not isinstance(props, dict):
        problems.append(f"{FORMAT_PROPERTIES} must be a JSON object")
        return problems
    if props.get(FIRST_ROW_AS_HEADER, True) is not True:
        problems.append(f"{FORMAT_PROPERTIES}.{FIRST_ROW_AS_HEADER} must be true: delimited files need a header row")
    for name, supported in SUPPORTED_PROPERTY_VALUES.items():
        if name in props and props[name] not in supported:
            problems.append(f"{FORMAT_PROPERTIES}.{name} {props[name]!r} is not one of {list(supported)!r}")
    if NULL_VALUE in props and not isinstance(props[NULL_VALUE], str):
        problems.append(f"{FORMAT_PROPERTIES}.{NULL_VALUE} must be a string, found {props[NULL_VALUE]!r}")
    return problems


def _schema_definition_problems(definition: Any) -> list[str]:
    if definition is None:
        return [f"{SCHEMA_DEFINITION} is required for delimited text: it gives every column its type"]
    columns = definition.get("Columns") if isinstance(definition, dict) else None
    if not isinstance(columns, list) or not columns:
        return [f"{SCHEMA_DEFINITION}.Columns must be a non-empty list"]
    problems: list[str] = []
    seen: set[str] = set()
    for index, column in enumerate(columns):
        name = column.get("Name") if isinstance(column, dict) else None
        if not isinstance(column, dict) or not isinstance(name, str) or not name:
            problems.append(f"{SCHEMA_DEFINITION}.Columns[{index}] must be an object with a Name")
            continue
        if name in seen:
            problems.append(f"{SCHEMA_DEFINITION} declares column {name!r} more than once")
        seen.add(name)
        data_type = column.get("DataType")
        if data_type not in DELIMITED_DATA_TYPES:
            problems.append(
                f"{SCHEMA_DEFINITION} column {name!r} has DataType {data_type!r}, not one of "
                f"{sorted(DELIMITED_DATA_TYPES)}"
            )
    return problems


def partner_events_problems(content: Any) -> list[str]:
    """What breaks the format's rules in a parsed ``_partnerEvents.json``, one message per problem."""
    if not isinstance(content, dict):
        return ["is not a JSON object"]
    problems: list[str] = []
    if not isinstance(content.get("partnerName"), str):
        problems.append("partnerName must be a string")
    info = content.get("sourceInfo")
    if not isinstance(info, dict):
        problems.append("sourceInfo must be a JSON object")
    else:
        if not isinstance(info.get("sourceType"), str):
            problems.append("sourceInfo.sourceType must be a string")
        if "sourceVersion" in info and not isinstance(info["sourceVersion"], str):
            problems.append("sourceInfo.sourceVersion must be a string")
    return problems
