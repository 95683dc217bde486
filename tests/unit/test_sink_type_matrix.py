"""Every Debezium semantic type of the Postgres, MySQL and SQL Server connectors, read back by Delta and Spark.

Fabric's open mirroring turns the landing zone into Delta tables; a type Delta or Spark cannot read stops
the table there, long after we wrote it. So each type goes through the whole path, as JsonConverter and
as Confluent's Avro converter would write it, and the files are read back twice: applied to real Delta
tables by the Delta oracle (delta-rs, ``connector.readback.delta_oracle``) and read by Spark's own Parquet
reader (a real local SparkSession). Every value must come back exactly.

JSON events go through ``convert`` (kcat dumps → landing zone, the columnar lane and the row path). Avro
values are binary, which a kcat ``-J`` dump cannot carry, so the Avro twins go through ``MirrorSink``
(the sink ``convert`` and ``run`` share) with the Avro decoder and the schema registry test double.

The wire shapes come from Debezium's connector documentation, "Data type mappings" sections (3.x):
  PG  https://debezium.io/documentation/reference/stable/connectors/postgresql.html#postgresql-data-types
  MY  https://debezium.io/documentation/reference/stable/connectors/mysql.html#mysql-data-types
  MS  https://debezium.io/documentation/reference/stable/connectors/sqlserver.html#sqlserver-data-types
Each column below names its source type and the section it follows.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from connector.commands.convert import convert
from connector.config import MirrorSettings, SchemaRegistrySettings, SourceSettings, load_settings
from connector.debezium import schema_registry
from connector.events import KafkaRecord
from connector.kcat import kcat_line
from connector.readback.delta_oracle import apply_to_delta
from connector.readback.fabric_types import fabric_type_problem
from connector.sink import MirrorSink
from connector.storage import LocalStorage
from tests.support.avro_connect import connect_to_avro_datum, connect_to_avro_schema, frame
from tests.support.debezium import Topic, decimal_field, encode_decimal, field
from tests.support.registry_double import RegistryDouble

pytestmark = pytest.mark.spark

D = decimal.Decimal
UTC = dt.UTC


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def semantic(name: str, ftype: str, semantic_name: str, **parameters: str) -> dict[str, Any]:
    out = field(name, ftype, semantic_name)
    out["version"] = 1
    if parameters:
        out["parameters"] = parameters
    return out


def vsd(name: str) -> dict[str, Any]:
    return {
        **semantic(name, "struct", "io.debezium.data.VariableScaleDecimal"),
        "fields": [field("scale", "int32", optional=False), field("value", "bytes", optional=False)],
    }


def geometry(name: str, kind: str) -> dict[str, Any]:
    return {
        **semantic(name, "struct", f"io.debezium.data.geometry.{kind}"),
        "fields": [field("wkb", "bytes", optional=False), field("srid", "int32")],
    }


def vs_value(text: str) -> dict[str, Any]:
    scale = max(0, -D(text).as_tuple().exponent)  # type: ignore[operator]
    return {"scale": scale, "value": encode_decimal(text, scale)}


POINT_WKB = bytes.fromhex("0101000000000000000000f03f0000000000000040")  # POINT(1 2)

# (Connect field, [wire value of row 1, row 2], [value read back for row 1, row 2]); row 3 is all NULL.
Column = tuple[dict[str, Any], list[Any], list[Any]]

POSTGRES: list[Column] = [
    # PG "Basic types": BOOLEAN and BIT(1) are Connect booleans.
    (field("c_bool", "boolean"), [True, False], [True, False]),
    (field("c_bit1", "boolean"), [True, False], [True, False]),
    # PG "Basic types": BIT(>1) → io.debezium.data.Bits, `length` bits, little-endian bytes.
    (semantic("c_bit12", "bytes", "io.debezium.data.Bits", length="12"), [b64(b"\x01\x0a"), b64(b"\x00\x08")],
     [0x0A01, 0x800]),
    # PG: BIT VARYING without a length → `length` 2^31-1, bytes sized by the content.
    (semantic("c_varbit", "bytes", "io.debezium.data.Bits", length="2147483647"), [b64(b"\x01\x0a"), b64(b"\x05")],
     [b"\x0a\x01", b"\x05"]),
    (field("c_smallint", "int16"), [-32768, 32767], [-32768, 32767]),
    (field("c_int", "int32"), [-(2**31), 2**31 - 1], [-(2**31), 2**31 - 1]),
    (field("c_bigint", "int64"), [-(2**63), 2**63 - 1], [-(2**63), 2**63 - 1]),
    (field("c_real", "float"), [1.5, -0.25], [1.5, -0.25]),
    (field("c_double", "double"), [-2.25e-300, 1e300], [-2.25e-300, 1e300]),
    (field("c_text", "string"), ["très bien ✓", ""], ["très bien ✓", ""]),
    (field("c_bytea", "bytes"), [b64(b"\x00\xff\x10"), b64(b"")], [b"\x00\xff\x10", b""]),
    # PG "Decimal types", decimal.handling.mode=precise: NUMERIC(M,D) → Connect Decimal; NUMERIC without
    # precision → io.debezium.data.VariableScaleDecimal {scale, value}.
    (decimal_field("c_numeric", 12, 2), [encode_decimal("-1234567890.12", 2), encode_decimal("0.01", 2)],
     [D("-1234567890.12"), D("0.01")]),
    (vsd("c_numeric_free"), [vs_value("0.14285714285714285714"), vs_value("1E-20")],
     ["0.14285714285714285714", "0.00000000000000000001"]),
    (vsd("c_numeric_big"), [vs_value("-123456789012345678901234567890123456789012.5"), vs_value("1.50")],
     ["-123456789012345678901234567890123456789012.5", "1.50"]),
    # PG "Decimal types": MONEY → Connect Decimal with scale money.fraction.digits (2), no precision.
    ({**semantic("c_money", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2")},
     [encode_decimal("-92233720368547758.08", 2), encode_decimal("1.00", 2)], [D("-92233720368547758.08"), D("1.00")]),
    # PG "Temporal types", time.precision.mode=adaptive (the default).
    (semantic("c_date", "int32", "io.debezium.time.Date"), [-719162, 2932896],
     [dt.date(1, 1, 1), dt.date(9999, 12, 31)]),
    (semantic("c_time", "int64", "io.debezium.time.MicroTime"), [0, 86_399_999_999],
     ["00:00:00.000000", "23:59:59.999999"]),
    (semantic("c_timetz", "string", "io.debezium.time.ZonedTime"), ["12:30:00.5Z", "00:00:00Z"],
     ["12:30:00.5Z", "00:00:00Z"]),
    (semantic("c_timestamp", "int64", "io.debezium.time.MicroTimestamp"),
     [1_700_000_000_123_456, -62_135_596_800_000_000],
     [dt.datetime(2023, 11, 14, 22, 13, 20, 123456), dt.datetime(1, 1, 1)]),
    (semantic("c_timestamptz", "string", "io.debezium.time.ZonedTimestamp"),
     ["2023-11-14T22:13:20.123456Z", "1999-12-31T23:59:59Z"],
     [dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC), dt.datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC)]),
    # PG: INTERVAL, interval.handling.mode=numeric → MicroDuration (int64 µs); =string → Interval (ISO 8601).
    (semantic("c_interval", "int64", "io.debezium.time.MicroDuration"), [-90_061_000_001, 31_557_600_000_000],
     [-90_061_000_001, 31_557_600_000_000]),
    (semantic("c_interval_text", "string", "io.debezium.time.Interval"), ["P1Y2M3DT4H5M6.78S", "PT0S"],
     ["P1Y2M3DT4H5M6.78S", "PT0S"]),
    # PG "Other data types".
    (semantic("c_uuid", "string", "io.debezium.data.Uuid"), ["c4b1f5a2-3b0e-4d1f-9a51-0d8e3f8a2b11"] * 2,
     ["c4b1f5a2-3b0e-4d1f-9a51-0d8e3f8a2b11"] * 2),
    (semantic("c_json", "string", "io.debezium.data.Json"), ['{"b": 1,  "a": [1, 2]}', "null"],
     ['{"b": 1,  "a": [1, 2]}', "null"]),
    (semantic("c_xml", "string", "io.debezium.data.Xml"), ["<a>1</a>", "<b/>"], ["<a>1</a>", "<b/>"]),
    (semantic("c_enum", "string", "io.debezium.data.Enum", allowed="sad,ok,très bien"), ["très bien", "sad"],
     ["très bien", "sad"]),
    (semantic("c_ltree", "string", "io.debezium.data.Ltree"), ["Top.Science", "Top"], ["Top.Science", "Top"]),
    (field("c_inet", "string"), ["192.168.0.1/24", "::1"], ["192.168.0.1/24", "::1"]),
    # PG: HSTORE, hstore.handling.mode=json → io.debezium.data.Json.
    (semantic("c_hstore", "string", "io.debezium.data.Json"), ['{"k":"v"}', "{}"], ['{"k":"v"}', "{}"]),
    # PG: POINT → io.debezium.data.geometry.Point {x, y, wkb, srid}; PostGIS GEOMETRY → Geometry {wkb, srid}.
    ({**semantic("c_point", "struct", "io.debezium.data.geometry.Point"),
      "fields": [field("x", "double", optional=False), field("y", "double", optional=False),
                 field("wkb", "bytes"), field("srid", "int32")]},
     [{"x": 1.0, "y": 2.0, "wkb": b64(POINT_WKB), "srid": None}, {"x": 0.0, "y": 0.0, "wkb": None, "srid": None}],
     [f'{{"x":1.0,"y":2.0,"wkb":"{b64(POINT_WKB)}","srid":null}}', '{"x":0.0,"y":0.0,"wkb":null,"srid":null}']),
    (geometry("c_geometry", "Geometry"), [{"wkb": b64(POINT_WKB), "srid": 4326}, {"wkb": b64(POINT_WKB), "srid": None}],
     [f'{{"wkb":"{b64(POINT_WKB)}","srid":4326}}', f'{{"wkb":"{b64(POINT_WKB)}","srid":null}}']),
    # PG arrays → Connect ARRAY, written as JSON text.
    ({**field("c_int_array", "array"), "items": {"type": "int32", "optional": True}}, [[1, None, 3], []],
     ["[1,null,3]", "[]"]),
]  # fmt: skip

MYSQL: list[Column] = [
    # MY "Basic types": BOOLEAN/BIT(1) boolean; BIT(>1) Bits little-endian; TINYINT INT16; YEAR io.debezium.time.Year.
    (field("c_bit1", "boolean"), [True, False], [True, False]),
    (semantic("c_bit12", "bytes", "io.debezium.data.Bits", length="12"), [b64(b"\x01\x0a"), b64(b"\xff\x0f")],
     [0x0A01, 0xFFF]),
    (semantic("c_bit64", "bytes", "io.debezium.data.Bits", length="64"),
     [b64(b"\x01" + b"\x00" * 6 + b"\x80"), b64(b"\x01")],
     [bytes.fromhex("8000000000000001"), bytes.fromhex("0000000000000001")]),
    (field("c_tinyint", "int16"), [-128, 255], [-128, 255]),
    (semantic("c_year", "int32", "io.debezium.time.Year"), [1901, 2155], [1901, 2155]),
    # MY "Decimal types", decimal.handling.mode=precise: DECIMAL(65,30) → Connect Decimal, 65 digits.
    (decimal_field("c_decimal_65_30", 65, 30),
     [encode_decimal("12345678901234567890123456789012345.123456789012345678901234567890", 30),
      encode_decimal("-0.000000000000000000000000000001", 30)],
     ["12345678901234567890123456789012345.123456789012345678901234567890", "-0.000000000000000000000000000001"]),
    # MY: BIGINT UNSIGNED, bigint.unsigned.handling.mode=precise → Connect Decimal(20,0).
    (decimal_field("c_bigint_unsigned", 20, 0), [encode_decimal("18446744073709551615", 0), encode_decimal("0", 0)],
     [D("18446744073709551615"), D("0")]),
    # MY "Temporal types": TIME is a duration, -838:59:59.000000 to 838:59:59.000000, as MicroTime.
    (semantic("c_time", "int64", "io.debezium.time.MicroTime"), [3_020_399_000_000, -1_000_000],
     ["838:59:59.000000", "-00:00:01.000000"]),
    # MY: DATETIME(0-3) → Timestamp (ms), DATETIME(4-6) → MicroTimestamp; TIMESTAMP → ZonedTimestamp.
    (semantic("c_datetime3", "int64", "io.debezium.time.Timestamp"), [1_700_000_000_123, 253_402_300_799_999],
     [dt.datetime(2023, 11, 14, 22, 13, 20, 123000), dt.datetime(9999, 12, 31, 23, 59, 59, 999000)]),
    (semantic("c_datetime6", "int64", "io.debezium.time.MicroTimestamp"), [1_700_000_000_123_456, 0],
     [dt.datetime(2023, 11, 14, 22, 13, 20, 123456), dt.datetime(1970, 1, 1)]),
    (semantic("c_timestamp", "string", "io.debezium.time.ZonedTimestamp"),
     ["2038-01-19T03:14:07Z", "1970-01-01T00:00:01Z"],
     [dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC), dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)]),
    (semantic("c_date", "int32", "io.debezium.time.Date"), [0, -1], [dt.date(1970, 1, 1), dt.date(1969, 12, 31)]),
    # MY: ENUM → Enum, SET → EnumSet (comma-separated), JSON → Json, GEOMETRY → geometry.Geometry.
    (semantic("c_enum", "string", "io.debezium.data.Enum", allowed="x,y"), ["x", "y"], ["x", "y"]),
    (semantic("c_set", "string", "io.debezium.data.EnumSet", allowed="a,b,c"), ["a,c", ""], ["a,c", ""]),
    (semantic("c_json", "string", "io.debezium.data.Json"), ['{"a":1}', "[]"], ['{"a":1}', "[]"]),
    (geometry("c_geometry", "Geometry"), [{"wkb": b64(POINT_WKB), "srid": 0}, {"wkb": b64(POINT_WKB), "srid": 4326}],
     [f'{{"wkb":"{b64(POINT_WKB)}","srid":0}}', f'{{"wkb":"{b64(POINT_WKB)}","srid":4326}}']),
    (field("c_double", "double"), [0.1, -1.0], [0.1, -1.0]),
    (field("c_blob", "bytes"), [b64(b"\x00\x01"), b64(b"\xff")], [b"\x00\x01", b"\xff"]),
]  # fmt: skip

SQLSERVER: list[Column] = [
    # MS "Temporal types", time.precision.mode=adaptive: DATETIME2(7) → NanoTimestamp; Fabric's own SQL Server
    # mirroring keeps microseconds, and so do we (the 7th digit is truncated, never rounded up).
    (semantic("c_datetime2_7", "int64", "io.debezium.time.NanoTimestamp"),
     [1_704_164_645_123_456_700, -2_208_988_799_999_999_900],  # 2024-01-02 03:04:05.1234567; 1900-01-01 + 100 ns
     [dt.datetime(2024, 1, 2, 3, 4, 5, 123456), dt.datetime(1900, 1, 1)]),
    # MS: DATETIME2(0-3), DATETIME, SMALLDATETIME → Timestamp (ms); DATETIME2(4-6) → MicroTimestamp.
    (semantic("c_datetime", "int64", "io.debezium.time.Timestamp"), [1_704_164_645_127, -2_208_988_800_000],
     [dt.datetime(2024, 1, 2, 3, 4, 5, 127000), dt.datetime(1900, 1, 1)]),
    (semantic("c_datetime2_6", "int64", "io.debezium.time.MicroTimestamp"), [1_704_164_645_123_456, 1],
     [dt.datetime(2024, 1, 2, 3, 4, 5, 123456), dt.datetime(1970, 1, 1, 0, 0, 0, 1)]),
    # MS: DATETIMEOFFSET → ZonedTimestamp text, here with its 7 fractional digits.
    (semantic("c_datetimeoffset", "string", "io.debezium.time.ZonedTimestamp"),
     ["2024-01-02T03:04:05.1234567+02:00", "1900-01-01T00:00:00-05:00"],
     [dt.datetime(2024, 1, 2, 1, 4, 5, 123456, tzinfo=UTC), dt.datetime(1900, 1, 1, 5, tzinfo=UTC)]),
    # MS: TIME(0-3) → Time (int32 ms), TIME(4-6) → MicroTime, TIME(7) → NanoTime.
    (semantic("c_time3", "int32", "io.debezium.time.Time"), [45_296_789, 0], ["12:34:56.789", "00:00:00.000"]),
    (semantic("c_time7", "int64", "io.debezium.time.NanoTime"), [86_399_999_999_900, 100],
     ["23:59:59.999999900", "00:00:00.000000100"]),
    # MS "Decimal types": DECIMAL(38,10), MONEY (19,4), SMALLMONEY (10,4) → Connect Decimal.
    (decimal_field("c_decimal_38_10", 38, 10),
     [encode_decimal("9999999999999999999999999999.9999999999", 10), encode_decimal("-0.0000000001", 10)],
     [D("9999999999999999999999999999.9999999999"), D("-0.0000000001")]),
    (decimal_field("c_money", 19, 4), [encode_decimal("-922337203685477.5808", 4), encode_decimal("1.0000", 4)],
     [D("-922337203685477.5808"), D("1.0000")]),
    (field("c_bit", "boolean"), [True, False], [True, False]),
    (field("c_tinyint", "int16"), [0, 255], [0, 255]),
    (field("c_uniqueidentifier", "string"), ["6F9619FF-8B86-D011-B42D-00C04FC964FF"] * 2,
     ["6F9619FF-8B86-D011-B42D-00C04FC964FF"] * 2),
    (field("c_nvarchar", "string"), ["漢字", "x"], ["漢字", "x"]),
    (field("c_varbinary", "bytes"), [b64(b"\xde\xad"), b64(b"\x00")], [b"\xde\xad", b"\x00"]),
    (semantic("c_xml", "string", "io.debezium.data.Xml"), ["<r/>", "<s>t</s>"], ["<r/>", "<s>t</s>"]),
    (geometry("c_geography", "Geography"),
     [{"wkb": b64(POINT_WKB), "srid": 4326}, {"wkb": b64(POINT_WKB), "srid": 4326}],
     [f'{{"wkb":"{b64(POINT_WKB)}","srid":4326}}'] * 2),
]  # fmt: skip

# Oracle cannot run here: these follow Debezium's Oracle connector documentation, "How Debezium Oracle
# connectors map data types" (decimal.handling.mode=precise, time.precision.mode=adaptive,
# interval.handling.mode=numeric unless noted).
ORACLE: list[Column] = [
    # OR "Numeric types": NUMBER without precision and scale (and FLOAT) → VariableScaleDecimal.
    (vsd("c_number"), [vs_value("3.14159265358979323846264338327950288419716939937510"), vs_value("-7")],
     ["3.14159265358979323846264338327950288419716939937510", "-7"]),
    # OR: NUMBER(P, S > 0) → Connect Decimal; NUMBER(P < 19, S <= 0) → INT8/16/32/64.
    (decimal_field("c_number_12_4", 12, 4), [encode_decimal("-12345678.9012", 4), encode_decimal("0.0001", 4)],
     [D("-12345678.9012"), D("0.0001")]),
    (field("c_number_18", "int64"), [999_999_999_999_999_999, -1], [999_999_999_999_999_999, -1]),
    (field("c_number_4", "int16"), [9999, -9999], [9999, -9999]),
    # OR: BINARY_FLOAT → FLOAT32, BINARY_DOUBLE → FLOAT64.
    (field("c_binary_float", "float"), [3.5, -0.125], [3.5, -0.125]),
    (field("c_binary_double", "double"), [1.7976931348623157e308, 5e-324], [1.7976931348623157e308, 5e-324]),
    # OR "Temporal types": DATE (it has a time of day) → Timestamp (ms); TIMESTAMP(6) → MicroTimestamp;
    # TIMESTAMP(9) → NanoTimestamp (microseconds here, truncated).
    (semantic("c_date", "int64", "io.debezium.time.Timestamp"), [1_704_164_645_000, -62_135_596_800_000],
     [dt.datetime(2024, 1, 2, 3, 4, 5), dt.datetime(1, 1, 1)]),
    (semantic("c_timestamp6", "int64", "io.debezium.time.MicroTimestamp"), [1_704_164_645_123_456, 0],
     [dt.datetime(2024, 1, 2, 3, 4, 5, 123456), dt.datetime(1970, 1, 1)]),
    (semantic("c_timestamp9", "int64", "io.debezium.time.NanoTimestamp"), [1_704_164_645_123_456_789, 999],
     [dt.datetime(2024, 1, 2, 3, 4, 5, 123456), dt.datetime(1970, 1, 1)]),
    # OR: TIMESTAMP WITH TIME ZONE → ZonedTimestamp with the source's offset; WITH LOCAL TIME ZONE → in UTC.
    (semantic("c_timestamp_tz", "string", "io.debezium.time.ZonedTimestamp"),
     ["2024-01-02T03:04:05.123456-08:00", "2000-02-29T23:59:59+05:30"],
     [dt.datetime(2024, 1, 2, 11, 4, 5, 123456, tzinfo=UTC), dt.datetime(2000, 2, 29, 18, 29, 59, tzinfo=UTC)]),
    (semantic("c_timestamp_ltz", "string", "io.debezium.time.ZonedTimestamp"), ["2024-01-02T03:04:05Z"] * 2,
     [dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)] * 2),
    # OR: INTERVAL YEAR TO MONTH / DAY TO SECOND, interval.handling.mode=numeric → MicroDuration, a FLOAT64 of
    # microseconds here (365.25 / 12 days a month), where Postgres sends an INT64.
    (semantic("c_interval_ym", "double", "io.debezium.time.MicroDuration"), [36_817_200_000_000.0, -1.5],
     [36_817_200_000_000.0, -1.5]),
    # OR: INTERVAL DAY TO SECOND with interval.handling.mode=string → Interval (ISO 8601 text).
    (semantic("c_interval_ds", "string", "io.debezium.time.Interval"), ["P1DT2H3M4.5S", "-PT0.000001S"],
     ["P1DT2H3M4.5S", "-PT0.000001S"]),
    # OR "Character types" and LOBs: VARCHAR2, NVARCHAR2, CLOB → STRING; RAW, BLOB → BYTES.
    (field("c_nvarchar2", "string"), ["Łódź ✓", ""], ["Łódź ✓", ""]),
    (field("c_clob", "string"), ["x" * 5000, "y"], ["x" * 5000, "y"]),
    (field("c_raw", "bytes"), [b64(b"\x00\x01\xfe"), b64(b"")], [b"\x00\x01\xfe", b""]),
]  # fmt: skip

SOURCES = {"postgresql": POSTGRES, "mysql": MYSQL, "sqlserver": SQLSERVER, "oracle": ORACLE}


def topic_of(connector: str) -> Topic:
    columns = [field("id", "int32", optional=False), *(column for column, _, _ in SOURCES[connector])]
    return Topic(f"{connector}.dbo.matrix", columns, ["id"], connector=connector)


def change_events(connector: str) -> list[KafkaRecord]:
    """Two rows of values and one of NULLs (snapshot reads), then an update of row 1 that keeps its values."""
    topic = topic_of(connector)
    rows = []
    for index in range(3):
        row: dict[str, Any] = {"id": index + 1}
        for column, wire, _ in SOURCES[connector]:
            row[column["field"]] = wire[index] if index < 2 else None
        rows.append(row)
    records = [topic.record("r", None, row) for row in rows]
    records.append(topic.record("u", rows[0], rows[0]))
    return records


def expected_rows(connector: str) -> list[dict[str, Any]]:
    out = []
    for index in range(3):
        row: dict[str, Any] = {"id": index + 1}
        for column, _, read in SOURCES[connector]:
            row[column["field"]] = read[index] if index < 2 else None
        out.append(row)
    return out


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("type-matrix")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _fresh_schema_caches() -> Iterator[None]:
    # Avro writer schemas are cached per process by registry URL; the double reuses ephemeral ports.
    for cache in (schema_registry._WRITER_SCHEMAS, schema_registry._UNREADABLE, schema_registry._MISSING):
        cache.clear()
    yield


def json_landing_zone(tmp: Path, connector: str) -> Path:
    """JSON events (schemas enabled) through ``convert``, from a kcat dump."""
    dump = tmp / "dump.jsonl"
    dump.write_bytes(b"".join(kcat_line(record) for record in change_events(connector)))
    landing = tmp / "landing-json"
    summary = convert([str(dump)], load_settings(**{"landing_zone.url": str(landing)}), checkpoint=None)
    assert summary.ok, (summary.stopped, summary.bad_lines)
    return landing


def avro_landing_zone(tmp: Path, connector: str, registry: RegistryDouble) -> Path:
    """The same Connect data written by Confluent's Avro converter, through the sink ``convert`` uses."""
    records = []
    for record in change_events(connector):
        framed = []
        for raw, subject in ((record.key, f"{record.topic}-key"), (record.value, f"{record.topic}-value")):
            document = orjson.loads(raw or b"null")
            schema = connect_to_avro_schema(document["schema"])
            datum = connect_to_avro_datum(document["schema"], document["payload"])
            framed.append(frame(registry.register(subject, schema), schema, datum))
        records.append(record._replace(key=framed[0], value=framed[1]))
    landing = tmp / "landing-avro"
    source = SourceSettings(value_format="avro", schema_registry=SchemaRegistrySettings(url=registry.url))
    sink = MirrorSink(LocalStorage(landing), LocalStorage(tmp / "ledger-avro"), MirrorSettings(), source=source)
    result = sink.process_batch(0, iter(records))
    assert not result.stopped, result.stopped
    return landing


def comparable(value: Any) -> Any:
    """Values as both readers return them: naive datetimes from Spark are UTC (session time zone UTC)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return value


def check_files_are_fabric_types(landing: Path) -> None:
    import pyarrow.parquet as pq

    files = sorted(landing.rglob("*.parquet"))
    assert files
    for path in files:
        for column in pq.read_schema(path):
            assert fabric_type_problem(column.type) is None, (path, column)
            if column.name != "__rowMarker__":
                assert column.nullable, (path, column.name)  # a later file may omit it (dropped column)


def read_with_delta(landing: Path, target: Path) -> list[dict[str, Any]]:
    tables = apply_to_delta(str(landing), target)
    (table,) = tables.values()
    rows = sorted(table.to_pylist(), key=lambda r: r["id"])
    return [{name: comparable(value) for name, value in row.items() if name != "__rowMarker__"} for row in rows]


def read_with_spark(spark: Any, landing: Path, expected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Spark's Parquet reader on the data files; the last row of each key wins (they are all upserts)."""
    files = sorted(str(p) for p in landing.rglob("*.parquet"))
    frame_ = spark.read.parquet(*files)
    latest: dict[int, dict[str, Any]] = {}
    for row in frame_.collect():  # one file, rows in file order
        latest[row["id"]] = row.asDict()
    out = []
    for key in sorted(latest):
        row = {name: comparable(value) for name, value in latest[key].items() if name != "__rowMarker__"}
        for name, value in row.items():
            want = next(r for r in expected if r["id"] == key).get(name)
            if isinstance(value, dt.datetime) and isinstance(want, dt.datetime) and want.tzinfo is not None:
                # TIMESTAMP (with time zone) comes back as the session's local time, naive: UTC here.
                row[name] = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        out.append(row)
    return out


@pytest.mark.parametrize("connector", sorted(SOURCES))
@pytest.mark.parametrize("converter", ["json", "avro"])
def test_every_semantic_type_reads_back_exactly_in_delta_and_spark(
    connector: str, converter: str, tmp_path: Path, spark: Any
) -> None:
    if converter == "json":
        landing = json_landing_zone(tmp_path, connector)
    else:
        with RegistryDouble() as registry:
            landing = avro_landing_zone(tmp_path, connector, registry)
    check_files_are_fabric_types(landing)
    expected = expected_rows(connector)
    assert_rows(read_with_delta(landing, tmp_path / "delta"), expected, "Delta oracle")
    assert_rows(read_with_spark(spark, landing, expected), expected, "Spark")


def assert_rows(actual: list[dict[str, Any]], expected: list[dict[str, Any]], reader: str) -> None:
    """Equal rows, naming the first column (and its Python type) that differs."""
    assert [r["id"] for r in actual] == [r["id"] for r in expected], reader
    for got, want in zip(actual, expected, strict=True):
        assert sorted(got) == sorted(want), reader
        for name, value in want.items():
            assert (got[name], type(got[name])) == (value, type(value)), (reader, got["id"], name)


def test_json_and_avro_write_the_same_parquet_types(tmp_path: Path) -> None:
    """Both converters give each column the same landing-zone type (a switch of converter is no type change)."""
    import pyarrow.parquet as pq

    for connector in SOURCES:
        (tmp_path / connector).mkdir()
        json_zone = json_landing_zone(tmp_path / connector, connector)
        with RegistryDouble() as registry:
            avro_zone = avro_landing_zone(tmp_path / connector, connector, registry)
        # The snapshot reads (marker-free, an initial load) and the update (marked) are a file each.
        json_files = sorted(json_zone.rglob("*.parquet"), key=lambda p: p.name)
        avro_files = sorted(avro_zone.rglob("*.parquet"), key=lambda p: p.name)
        assert len(json_files) == len(avro_files) == 2, (connector, json_files, avro_files)
        for json_file, avro_file in zip(json_files, avro_files, strict=True):
            assert pq.read_schema(json_file) == pq.read_schema(avro_file), connector
            assert pq.read_table(json_file).equals(pq.read_table(avro_file)), connector


def test_a_type_delta_cannot_hold_never_reaches_the_files() -> None:
    """The oracle's rule itself refuses what the old mapping wrote (so the matrix above would catch a relapse)."""
    for old in (pa.time64("us"), pa.time32("ms"), pa.decimal256(65, 30), pa.timestamp("ns")):
        assert fabric_type_problem(old) is not None
