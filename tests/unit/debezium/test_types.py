"""Connect / Debezium semantic types → Arrow types, converted exactly."""

from __future__ import annotations

import datetime as dt
import decimal
import math

import pyarrow as pa
import pytest

from connector.debezium.arrow_values import ConversionError, to_arrow
from connector.debezium.schemaless import ValueKind, inferred_type, kind_of_value
from connector.debezium.types import ColumnType, TypePolicy, column_type_from_schema, declared_decimal
from tests.support.debezium import encode_decimal

UTC = dt.UTC


def ctype(ftype: str, name: str | None = None, policy: TypePolicy | None = None, **params: str) -> ColumnType:
    schema: dict[str, object] = {"type": ftype, "field": "c"}
    if name:
        schema["name"] = name
    if params:
        schema["parameters"] = params
    return column_type_from_schema(schema, policy or TypePolicy())


@pytest.mark.parametrize(
    ("ftype", "name", "wire", "arrow", "expected"),
    [
        ("int32", "io.debezium.time.Date", 19000, pa.date32(), dt.date(2022, 1, 8)),
        ("int32", "org.apache.kafka.connect.data.Date", 1, pa.date32(), dt.date(1970, 1, 2)),
        # Delta has no TIME type: times of day are exact text at the unit's precision.
        ("int32", "io.debezium.time.Time", 3_723_004, pa.string(), "01:02:03.004"),
        ("int32", "org.apache.kafka.connect.data.Time", 1000, pa.string(), "00:00:01.000"),
        ("int64", "io.debezium.time.MicroTime", 3_723_000_005, pa.string(), "01:02:03.000005"),
        ("int64", "io.debezium.time.NanoTime", 3_723_000_005_001, pa.string(), "01:02:03.000005001"),
        # MySQL TIME is a duration: Debezium sends MicroTime outside the day (MySQL connector docs, TIME).
        (
            "int64",
            "io.debezium.time.MicroTime",
            838 * 3600_000_000 + 59 * 60_000_000 + 59_000_000,
            pa.string(),
            "838:59:59.000000",
        ),
        ("int64", "io.debezium.time.MicroTime", -1_000_000, pa.string(), "-00:00:01.000000"),
        # Delta holds microsecond timestamps: milliseconds widen exactly.
        (
            "int64",
            "io.debezium.time.Timestamp",
            1_700_000_000_123,
            pa.timestamp("us"),
            dt.datetime(2023, 11, 14, 22, 13, 20, 123000),
        ),
        ("int64", "org.apache.kafka.connect.data.Timestamp", 0, pa.timestamp("us"), dt.datetime(1970, 1, 1)),
        ("int32", "io.debezium.time.Year", 2024, pa.int32(), 2024),
        ("int64", "io.debezium.time.MicroDuration", -90_061_000_001, pa.int64(), -90_061_000_001),
        ("string", "io.debezium.time.Interval", "P1Y2M3DT4H5M6.78S", pa.string(), "P1Y2M3DT4H5M6.78S"),
        ("string", "io.debezium.time.ZonedTime", "12:30:00.5Z", pa.string(), "12:30:00.5Z"),
        ("string", "io.debezium.data.EnumSet", "a,c", pa.string(), "a,c"),
        ("boolean", None, False, pa.bool_(), False),  # BIT(1) is a Connect boolean
        ("bytes", "io.debezium.data.Bits", "AQo=", pa.binary(), b"\x0a\x01"),  # no length: big-endian bytes
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


def test_nano_timestamp_is_truncated_to_the_microsecond() -> None:
    """SQL Server datetime2(7) (NanoTimestamp): Delta holds microseconds; the extra digits are dropped, never
    rounded into the next microsecond, also before 1970."""
    column = ctype("int64", "io.debezium.time.NanoTimestamp")
    array = to_arrow([1_700_000_000_123_456_789, -1, None], column)
    assert array.type == pa.timestamp("us")
    assert array.cast(pa.int64()).to_pylist() == [1_700_000_000_123_456, -1, None]


def test_zoned_timestamp_with_seven_fractional_digits_is_truncated() -> None:
    """SQL Server datetimeoffset(7) arrives as ZonedTimestamp text with 7 digits."""
    column = ctype("string", "io.debezium.time.ZonedTimestamp")
    array = to_arrow(["2024-01-02T03:04:05.1234567Z", "2024-01-02T03:04:05.5+01:00", None], column)
    assert array.to_pylist() == [
        dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        dt.datetime(2024, 1, 2, 2, 4, 5, 500000, tzinfo=UTC),
        None,
    ]


@pytest.mark.parametrize(
    ("length", "wire", "arrow", "expected"),
    [
        ("12", "AQo=", pa.int64(), 0x0A01),  # MySQL BIT(12) b'101000000001', little-endian 01 0A
        ("3", "BQ==", pa.int64(), 5),
        ("63", "/////////38=", pa.int64(), 2**63 - 1),
        ("64", "AQAAAAAAAIA=", pa.binary(), bytes.fromhex("8000000000000001")),  # big-endian, 8 bytes
        ("72", "AQ==", pa.binary(), bytes.fromhex("000000000000000001")),  # sized by the length
        ("2147483647", "AQo=", pa.binary(), bytes.fromhex("0a01")),  # varbit without a length
    ],
)
def test_bits_are_integers_or_big_endian_bytes(length: str, wire: str, arrow: pa.DataType, expected: object) -> None:
    """Debezium sends io.debezium.data.Bits little-endian (Postgres and MySQL connector docs, BIT(n>1))."""
    column = ctype("bytes", "io.debezium.data.Bits", length=length)
    assert column.arrow == arrow
    assert to_arrow([wire, None], column).to_pylist() == [expected, None]


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


def test_decimal_wider_than_38_digits_is_exact_text_by_default() -> None:
    """MySQL decimal(65,30): Delta and Fabric hold 38 digits at most; never decimal256."""
    column = ctype("bytes", "org.apache.kafka.connect.data.Decimal", scale="30", **{"connect.decimal.precision": "65"})
    assert column.arrow == pa.string()
    value = "12345678901234567890123456789012345.123456789012345678901234567890"
    small = "-0.100000000000000000000000000000"
    assert to_arrow([encode_decimal(value, 30), encode_decimal(small, 30), None], column).to_pylist() == [
        value,
        small,
        None,
    ]


def test_decimal_wider_than_38_digits_can_stop_the_table_instead() -> None:
    column = ctype(
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        TypePolicy(wide_decimals="stop"),
        scale="30",
        **{"connect.decimal.precision": "65"},
    )
    assert column.refusal is not None and "mirror.wide_decimals" in column.refusal
    with pytest.raises(ConversionError):
        to_arrow([encode_decimal("1", 30)], column)
    # Declaring the column gives it a decimal type again, exact or an error naming the setting.
    declared = declared_decimal(column, 38, 30, "mirror.decimal_columns['public.t.c'] ('38,30')")
    assert to_arrow([encode_decimal("1.5", 30)], declared).to_pylist() == [decimal.Decimal("1.5")]
    with pytest.raises(ConversionError) as info:
        to_arrow([encode_decimal("1234567890.5", 30)], declared)
    assert "mirror.decimal_columns['public.t.c']" in info.value.reason


def test_unsigned_bigint_precise_is_exact() -> None:
    """MySQL BIGINT UNSIGNED with bigint.unsigned.handling.mode=precise: Connect Decimal(20,0)."""
    column = ctype("bytes", "org.apache.kafka.connect.data.Decimal", scale="0", **{"connect.decimal.precision": "20"})
    assert column.arrow == pa.decimal128(20, 0)
    top = "18446744073709551615"
    assert to_arrow([encode_decimal(top, 0)], column).to_pylist() == [decimal.Decimal(top)]


def test_a_negative_scale_decimal_is_a_whole_number_decimal() -> None:
    """Postgres numeric(5,-2) holds multiples of 100 up to 7 digits; Parquet decimals have no negative scale."""
    column = ctype("bytes", "org.apache.kafka.connect.data.Decimal", scale="-2", **{"connect.decimal.precision": "5"})
    assert column.arrow == pa.decimal128(7, 0)
    assert to_arrow([encode_decimal("1234500", -2)], column).to_pylist() == [decimal.Decimal("1234500")]


@pytest.mark.parametrize(
    ("value", "scale", "text"),
    [
        ("0.14285714285714285714", 20, "0.14285714285714285714"),  # 1/7 in Postgres numeric
        ("1E-20", 20, "0.00000000000000000001"),
        ("1.50", 2, "1.50"),  # the source's scale is kept
        ("-123456789012345678901234567890123456789012.5", 1, "-123456789012345678901234567890123456789012.5"),
        ("0", 0, "0"),
    ],
)
def test_variable_scale_decimal_is_exact_text_by_default(value: str, scale: int, text: str) -> None:
    """Postgres numeric without precision: every value mirrors exactly, whatever its scale or size."""
    column = ctype("struct", "io.debezium.data.VariableScaleDecimal")
    assert column.arrow == pa.string()
    assert to_arrow([{"scale": scale, "value": encode_decimal(value, scale)}, None], column).to_pylist() == [text, None]


def test_variable_scale_decimal_declared_is_exact_or_an_error_naming_the_setting() -> None:
    column = ctype("struct", "io.debezium.data.VariableScaleDecimal", TypePolicy(variable_scale=(38, 10)))
    assert column.arrow == pa.decimal128(38, 10)
    good = {"scale": 3, "value": encode_decimal("123456.789", 3)}
    assert to_arrow([good], column).to_pylist() == [decimal.Decimal("123456.789")]
    too_fine = {"scale": 12, "value": encode_decimal("1.000000000001", 12)}
    with pytest.raises(ConversionError) as info:
        to_arrow([good, too_fine], column)
    assert info.value.row == 1
    assert "mirror.variable_scale_decimal" in info.value.reason


def test_decimal_sent_as_text_when_declared() -> None:
    column = declared_decimal(None, 12, 2, "mirror.decimal_columns")
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
    def of(*values: object) -> ColumnType | None:
        return inferred_type({kind_of_value(v) for v in values if v is not None})

    assert of(1, 2) == ColumnType(pa.int64(), "plain")
    assert of(True) == ColumnType(pa.bool_(), "plain")
    assert of(1.5) == ColumnType(pa.float64(), "plain")
    assert of(1, 1.5) == ColumnType(pa.float64(), "plain")  # ints and floats widen to double
    assert of("a") == ColumnType(pa.string(), "plain")
    assert of({"a": 1}) == ColumnType(pa.string(), "json")
    assert of(1, "a") == ColumnType(pa.string(), "json")  # mixed kinds: JSON text
    assert of(True, 1) == ColumnType(pa.string(), "json")  # a bool is not an int here
    assert of(None) is None
    assert kind_of_value(False) is ValueKind.BOOL


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
    ctype = column_type_from_schema({"field": "x", "type": ftype})
    values = to_arrow([1.5, "NaN", "Infinity", "-Infinity", None], ctype).to_pylist()
    assert values[0] == 1.5 and math.isnan(values[1])
    assert values[2:] == [math.inf, -math.inf, None]
    with pytest.raises(ConversionError) as caught:
        to_arrow([1.0, "nan"], ctype)
    assert caught.value.row == 1
