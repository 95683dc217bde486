"""Typing in bulk: the columnar lane's counterpart of ``to_arrow``, for columns Arrow's JSON reader parsed.

``parse_type`` says which Arrow type the JSON reader parses a column's wire values as; ``converted``
turns the parsed column into the landing type with vectorised casts wherever Arrow converts exactly as
``connector.debezium.arrow_values.to_arrow`` does, and calls ``to_arrow`` itself for the rest, so both paths
give the same values. A column neither can take calls ``decline``.
"""

from __future__ import annotations

import pyarrow as pa

from connector.debezium.arrow_values import floor_nanos_to_micros, to_arrow
from connector.debezium.connect_decimal import decimals_from_base64
from connector.debezium.types import ColumnType, Wire
from connector.errors import decline

# Arrow types whose parsed JSON values cast exactly as ``pa.array(values, type)`` converts them.
_CASTS_EXACTLY = {pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float64(), pa.bool_(), pa.string()}

# Wires whose values Arrow's reader parses as int64, and as strings.
_INTEGER_WIRES = {Wire.CAST, Wire.MILLIS, Wire.NANOS, Wire.TIME}
_STRING_WIRES = {Wire.BASE64, Wire.DECIMAL, Wire.DECIMAL_TEXT, Wire.ZONED, Wire.BITS, Wire.BITS_BYTES}
_VARIABLE_SCALE = pa.struct([pa.field("scale", pa.int64()), pa.field("value", pa.string())])


def parse_type(name: str, ctype: ColumnType) -> pa.DataType:
    """The type Arrow's JSON reader parses a column's wire values as."""
    wire = ctype.wire
    if wire == Wire.PLAIN and ctype.arrow in _CASTS_EXACTLY:
        return pa.int64() if pa.types.is_integer(ctype.arrow) else ctype.arrow
    if wire == Wire.PLAIN and ctype.arrow == pa.float32():
        return pa.float64()
    if wire in _INTEGER_WIRES:
        return pa.int64()
    if wire in _STRING_WIRES or (wire == Wire.JSON and ctype.arrow == pa.string()):
        # JSON columns here are established string columns of schemaless tables: strings pass through.
        return pa.string()
    if wire in (Wire.VSDECIMAL, Wire.VSDECIMAL_TEXT):
        return _VARIABLE_SCALE
    decline(f"column {name!r} ({wire} {ctype.arrow}) needs the record path")


def converted(raw: pa.Array | None, ctype: ColumnType, size: int) -> pa.Array:
    """``to_arrow`` of a parsed column (``None``: absent from every row), vectorised where Arrow is exact."""
    if raw is None:
        return to_arrow([None] * size, ctype)
    wire = ctype.wire
    if wire == Wire.PLAIN and ctype.arrow in _CASTS_EXACTLY:
        return raw.cast(ctype.arrow)
    if wire == Wire.CAST:
        storage = pa.int32() if ctype.arrow == pa.date32() else pa.int64()
        return raw.cast(storage).cast(ctype.arrow)
    if wire == Wire.MILLIS:
        return raw.cast(pa.timestamp("ms")).cast(ctype.arrow)
    if wire == Wire.NANOS:
        return floor_nanos_to_micros(raw)
    if wire == Wire.JSON and raw.type == pa.string():
        return raw
    if wire == Wire.DECIMAL:
        bulk = decimals_from_base64(raw, ctype.arrow, ctype.scale)
        if bulk is not None:
            return bulk
    return to_arrow(raw.to_pylist(), ctype)
