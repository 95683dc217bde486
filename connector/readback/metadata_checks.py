"""The landing-zone format's rules, strictly, for ``validate``.

One message per broken rule of a ``_metadata.json`` or ``_partnerEvents.json`` (the writer and the replay read
the same files leniently).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from connector.landing_zone.metadata import (
    CSV_FORMAT,
    DELIMITED_DATA_TYPES,
    DELIMITED_TEXT_FORMAT,
    FILE_EXTENSION,
    FILE_FORMAT,
    FIRST_ROW_AS_HEADER,
    FORMAT_PROPERTIES,
    KEY_COLUMNS,
    KEY_COLUMNS_ALT,
    NULL_VALUE,
    PARQUET_FORMAT,
    SCHEMA_DEFINITION,
    SUPPORTED_PROPERTY_VALUES,
    is_delimited,
    is_name_list,
)

_CSV = CSV_FORMAT.lower()

# -- checking, strictly: every rule of the format, one message per violation -----------------------------


def metadata_problems(metadata: Mapping[str, Any]) -> list[str]:
    """What breaks the format's rules in a ``_metadata.json`` object, one message per problem, in order."""
    problems = _key_column_problems(metadata)
    if is_delimited(metadata):
        problems.extend(_delimited_problems(metadata))
    return problems


def _key_column_problems(metadata: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    # No keyColumns is allowed: a table without a key takes inserts only (``validate``'s ``check_inserts_only``).
    spellings = [key for key in (KEY_COLUMNS, KEY_COLUMNS_ALT) if key in metadata]
    for key in spellings:
        value = metadata[key]
        if not is_name_list(value):
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
