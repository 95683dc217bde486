"""Debezium / Kafka Connect field schemas → Arrow column types, and JSON values → Arrow arrays.

Conversion is column-wise: a whole column of raw JSON values becomes one Arrow array, with Arrow's
vectorised casts wherever the wire value is already a number (dates, times, timestamps). Values that
need Python work (base64 decimals and bytes, JSON strings) are converted in one list comprehension.
"""

from __future__ import annotations

import base64
import binascii
import decimal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

# Connect primitive types → Arrow, for fields with no semantic name.
_PRIMITIVES: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float": pa.float32(),
    "float32": pa.float32(),
    "double": pa.float64(),
    "float64": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
}

# Semantic names whose wire value is an integer that Arrow casts directly (zero copy where possible).
_INTEGER_TEMPORAL: dict[str, pa.DataType] = {
    "io.debezium.time.Date": pa.date32(),
    "org.apache.kafka.connect.data.Date": pa.date32(),
    "io.debezium.time.Time": pa.time32("ms"),
    "org.apache.kafka.connect.data.Time": pa.time32("ms"),
    "io.debezium.time.MicroTime": pa.time64("us"),
    "io.debezium.time.NanoTime": pa.time64("ns"),
    # Debezium's Timestamp family is the source's local wall-clock time (timestamp without time zone).
    "io.debezium.time.Timestamp": pa.timestamp("ms"),
    "org.apache.kafka.connect.data.Timestamp": pa.timestamp("ms"),
    "io.debezium.time.MicroTimestamp": pa.timestamp("us"),
    "io.debezium.time.NanoTimestamp": pa.timestamp("ns"),
}

_STRING_SEMANTICS = {
    "io.debezium.data.Json",
    "io.debezium.data.Uuid",
    "io.debezium.data.Enum",
    "io.debezium.data.EnumSet",
    "io.debezium.data.Xml",
    "io.debezium.time.ZonedTime",
    "io.debezium.time.Interval",
}

# Kafka's JsonConverter (Jackson) writes non-finite floats as these strings; any other string is an error.
_NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}

CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"


class ConversionError(ValueError):
    """A value could not be converted; ``row`` is its index in the column."""

    def __init__(self, row: int, reason: str) -> None:
        super().__init__(row, reason)
        self.row = row
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class ColumnType:
    """How one column is typed in the landing zone and how its wire values are converted.

    ``wire`` says which conversion applies: ``plain`` (Arrow takes the JSON value as is), ``cast``
    (integer wire value cast to ``arrow``), ``base64`` (bytes), ``decimal`` (base64 unscaled integer),
    ``vsdecimal`` (``{scale, value}`` struct), ``text_decimal`` (decimal sent as a string), ``zoned``
    (ISO-8601 string with offset), ``json`` (nested value written as a JSON string).
    """

    arrow: pa.DataType
    wire: str
    scale: int = 0

    @property
    def toastable(self) -> bool:
        """Whether Postgres can send this column as an unavailable (TOASTed) placeholder."""
        return self.wire in ("plain", "base64", "json") and (
            pa.types.is_string(self.arrow) or pa.types.is_binary(self.arrow)
        )


def decimal_type(precision: int, scale: int) -> pa.DataType:
    """Arrow decimal wide enough for ``precision`` digits."""
    if precision <= 38:
        return pa.decimal128(precision, scale)
    return pa.decimal256(min(precision, 76), scale)


def column_type_from_schema(field: Mapping[str, Any], vs_precision: int, vs_scale: int) -> ColumnType:
    """Map one Connect field schema (as JsonConverter writes it) to a ``ColumnType``."""
    name = field.get("name")
    ftype = field.get("type")
    params = field.get("parameters") or {}
    if name == CONNECT_DECIMAL:
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", 38))
        return ColumnType(decimal_type(max(precision, scale, 1), scale), "decimal", scale)
    if name == VARIABLE_SCALE_DECIMAL:
        return ColumnType(decimal_type(vs_precision, vs_scale), "vsdecimal", vs_scale)
    if name == ZONED_TIMESTAMP:
        return ColumnType(pa.timestamp("us", tz="UTC"), "zoned")
    if name in _INTEGER_TEMPORAL:
        return ColumnType(_INTEGER_TEMPORAL[name], "cast")
    if name in _STRING_SEMANTICS:
        return ColumnType(pa.string(), "plain" if ftype == "string" else "json")
    if ftype in ("struct", "array", "map"):
        return ColumnType(pa.string(), "json")
    if ftype == "bytes":
        return ColumnType(pa.binary(), "base64")
    if isinstance(ftype, str) and ftype in _PRIMITIVES:
        return ColumnType(_PRIMITIVES[ftype], "plain")
    msg = f"unsupported Connect schema type {ftype!r} (name {name!r})"
    raise ValueError(msg)


def column_type_from_value(value: Any) -> ColumnType | None:
    """Infer a column type from one non-null JSON value (schemaless events); ``None`` for null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return ColumnType(pa.bool_(), "plain")
    if isinstance(value, int):
        return ColumnType(pa.int64(), "plain")
    if isinstance(value, float):
        return ColumnType(pa.float64(), "plain")
    if isinstance(value, str):
        return ColumnType(pa.string(), "plain")
    return ColumnType(pa.string(), "json")


def text_decimal_type(precision: int, scale: int) -> ColumnType:
    """A decimal sent as a string (``decimal.handling.mode=string``) declared in config."""
    return ColumnType(decimal_type(precision, scale), "text_decimal", scale)


def to_arrow(values: Sequence[Any], ctype: ColumnType) -> pa.Array:
    """Convert one column of wire values to an Arrow array of ``ctype.arrow``.

    Raises:
        ConversionError: naming the index of the first value that does not convert exactly.
    """
    try:
        return _convert(values, ctype)
    except ConversionError:
        raise
    except (pa.ArrowException, ValueError, TypeError, KeyError, OverflowError, decimal.DecimalException) as exc:
        # The vectorised path does not say which value failed: find it one by one.
        for index, value in enumerate(values):
            try:
                _convert([value], ctype)
            except (pa.ArrowException, ValueError, TypeError, KeyError, OverflowError, decimal.DecimalException) as one:
                raise ConversionError(index, f"value {_preview(value)} is not a valid {ctype.arrow}: {one}") from one
        raise ConversionError(0, f"column does not convert to {ctype.arrow}: {exc}") from exc


def _as_float(value: Any) -> Any:
    """A float column's wire value ready for pyarrow: non-finite strings and ints as floats."""
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    return float(value) if type(value) is int else value


def _check_whole(values: Sequence[Any]) -> None:
    """A fraction in an integer column is an error (pyarrow alone would truncate 2.5 to 2)."""
    for row, value in enumerate(values):
        if isinstance(value, float) and not value.is_integer():
            raise ConversionError(row, f"{value!r} is not a whole number, but the column holds integers")


def _convert(values: Sequence[Any], ctype: ColumnType) -> pa.Array:
    wire = ctype.wire
    if wire == "plain":
        if pa.types.is_floating(ctype.arrow) and any(type(v) in (str, int) for v in values):
            # pyarrow reads Python ints into a double column through int64: beyond it, it would fail.
            values = [_as_float(v) for v in values]
        if pa.types.is_integer(ctype.arrow):
            _check_whole(values)
        return pa.array(values, type=ctype.arrow)
    if wire == "cast":
        storage = pa.int32() if ctype.arrow in (pa.date32(), pa.time32("ms")) else pa.int64()
        return pa.array(values, type=storage).cast(ctype.arrow)
    if wire == "base64":
        return pa.array([None if v is None else _b64(v) for v in values], type=ctype.arrow)
    if wire == "decimal":
        scale = ctype.scale
        return pa.array([None if v is None else _unscaled(v, scale) for v in values], type=ctype.arrow)
    if wire == "vsdecimal":
        return pa.array(
            [None if v is None else _unscaled(v["value"], int(v["scale"])) for v in values], type=ctype.arrow
        )
    if wire == "text_decimal":
        return pa.array([None if v is None else decimal.Decimal(str(v)) for v in values], type=ctype.arrow)
    if wire == "zoned":
        return pa.array(values, type=pa.string()).cast(ctype.arrow)
    if wire == "json":
        return pa.array(
            [None if v is None else (v if isinstance(v, str) else orjson.dumps(v).decode()) for v in values],
            type=pa.string(),
        )
    msg = f"unknown wire conversion {wire!r}"
    raise ValueError(msg)


def _b64(value: Any) -> bytes:
    if not isinstance(value, str):
        msg = f"expected a base64 string, got {type(value).__name__}"
        raise TypeError(msg)
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        msg = f"invalid base64: {exc}"
        raise ValueError(msg) from exc


def _unscaled(value: Any, scale: int) -> decimal.Decimal:
    """Connect's Decimal: big-endian two's-complement unscaled integer, base64 in JSON."""
    if isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
    else:
        raw = _b64(value)
    unscaled = int.from_bytes(raw, "big", signed=True)
    # Built from text so no arithmetic context can round it: exact for any precision.
    return decimal.Decimal(f"{unscaled}E-{scale}")


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def type_name(arrow: pa.DataType) -> str:
    """Stable text form of an Arrow type, as stored in the ledger and shown in errors."""
    return str(arrow)
