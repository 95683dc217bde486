"""Debezium / Kafka Connect field schemas → Arrow column types, and JSON values → Arrow arrays.

Every type chosen here is one Fabric's open mirroring (which writes Delta tables) can hold: Delta has no
TIME type, no decimal wider than 38 digits, only microsecond timestamps and no unsigned integers, and
Spark refuses Parquet TIME columns and decimals over 38 digits. So times become text, timestamps
microseconds, wide or unconstrained decimals exact text (unless a decimal type is declared in the
config), and bit strings integers. The README's type table lists each choice and why.

Conversion is column-wise: a whole column of raw JSON values becomes one Arrow array, with Arrow's
vectorised casts wherever the wire value is already a number (dates, timestamps). Values that
need Python work (base64 decimals and bytes, JSON strings, times of day) are converted in one list
comprehension.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import decimal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from connector.errors import ConnectorError

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
_NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}

CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
BITS = "io.debezium.data.Bits"

#: The widest decimal Delta, Spark and Fabric hold.
MAX_DECIMAL_PRECISION = 38
#: Bit strings up to this length fit a signed 64-bit integer.
MAX_BITS_AS_INTEGER = 63
# More fractional digits than a microsecond, in an ISO-8601 time: truncated.
_SUB_MICROSECONDS = r"(\.\d{6})\d+"


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


class ConversionError(ConnectorError, ValueError):
    """A value could not be converted; ``row`` is its index in the column (still a ``ValueError``, as it was)."""

    def __init__(self, row: int, reason: str) -> None:
        super().__init__(row, reason)
        self.row = row
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


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
        hint = (
            f" (the type comes from {ctype.setting}: widen it, or remove it to write the exact text)"
            if ctype.setting
            else ""
        )
        for index, value in enumerate(values):
            try:
                _convert([value], ctype)
            except (pa.ArrowException, ValueError, TypeError, KeyError, OverflowError, decimal.DecimalException) as one:
                raise ConversionError(
                    index, f"value {_preview(value)} is not a valid {ctype.arrow}: {one}{hint}"
                ) from one
        raise ConversionError(0, f"column does not convert to {ctype.arrow}: {exc}{hint}") from exc


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
    if wire == Wire.PLAIN:
        return _plain(values, ctype)
    if wire == Wire.CAST:
        storage = pa.int32() if ctype.arrow == pa.date32() else pa.int64()
        return pa.array(values, type=storage).cast(ctype.arrow)
    if wire == Wire.MILLIS:
        return pa.array(values, type=pa.int64()).cast(pa.timestamp("ms")).cast(ctype.arrow)
    if wire == Wire.NANOS:
        return floor_nanos_to_micros(pa.array(values, type=pa.int64()))
    if wire == Wire.TIME:
        return pa.array([None if v is None else time_text(v, ctype.scale) for v in values], type=pa.string())
    if wire == Wire.BASE64:
        return pa.array([None if v is None else _b64(v) for v in values], type=ctype.arrow)
    if wire in _DECIMAL_WIRES:
        return _decimals(values, ctype)
    if wire in (Wire.BITS, Wire.BITS_BYTES):
        return _bit_strings(values, ctype)
    if wire == Wire.ZONED:
        return _zoned(values, ctype)
    if wire == Wire.REFUSED:
        raise ConversionError(0, ctype.refusal or f"a column of type {ctype.arrow} is refused")
    if wire == Wire.JSON:
        return pa.array(
            [None if v is None else (v if isinstance(v, str) else orjson.dumps(v).decode()) for v in values],
            type=pa.string(),
        )
    msg = f"unknown wire conversion {wire!r}"
    raise ValueError(msg)


def _plain(values: Sequence[Any], ctype: ColumnType) -> pa.Array:
    if pa.types.is_floating(ctype.arrow) and any(type(v) in (str, int) for v in values):
        # pyarrow reads Python ints into a double column through int64: beyond it, it would fail.
        values = [_as_float(v) for v in values]
    if pa.types.is_integer(ctype.arrow):
        _check_whole(values)
    return pa.array(values, type=ctype.arrow)


_DECIMAL_WIRES = frozenset({Wire.DECIMAL, Wire.DECIMAL_TEXT, Wire.VSDECIMAL, Wire.VSDECIMAL_TEXT, Wire.TEXT_DECIMAL})


def _decimals(values: Sequence[Any], ctype: ColumnType) -> pa.Array:
    """Connect decimals (unscaled bytes), variable-scale decimals and decimal text, as decimals or exact text."""
    wire, scale = ctype.wire, ctype.scale
    if wire == Wire.DECIMAL:
        return pa.array([None if v is None else _unscaled(v, scale) for v in values], type=ctype.arrow)
    if wire == Wire.DECIMAL_TEXT:
        return pa.array([None if v is None else plain_text(_unscaled(v, scale)) for v in values], type=pa.string())
    if wire == Wire.VSDECIMAL:
        return pa.array(
            [None if v is None else _unscaled(v["value"], int(v["scale"])) for v in values], type=ctype.arrow
        )
    if wire == Wire.VSDECIMAL_TEXT:
        return pa.array(
            [None if v is None else plain_text(_unscaled(v["value"], int(v["scale"]))) for v in values],
            type=pa.string(),
        )
    return pa.array([None if v is None else _finite(decimal.Decimal(str(v))) for v in values], type=ctype.arrow)


def _bit_strings(values: Sequence[Any], ctype: ColumnType) -> pa.Array:
    if ctype.wire == Wire.BITS:
        return pa.array([None if v is None else _bits_integer(v) for v in values], type=pa.int64())
    return pa.array([None if v is None else _bits_big_endian(v, ctype.scale) for v in values], type=pa.binary())


def _zoned(values: Sequence[Any], ctype: ColumnType) -> pa.Array:
    text = pa.array(values, type=pa.string())
    try:
        return text.cast(ctype.arrow)
    except pa.ArrowInvalid:
        # More than six fractional digits (SQL Server datetimeoffset(7)): truncated to the microsecond.
        return pc.replace_substring_regex(text, _SUB_MICROSECONDS, r"\1").cast(ctype.arrow)


def floor_nanos_to_micros(nanos: pa.Array) -> pa.Array:
    """Nanoseconds since the epoch → microsecond timestamps, truncated toward the earlier microsecond.

    Floor, not round: a value keeps the microsecond it falls in (also before 1970), and never moves into
    the next second, minute or day.
    """
    valid = pc.is_valid(nanos).to_numpy(zero_copy_only=False)
    raw = pc.fill_null(nanos, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    micros = np.floor_divide(raw, 1000)
    return pa.array(micros, type=pa.int64(), mask=~valid).cast(TIMESTAMP)


def time_text(value: Any, digits: int) -> str:
    """A time of day (or MySQL duration) in units of ``10**-digits`` s as ``[-]HH:MM:SS.f…``.

    Exact, fixed width within a day (so text order is time order), hours beyond 24 and a sign allowed.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            msg = f"expected an integer time of day, got {type(value).__name__}"
            raise TypeError(msg)
    sign = "-" if value < 0 else ""
    seconds, fraction = divmod(abs(value), 10**digits)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return f"{sign}{hours:02d}:{minute:02d}:{second:02d}.{fraction:0{digits}d}"


def plain_text(value: decimal.Decimal) -> str:
    """A decimal's exact text in plain notation, keeping its scale: ``1E-20`` → ``0.00000000000000000001``."""
    return f"{value:f}"


def _finite(value: decimal.Decimal) -> decimal.Decimal:
    if not value.is_finite():
        msg = f"{value} has no decimal value"
        raise ValueError(msg)
    return value


def _bits_integer(value: Any) -> int:
    """Debezium's little-endian bit string as the integer it spells."""
    raw = value if isinstance(value, (bytes, bytearray)) else _b64(value)
    number = int.from_bytes(raw, "little")
    if number.bit_length() > MAX_BITS_AS_INTEGER:
        msg = f"{len(raw)} bytes hold more than {MAX_BITS_AS_INTEGER} bits"
        raise ValueError(msg)
    return number


def _bits_big_endian(value: Any, width: int) -> bytes:
    """Debezium's little-endian bit string as big-endian bytes (``width`` bytes, when known)."""
    raw = bytes(value) if isinstance(value, (bytes, bytearray)) else _b64(value)
    number = int.from_bytes(raw, "little")
    size = max(width, (number.bit_length() + 7) // 8, 1)
    return number.to_bytes(size, "big")


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
    return decimal.Decimal(f"{unscaled}E{-scale}")


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def type_name(arrow: pa.DataType) -> str:
    """Stable text form of an Arrow type, as stored in the ledger and shown in errors."""
    return str(arrow)
