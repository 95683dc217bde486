"""verify's MySQL/MariaDB comparison: each canonical form equates a source value with the mirror's
representation of the same value, and only with it (the end-to-end test runs it on a real MariaDB)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from connector.errors import ConfigError
from connector.readback.database_mysql import MySqlSource, SourceColumn, compare_table, is_mysql_url
from connector.secrets import redact_url

COLUMNS = [
    SourceColumn("id", "bigint", "bigint(20) unsigned"),
    SourceColumn("b", "bit", "bit(12)"),
    SourceColumn("t", "time", "time(6)"),
    SourceColumn("d", "decimal", "decimal(65,30)"),
    SourceColumn("ts", "timestamp", "timestamp(6)"),
    SourceColumn("dt", "datetime", "datetime(6)"),
    SourceColumn("j", "json", "longtext"),
    SourceColumn("s", "set", "set('red','green')"),
    SourceColumn("f", "float", "float"),
    SourceColumn("g", "geometry", "geometry"),
    SourceColumn("p", "point", "point"),
]
LINE_WKB = bytes.fromhex("010200000002000000" + "00" * 16 + "000000000000F03F" + "000000000000F0BF")
POINT_WKB = bytes.fromhex("010100000000000000000008400000000000001040")  # POINT(3 4)
WIDE = "12345678901234567890123456789012345.123456789012345678901234567891"


def source_row(**changes: object) -> dict[str, object]:
    row: dict[str, object] = {
        "id": 18446744073709551615,
        "b": b"\x0a\x01",  # PyMySQL: big-endian bytes of b'101000000001'
        "t": dt.timedelta(hours=838, minutes=59, seconds=59),
        "d": Decimal(WIDE),
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 123456),  # read in the UTC session: naive
        "dt": dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
        "j": '{"b": 1, "a": [1, 2]}',
        "s": "red,green",
        "f": 3.140000104904175,  # CAST(f AS DOUBLE): the stored float32
        "g": b"\x00\x00\x00\x00" + LINE_WKB,  # as stored: SRID 0 (little-endian), then the WKB
        "p": b"\xe6\x10\x00\x00" + POINT_WKB,  # SRID 4326
    }
    row.update(changes)
    return row


def mirror(**changes: object) -> pa.Table:
    row: dict[str, object] = {
        "id": Decimal("18446744073709551615"),
        "b": 2561,
        "t": "838:59:59.000000",
        "d": WIDE,
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC),
        "dt": dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
        "j": '{"a":[1,2],"b":1}',
        "s": "red,green",
        "f": 3.14,
        "g": geometry_json(LINE_WKB, None),  # Debezium writes SRID 0 as null
        "p": '{"x":3.0,"y":4.0,"wkb":"' + base64.b64encode(POINT_WKB).decode() + '","srid":4326}',
    }
    row.update(changes)
    types = pa.schema(
        [
            ("id", pa.decimal128(20, 0)),
            ("b", pa.int64()),
            ("t", pa.string()),
            ("d", pa.string()),
            ("ts", _timestamp_type(row["ts"])),
            ("dt", _timestamp_type(row["dt"])),
            ("j", pa.string()),
            ("s", pa.string()),
            ("f", pa.float32()),
            ("g", pa.string()),
            ("p", pa.string()),
        ]
    )
    return pa.Table.from_pylist([row], schema=types)


def geometry_json(wkb: bytes, srid: int | None) -> str:
    """Debezium's Geometry struct as the mirror writes it: JSON text with base64 WKB."""
    return json.dumps({"wkb": base64.b64encode(wkb).decode(), "srid": srid}, separators=(",", ":"))


def _timestamp_type(value: object) -> pa.DataType:
    """A zone in the column type when the value has one: the mirror's column is what carries the zone."""
    aware = isinstance(value, dt.datetime) and value.tzinfo is not None
    return pa.timestamp("us", tz="UTC") if aware else pa.timestamp("us")


def test_same_values_in_every_representation_match() -> None:
    report = compare_table("mirror.t", ["id"], COLUMNS, iter([source_row()]), mirror())
    assert report.ok, report.examples
    assert (report.source_rows, report.mirror_rows, report.matching) == (1, 1, 1)


@pytest.mark.parametrize(
    ("column", "mirror_value"),
    [
        ("b", 2560),  # one bit off
        ("t", "-838:59:59.000000"),  # sign lost
        ("t", "22:59:59.000000"),  # wrapped at a day
        ("d", WIDE[:-1] + "2"),  # last of 65 digits
        ("ts", dt.datetime(2024, 1, 2, 3, 4, 5, 123456)),  # an instant turned wall-clock
        ("dt", dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)),  # a wall-clock time given a zone
        ("j", '{"a": [2, 1], "b": 1}'),
        ("s", "red"),
        ("f", 3.1400003),  # the next float32
        ("g", geometry_json(LINE_WKB, 4326)),  # another SRID
        ("g", geometry_json(LINE_WKB[:-1] + b"\xc0", None)),  # last coordinate -2 instead of -1
        ("g", base64.b64encode(LINE_WKB).decode()),  # the WKB without its struct
        ("p", geometry_json(POINT_WKB, None)),  # the SRID lost
    ],
)
def test_a_different_value_differs(column: str, mirror_value: object) -> None:
    report = compare_table("mirror.t", ["id"], COLUMNS, iter([source_row()]), mirror(**{column: mirror_value}))
    assert report.differing == 1
    assert report.examples[0].startswith("key (Decimal('18446744073709551615'),): " + column + ":")


def test_bits_as_big_endian_bytes_and_negative_time_with_fraction_match() -> None:
    table = mirror(t="-00:00:00.500000").set_column(1, "b", pa.array([b"\x0a\x01"], pa.binary()))
    source = source_row(t=-dt.timedelta(microseconds=500_000))
    assert compare_table("mirror.t", ["id"], COLUMNS, iter([source]), table).ok


def test_geometry_srid_zero_and_null_are_the_same_and_a_null_geometry_matches_null() -> None:
    table = mirror(g=geometry_json(LINE_WKB, 0), p=None)
    assert compare_table("mirror.t", ["id"], COLUMNS, iter([source_row(p=None)]), table).ok


def test_wrapped_unsigned_key_is_missing_and_extra() -> None:
    table = mirror(id=Decimal(-1)).cast(mirror().schema.set(0, pa.field("id", pa.decimal128(20, 0))))
    report = compare_table("mirror.t", ["id"], COLUMNS, iter([source_row()]), table)
    assert (report.missing, report.extra) == (1, 1)


def test_url_parsing_and_redaction() -> None:
    assert is_mysql_url("mariadb://u:p@h:1/db") and is_mysql_url("mysql://u@h/db")
    assert not is_mysql_url("postgresql://u:p@h/db")
    source = MySqlSource.from_url("mysql://us%40er:s3cr%3At@db.example:3307/mirror")
    assert (source.user, source.password, source.host, source.port, source.database) == (
        "us@er",
        "s3cr:t",
        "db.example",
        3307,
        "mirror",
    )
    assert "s3cr" not in source.label()
    assert redact_url("mysql://u:s3cret@h:1/db", keep_user=True) == "mysql://u:***@h:1/db"
    with pytest.raises(ConfigError, match="needs a user and a host"):
        MySqlSource.from_url("mysql:///db")


def test_a_keyless_table_compares_as_a_multiset_of_rows_in_every_representation() -> None:
    """No key: identical rows count one by one, a lost duplicate is missing and a doubled row extra."""
    twice = iter([source_row(), source_row()])
    assert compare_table("mirror.t", [], COLUMNS, twice, pa.concat_tables([mirror(), mirror()])).ok
    lost = compare_table("mirror.t", [], COLUMNS, iter([source_row(), source_row()]), mirror())
    assert (lost.missing, lost.extra, lost.matching) == (1, 0, 1)
    doubled = compare_table("mirror.t", [], COLUMNS, iter([source_row()]), pa.concat_tables([mirror(), mirror()]))
    assert (doubled.missing, doubled.extra, doubled.matching, doubled.differing) == (0, 1, 1, 0)
    changed = compare_table("mirror.t", [], COLUMNS, iter([source_row()]), mirror(s="blue"))
    assert (changed.missing, changed.extra) == (1, 1) and not changed.ok
