"""Debezium / Kafka Connect wire values → Arrow arrays, a column at a time (``to_arrow``).

Arrow's vectorised casts run wherever the wire value is already a number (dates, timestamps). Values that need
Python work (base64 decimals and bytes, JSON strings, times of day) are converted in one list comprehension. How
each column converts is its ``types.ColumnType`` (``wire``).
"""

from __future__ import annotations

import base64
import binascii
import decimal
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from connector.debezium.types import MAX_BITS_AS_INTEGER, TIMESTAMP, ColumnType, Wire
from connector.errors import ConnectorError

_NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
# More fractional digits than a microsecond, in an ISO-8601 time: truncated.
_SUB_MICROSECONDS = r"(\.\d{6})\d+"


class ConversionError(ConnectorError, ValueError):
    """A value could not be converted; ``row`` is its index in the column (still a ``ValueError``, as it was)."""

    def __init__(self, row: int, reason: str) -> None:
        super().__init__(row, reason)
        self.row = row
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


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
