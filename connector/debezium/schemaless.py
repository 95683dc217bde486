"""Schemaless JSON: a column's type inferred from its values, one rule for the record path and the lane.

Without a Connect schema, a new column's type comes from the values a batch holds: only ints make
int64, ints and floats double, only booleans bool, only strings string, anything else (nested values,
mixed kinds) JSON text; a column with no value is left out. The record path sees Python values
(``kind_of_value``), the lane the types Arrow's JSON reader inferred (``kind_of_arrow``); both then ask
``inferred_type``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.debezium.types import ColumnType, Wire
from connector.errors import decline


class ValueKind(StrEnum):
    """What a schemaless JSON value is."""

    INT = "int"
    DOUBLE = "double"
    BOOL = "bool"
    STRING = "string"
    NESTED = "nested"  # an object or an array


_TYPE_OF_KIND = {
    ValueKind.INT: ColumnType(pa.int64(), Wire.PLAIN),
    ValueKind.DOUBLE: ColumnType(pa.float64(), Wire.PLAIN),
    ValueKind.BOOL: ColumnType(pa.bool_(), Wire.PLAIN),
    ValueKind.STRING: ColumnType(pa.string(), Wire.PLAIN),
}
_JSON_TEXT = ColumnType(pa.string(), Wire.JSON)
_NUMBERS = {ValueKind.INT, ValueKind.DOUBLE}
# Ints beyond this are not exact as doubles.
_EXACT_DOUBLE_INTS = 2**53


def kind_of_value(value: Any) -> ValueKind:
    """The kind of one non-null value as orjson parsed it (``bool`` before ``int``: it is one)."""
    if isinstance(value, bool):
        return ValueKind.BOOL
    if isinstance(value, int):
        return ValueKind.INT
    if isinstance(value, float):
        return ValueKind.DOUBLE
    if isinstance(value, str):
        return ValueKind.STRING
    return ValueKind.NESTED


def inferred_type(kinds: Iterable[ValueKind]) -> ColumnType | None:
    """The column type values of ``kinds`` make; ``None`` when there is no value."""
    present = set(kinds)
    if not present:
        return None
    if present == _NUMBERS:
        return _TYPE_OF_KIND[ValueKind.DOUBLE]
    if len(present) == 1:
        return _TYPE_OF_KIND.get(present.pop(), _JSON_TEXT)
    return _JSON_TEXT


def kind_of_arrow(arrow: pa.DataType) -> ValueKind | None:
    """The kind of a column Arrow's JSON reader inferred (``None``: only nulls)."""
    if pa.types.is_null(arrow):
        return None
    if arrow == pa.int64():
        return ValueKind.INT
    if arrow == pa.float64():
        return ValueKind.DOUBLE
    if arrow == pa.bool_():
        return ValueKind.BOOL
    if pa.types.is_string(arrow) or pa.types.is_timestamp(arrow):  # strings Arrow took for timestamps
        return ValueKind.STRING
    return ValueKind.NESTED


def arrow_row_columns(row_types: Iterable[pa.StructType], first_row: list[str]) -> dict[str, ColumnType]:
    """A schemaless topic's row columns, from the struct types Arrow inferred for its rows, in chunks.

    Columns come in the order of the first row (``first_row``), as the record path orders them, so every
    row must hold only the first row's columns. A column whose values would be JSON text (nested or
    mixed kinds) is declined: Arrow has already parsed it into something else. A column with only nulls is
    typed string here and dropped by ``used_columns``.
    """
    kinds: dict[str, set[ValueKind]] = {}
    for row_type in row_types:
        for column in row_type:
            kind = kind_of_arrow(column.type)
            kinds.setdefault(column.name, set()).update(() if kind is None else (kind,))
    if not set(kinds) <= set(first_row):
        decline("a row has a column the first row does not have")
    columns: dict[str, ColumnType] = {}
    for name in first_row:
        ctype = inferred_type(kinds.get(name, ()))
        if ctype is not None and ctype.wire == Wire.JSON:
            decline(f"column {name!r} holds {sorted(kinds[name])} values: the record path writes them as JSON text")
        columns[name] = ctype or _TYPE_OF_KIND[ValueKind.STRING]
    return columns


def used_columns(row_columns: Mapping[str, ColumnType], rows: Mapping[str, pa.Array]) -> dict[str, ColumnType]:
    """Inferred columns as the record path keeps them: all-null ones dropped, doubles only where it says double.

    The record path infers from the values its rows use: ints alone make int64, and a column with no value
    is left out. A double column whose used values are all whole numbers could have been ints (``1``
    and ``1.0`` parse alike), and ints beyond 2**53 do not convert exactly: those are declined.
    """
    kept: dict[str, ColumnType] = {}
    for name, ctype in row_columns.items():
        used = rows[name]
        if used.null_count == len(used):
            continue
        if ctype.arrow == pa.float64():
            present = pc.drop_null(used)
            if not pc.any(pc.not_equal(pc.trunc(present), present)).as_py():
                decline(f"column {name!r} has only whole numbers: ints or doubles cannot be told apart")
            if pc.max(pc.abs(present)).as_py() > _EXACT_DOUBLE_INTS:
                decline(f"column {name!r} has numbers beyond 2**53")
        kept[name] = ctype
    return kept
