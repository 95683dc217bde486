"""Debezium / Kafka Connect field schemas → Arrow column types (``ColumnType``: the type and its wire form).

Every type chosen here is one Fabric's open mirroring (which writes Delta tables) can hold: Delta has no
TIME type, no decimal wider than 38 digits, only microsecond timestamps and no unsigned integers, and
Spark refuses Parquet TIME columns and decimals over 38 digits. So times become text, timestamps
microseconds, wide or unconstrained decimals exact text (unless a decimal type is declared in the
config), and bit strings integers. The README's type table lists each choice and why.

The values of a column are converted by ``arrow_values.to_arrow``, as its ``ColumnType.wire`` says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from connector.config import MirrorSettings

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
_DATES = {"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"}

# Debezium's Timestamp family is the source's local wall-clock time (timestamp without time zone), in
# these units since the epoch. Delta holds microseconds: milliseconds widen exactly, nanoseconds
# (SQL Server datetime2(7)) are truncated to the microsecond, as Fabric's own SQL Server mirroring does.
TIMESTAMP_UNITS: dict[str, str] = {
    "io.debezium.time.Timestamp": "ms",
    "org.apache.kafka.connect.data.Timestamp": "ms",
    "io.debezium.time.MicroTimestamp": "us",
    "io.debezium.time.NanoTimestamp": "ns",
}
TIMESTAMP = pa.timestamp("us")

# Times of day, in these units since midnight. MySQL TIME is a duration (-838:59:59 to 838:59:59) that
# Debezium sends as MicroTime too, so the value may be negative or beyond a day: written as text with a
# sign and as many hour digits as needed, the fraction at the unit's precision ('HH:MM:SS.ffffff').
TIME_DIGITS: dict[str, int] = {
    "io.debezium.time.Time": 3,
    "org.apache.kafka.connect.data.Time": 3,
    "io.debezium.time.MicroTime": 6,
    "io.debezium.time.NanoTime": 9,
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

CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
BITS = "io.debezium.data.Bits"

#: The widest decimal Delta, Spark and Fabric hold.
MAX_DECIMAL_PRECISION = 38
#: Bit strings up to this length fit a signed 64-bit integer.
MAX_BITS_AS_INTEGER = 63


@dataclass(frozen=True)
class TypePolicy:
    """The config's choices where a Debezium type has more than one reasonable landing-zone type.

    Attributes:
        variable_scale: ``None`` writes ``VariableScaleDecimal`` (numeric without precision) as exact text;
            ``(precision, scale)`` declares a decimal for every such column (a value it cannot hold stops
            the table).
        wide_decimals: What a Connect ``Decimal`` of more than 38 digits becomes: ``text`` (exact) or
            ``stop`` (the table stops until a decimal is declared for the column).
    """

    variable_scale: tuple[int, int] | None = None
    wide_decimals: str = "text"


DEFAULT_POLICY = TypePolicy()


class Wire(StrEnum):
    """How a column's values arrive (in JSON, or as Avro gives them) and so how they convert to Arrow."""

    PLAIN = "plain"  # the value is the Arrow value (numbers, booleans, text)
    CAST = "cast"  # an integer cast to the Arrow type: dates (days), microsecond timestamps
    MILLIS = "millis"  # a millisecond timestamp, widened to microseconds
    NANOS = "nanos"  # a nanosecond timestamp, floored to the microsecond
    TIME = "time"  # a time of day in units of 10**-scale s, written as text
    BASE64 = "base64"  # bytes
    DECIMAL = "decimal"  # Connect Decimal: base64 unscaled integer of scale ``scale``
    DECIMAL_TEXT = "decimal_text"  # the same, written as exact text
    VSDECIMAL = "vsdecimal"  # VariableScaleDecimal: a {scale, value} struct
    VSDECIMAL_TEXT = "vsdecimal_text"  # the same, written as exact text
    TEXT_DECIMAL = "text_decimal"  # a decimal sent as a string (decimal.handling.mode=string)
    BITS = "bits"  # a little-endian bit string, written as an integer
    BITS_BYTES = "bits_bytes"  # the same, written as big-endian bytes of ``scale`` bytes (0: unknown)
    ZONED = "zoned"  # an ISO-8601 timestamp with an offset
    JSON = "json"  # a nested value, written as JSON text (strings pass through)
    REFUSED = "refused"  # a type the policy will not write: ``refusal`` says why


@dataclass(frozen=True)
class ColumnType:
    """How one column is typed in the landing zone and how its wire values are converted.

    ``wire`` says which conversion applies (see ``Wire``).

    ``setting`` names the config entry that declared the type, for the message when a value does not fit.

    ``filled`` says whether rows the source held before the column existed may have a value in it that no event
    carried (the column is NOT NULL or has a default), ``None`` when the schema does not say. It is no part of the
    column's type: two schemas differing only there type the column alike.
    """

    arrow: pa.DataType
    wire: Wire
    scale: int = 0
    setting: str | None = None
    refusal: str | None = None
    filled: bool | None = dataclasses.field(default=None, compare=False)

    @property
    def toastable(self) -> bool:
        """Whether Postgres can send this column as an unavailable (TOASTed) placeholder."""
        return self.wire in (Wire.PLAIN, Wire.BASE64, Wire.JSON) and (
            pa.types.is_string(self.arrow) or pa.types.is_binary(self.arrow)
        )


def decimal_type(precision: int, scale: int) -> pa.DataType:
    """Arrow decimal128 of ``precision`` digits; wider ones have no Delta type and are refused.

    Raises:
        ValueError: ``precision`` is over 38.
    """
    if precision > MAX_DECIMAL_PRECISION:
        msg = f"decimal({precision},{scale}) is wider than the {MAX_DECIMAL_PRECISION} digits Delta holds"
        raise ValueError(msg)
    return pa.decimal128(precision, scale)


def type_policy(mirror: MirrorSettings) -> TypePolicy:
    """The type choices of ``mirror``'s settings."""
    return TypePolicy(mirror.variable_scale_type(), mirror.wide_decimals)


def column_type_from_schema(field: Mapping[str, Any], policy: TypePolicy = DEFAULT_POLICY) -> ColumnType:
    """Map one Connect field schema (as JsonConverter writes it) to a ``ColumnType``, with whether it is filled.

    Debezium writes ``optional: false`` for a NOT NULL column and the column's default as ``default`` when it can
    parse it: either means rows that existed before the column was added hold a value in it.
    """
    ctype = _column_type(field, policy)
    if "optional" not in field and "default" not in field:
        return ctype
    return replace(ctype, filled=field.get("optional") is False or field.get("default") is not None)


def _column_type(field: Mapping[str, Any], policy: TypePolicy) -> ColumnType:
    name = field.get("name")
    ftype = field.get("type")
    named = _semantic_type(name, ftype, field.get("parameters") or {}, policy)
    if named is not None:
        return named
    if ftype in ("struct", "array", "map"):
        return ColumnType(pa.string(), Wire.JSON)
    if ftype == "bytes":
        return ColumnType(pa.binary(), Wire.BASE64)
    if isinstance(ftype, str) and ftype in _PRIMITIVES:
        return ColumnType(_PRIMITIVES[ftype], Wire.PLAIN)
    msg = f"unsupported Connect schema type {ftype!r} (name {name!r})"
    raise ValueError(msg)


def _semantic_type(name: Any, ftype: Any, params: Mapping[str, Any], policy: TypePolicy) -> ColumnType | None:
    """The type a Connect or Debezium semantic type name asks for; ``None`` when the name says nothing."""
    if name == CONNECT_DECIMAL:
        return _connect_decimal(params, policy)
    if name == VARIABLE_SCALE_DECIMAL:
        if policy.variable_scale is None:
            return ColumnType(pa.string(), Wire.VSDECIMAL_TEXT)
        precision, scale = policy.variable_scale
        return ColumnType(
            decimal_type(precision, scale), Wire.VSDECIMAL, scale, setting="mirror.variable_scale_decimal"
        )
    if name == ZONED_TIMESTAMP:
        return ColumnType(pa.timestamp("us", tz="UTC"), Wire.ZONED)
    if name in _DATES:
        return ColumnType(pa.date32(), Wire.CAST)
    if name in TIMESTAMP_UNITS:
        unit = TIMESTAMP_UNITS[name]
        return ColumnType(TIMESTAMP, {"ms": Wire.MILLIS, "us": Wire.CAST, "ns": Wire.NANOS}[unit])
    if name in TIME_DIGITS:
        return ColumnType(pa.string(), Wire.TIME, TIME_DIGITS[name])
    if name == BITS and ftype == "bytes":
        return _bits(params)
    if name in _STRING_SEMANTICS:
        return ColumnType(pa.string(), Wire.PLAIN if ftype == "string" else Wire.JSON)
    return None


def _connect_decimal(params: Mapping[str, Any], policy: TypePolicy) -> ColumnType:
    """A Connect ``Decimal``: decimal128 when Delta can hold it, else the wide-decimal policy's type.

    A negative scale (Postgres ``numeric(5,-2)``) is not a Parquet decimal: such values are whole
    numbers, written with scale 0 and the digits the scale added.
    """
    scale = int(params.get("scale", 0))
    precision = int(params.get("connect.decimal.precision", MAX_DECIMAL_PRECISION))
    digits = max(precision - min(scale, 0), scale, 1)
    target_scale = max(scale, 0)
    if digits <= MAX_DECIMAL_PRECISION:
        return ColumnType(pa.decimal128(digits, target_scale), Wire.DECIMAL, scale)
    if policy.wide_decimals == "stop":
        return ColumnType(
            pa.string(),
            Wire.REFUSED,
            scale,
            refusal=f"decimal({precision},{scale}) is wider than the {MAX_DECIMAL_PRECISION} digits Delta and Fabric "
            "hold and mirror.wide_decimals is 'stop': declare the column in mirror.decimal_columns "
            "(precision <= 38), or set mirror.wide_decimals to 'text' to write its exact text",
        )
    return ColumnType(pa.string(), Wire.DECIMAL_TEXT, scale)


def _bits(params: Mapping[str, Any]) -> ColumnType:
    """``io.debezium.data.Bits``: ``length`` bits, sent as little-endian bytes.

    Up to 63 bits, the bit string's value as an integer (BIT(12) b'101000000001' is 2561); longer or of
    unknown length, its big-endian bytes, so the first byte holds the most significant bits as in the
    source's own notation.
    """
    try:
        length = int(params["length"])
    except (KeyError, TypeError, ValueError):
        length = 0
    if 0 < length <= MAX_BITS_AS_INTEGER:
        return ColumnType(pa.int64(), Wire.BITS)
    width = (length + 7) // 8 if 0 < length < 2**31 - 1 else 0
    return ColumnType(pa.binary(), Wire.BITS_BYTES, width)


def declared_decimal(schema_type: ColumnType | None, precision: int, scale: int, setting: str) -> ColumnType:
    """The type of a column declared in ``mirror.decimal_columns``, converting from its wire form.

    A Connect ``Decimal`` (of any width) or a ``VariableScaleDecimal`` is rescaled exactly into
    decimal(precision, scale); anything else is a decimal sent as text (``decimal.handling.mode=string``).
    """
    arrow = decimal_type(precision, scale)
    if schema_type is not None and schema_type.wire in (Wire.DECIMAL, Wire.DECIMAL_TEXT, Wire.REFUSED):
        return ColumnType(arrow, Wire.DECIMAL, schema_type.scale, setting=setting)
    if schema_type is not None and schema_type.wire in (Wire.VSDECIMAL, Wire.VSDECIMAL_TEXT):
        return ColumnType(arrow, Wire.VSDECIMAL, scale, setting=setting)
    return ColumnType(arrow, Wire.TEXT_DECIMAL, scale, setting=setting)


def type_name(arrow: pa.DataType) -> str:
    """Stable text form of an Arrow type, as stored in the ledger and shown in errors."""
    return str(arrow)
