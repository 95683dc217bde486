"""Connect / Debezium semantic types → Arrow types, converted exactly."""

from __future__ import annotations

import datetime as dt
import decimal
import math

import pyarrow as pa
import pytest

from connector.debezium.types import (
    ColumnType,
    ConversionError,
    column_type_from_schema,
    column_type_from_value,
    text_decimal_type,
    to_arrow,
)
from tests.support.debezium import encode_decimal

UTC = dt.UTC


def ctype(ftype: str, name: str | None = None, **params: str) -> ColumnType:
    schema: dict[str, object] = {"type": ftype, "field": "c"}
    if name:
        schema["name"] = name
    if params:
        schema["parameters"] = params
    return column_type_from_schema(schema, 38, 10)


@pytest.mark.parametrize(
    ("ftype", "name", "wire", "arrow", "expected"),
    [
        ("int32", "io.debezium.time.Date", 19000, pa.date32(), dt.date(2022, 1, 8)),
        ("int32", "org.apache.kafka.connect.data.Date", 1, pa.date32(), dt.date(1970, 1, 2)),
        ("int32", "io.debezium.time.Time", 3_723_004, pa.time32("ms"), dt.time(1, 2, 3, 4000)),
        ("int32", "org.apache.kafka.connect.data.Time", 1000, pa.time32("ms"), dt.time(0, 0, 1)),
        ("int64", "io.debezium.time.MicroTime", 3_723_000_005, pa.time64("us"), dt.time(1, 2, 3, 5)),
        ("int64", "io.debezium.time.NanoTime", 3_723_000_005_000, pa.time64("ns"), dt.time(1, 2, 3, 5)),
        (
            "int64",
            "io.debezium.time.Timestamp",
            1_700_000_000_123,
            pa.timestamp("ms"),
            dt.datetime(2023, 11, 14, 22, 13, 20, 123000),
        ),
        ("int64", "org.apache.kafka.connect.data.Timestamp", 0, pa.timestamp("ms"), dt.datetime(1970, 1, 1)),
        (
            "int64",
            "io.debezium.time.MicroTimestamp",
            1_700_000_000_123_456,
            pa.timestamp("us"),
            dt.datetime(2023, 11, 14, 22, 13, 20, 123456),
        ),
        (
            "string",
            "io.debezium.time.ZonedTimestamp",
            "2023-11-14T22:13:20.123456Z",
            pa.timestamp("us", tz="UTC"),
            dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC),
        ),
        ("string", "io.debezium.data.Json", '{"a": 1}', pa.string(), '{"a": 1}'),
        (
            "string",
            "io.debezium.data.Uuid",
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
            pa.string(),
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
        ),
        ("string", "io.debezium.data.Enum", "happy", pa.string(), "happy"),
        ("string", "io.debezium.data.Xml", "<a/>", pa.string(), "<a/>"),
        ("bytes", None, "AAEC/w==", pa.binary(), b"\x00\x01\x02\xff"),
        ("boolean", None, True, pa.bool_(), True),
        ("int16", None, -5, pa.int16(), -5),
        ("int64", None, 2**62, pa.int64(), 2**62),
        ("float", None, 1.5, pa.float32(), 1.5),
        ("double", None, 0.1, pa.float64(), 0.1),
    ],
)
def test_semantic_types(ftype: str, name: str | None, wire: object, arrow: pa.DataType, expected: object) -> None:
    column = ctype(ftype, name)
    assert column.arrow == arrow
    assert to_arrow([wire, None], column).to_pylist() == [expected, None]


def test_nano_timestamp_keeps_nanoseconds() -> None:
    column = ctype("int64", "io.debezium.time.NanoTimestamp")
    array = to_arrow([1_700_000_000_123_456_789], column)
    assert array.type == pa.timestamp("ns")
    assert array.cast(pa.int64()).to_pylist() == [1_700_000_000_123_456_789]


def test_zoned_timestamp_keeps_utc_meaning_of_offsets() -> None:
    column = ctype("string", "io.debezium.time.ZonedTimestamp")
    array = to_arrow(["2023-01-01T12:00:00+02:00"], column)
    assert array.to_pylist() == [dt.datetime(2023, 1, 1, 10, 0, tzinfo=UTC)]


@pytest.mark.parametrize(
    ("value", "precision", "scale"),
    [
        ("123.45", 5, 2),
        ("-0.01", 12, 2),
        ("-99999999.99", 10, 2),
        ("0", 3, 0),
        ("12345678901234567890123456789012345678", 38, 0),
    ],
)
def test_connect_decimal_is_exact(value: str, precision: int, scale: int) -> None:
    column = ctype(
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        scale=str(scale),
        **{"connect.decimal.precision": str(precision)},
    )
    assert column.arrow == pa.decimal128(precision, scale)
    assert to_arrow([encode_decimal(value, scale)], column).to_pylist() == [decimal.Decimal(value)]


def test_decimal_wider_than_38_digits_uses_decimal256() -> None:
    column = ctype("bytes", "org.apache.kafka.connect.data.Decimal", scale="2", **{"connect.decimal.precision": "45"})
    assert column.arrow == pa.decimal256(45, 2)
    value = "1234567890123456789012345678901234567890123.21"
    assert to_arrow([encode_decimal(value, 2)], column).to_pylist() == [decimal.Decimal(value)]


def test_variable_scale_decimal_exact_or_error() -> None:
    column = ctype("struct", "io.debezium.data.VariableScaleDecimal")
    assert column.arrow == pa.decimal128(38, 10)
    good = {"scale": 3, "value": encode_decimal("123456.789", 3)}
    assert to_arrow([good], column).to_pylist() == [decimal.Decimal("123456.789")]
    too_fine = {"scale": 12, "value": encode_decimal("1.000000000001", 12)}
    with pytest.raises(ConversionError) as info:
        to_arrow([good, too_fine], column)
    assert info.value.row == 1


def test_decimal_sent_as_text_when_declared() -> None:
    column = text_decimal_type(12, 2)
    assert to_arrow(["1.10", None, "-3"], column).to_pylist() == [
        decimal.Decimal("1.10"),
        None,
        decimal.Decimal("-3.00"),
    ]
    with pytest.raises(ConversionError):
        to_arrow(["1.001"], column)  # would round: refused


def test_nested_values_become_json_text() -> None:
    column = ctype("array")
    assert to_arrow([[1, 2], None], column).to_pylist() == ["[1,2]", None]
    geometry = ctype("struct", "io.debezium.data.geometry.Point")
    assert to_arrow([{"x": 1.0, "y": 2.0}], geometry).to_pylist() == ['{"x":1.0,"y":2.0}']


def test_bad_value_names_its_row() -> None:
    column = ctype("bytes")
    with pytest.raises(ConversionError) as info:
        to_arrow(["AAEC", "not base64!"], column)
    assert info.value.row == 1


def test_schemaless_inference() -> None:
    assert column_type_from_value(1) == ColumnType(pa.int64(), "plain")
    assert column_type_from_value(True) == ColumnType(pa.bool_(), "plain")
    assert column_type_from_value(1.5) == ColumnType(pa.float64(), "plain")
    assert column_type_from_value({"a": 1}) == ColumnType(pa.string(), "json")
    assert column_type_from_value(None) is None


def test_a_fraction_in_an_integer_column_is_an_error_not_truncated() -> None:
    """pyarrow alone would write 2.5 into an int64 column as 2; whole floats stay exact and pass."""
    column = ColumnType(pa.int64(), "plain")
    assert to_arrow([1, 2.0, None], column).to_pylist() == [1, 2, None]
    with pytest.raises(ConversionError) as caught:
        to_arrow([1, 2.5], column)
    assert caught.value.row == 1 and "2.5" in caught.value.reason


def test_ints_beyond_int64_in_a_double_column_convert() -> None:
    """JSON ints up to 2**64 parse as Python ints; pyarrow alone would refuse them for a double column."""
    column = ColumnType(pa.float64(), "plain")
    assert to_arrow([10**19, 1, 2.5, None], column).to_pylist() == [1e19, 1.0, 2.5, None]


@pytest.mark.parametrize("ftype", ["double", "float"])
def test_non_finite_floats_as_json_converter_writes_them(ftype: str) -> None:
    """Postgres double NaN/Infinity arrive as the strings Jackson writes; other strings stay errors."""
    ctype = column_type_from_schema({"field": "x", "type": ftype}, 38, 10)
    values = to_arrow([1.5, "NaN", "Infinity", "-Infinity", None], ctype).to_pylist()
    assert values[0] == 1.5 and math.isnan(values[1])
    assert values[2:] == [math.inf, -math.inf, None]
    with pytest.raises(ConversionError) as caught:
        to_arrow([1.0, "nan"], ctype)
    assert caught.value.row == 1
