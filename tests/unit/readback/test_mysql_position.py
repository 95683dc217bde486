"""The MySQL/MariaDB lag gate's pieces: the position string, the mark, the statement that writes it."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from connector.errors import ConnectorError
from connector.readback.database_mysql import SourceColumn
from connector.readback.mysql_position import (
    MARK_PREFIX,
    _marks_in,
    carries_mark,
    mark_delete,
    mark_insert,
    mark_of,
    new_mark,
    position_text,
    signal_table_topic,
)
from connector.readback.mysql_ranges import MySqlRules, _order_expression


def test_a_mark_fits_debeziums_signal_id_column_and_round_trips_through_the_position() -> None:
    mark = new_mark()
    assert mark.startswith(MARK_PREFIX) and len(mark) <= 42
    assert mark != new_mark()
    position = position_text("0-1-1234", mark)
    assert position == f"0-1-1234|{mark}"
    assert mark_of(position) == mark
    assert mark_of(position_text("mysql-bin.000003:4567", mark)) == mark


@pytest.mark.parametrize("position", ["0/16B3748", "0-1-12", "x|not-a-mark", ""])
def test_a_position_without_a_mark_is_refused(position: str) -> None:
    with pytest.raises(ValueError, match="not a MySQL/MariaDB audit position"):
        mark_of(position)


def test_the_mark_is_found_in_a_json_or_avro_value_and_only_its_own() -> None:
    mark, other = new_mark(), new_mark()
    json_value = b'{"payload":{"after":{"id":"' + mark.encode() + b'","type":"log"},"op":"c"}}'
    avro_value = b"\x00\x00\x00\x00\x07\x02\x46" + mark.encode() + b"\x06log"
    assert carries_mark(json_value, mark) and carries_mark(avro_value, mark)
    assert not carries_mark(json_value, other) and not carries_mark(None, mark)
    assert _marks_in(json_value + avro_value.replace(mark.encode(), other.encode())) == [mark, other]
    assert _marks_in(MARK_PREFIX.encode() + b"abc") == []  # cut short: no mark


def test_the_mark_is_written_to_the_signalling_table_quoted() -> None:
    assert mark_insert("debezium.debezium_signal") == (
        "INSERT INTO `debezium`.`debezium_signal` (id, type, data) VALUES (%s, %s, %s)"
    )
    assert mark_delete("debezium.debezium_signal", 2) == (
        "DELETE FROM `debezium`.`debezium_signal` WHERE id IN (%s, %s)"
    )
    assert signal_table_topic("mariadb1", "debezium.debezium_signal") == "mariadb1.debezium.debezium_signal"
    with pytest.raises(ConnectorError, match=r"database\.table"):
        mark_insert("debezium_signal")


def test_text_keys_are_ordered_by_code_point_and_the_rest_as_they_are() -> None:
    assert _order_expression(SourceColumn("name", "varchar", "varchar(32)")) == (
        "CONVERT(`name` USING utf8mb4) COLLATE utf8mb4_bin"
    )
    assert _order_expression(SourceColumn("id", "int", "int(11)")) == "`id`"


def test_mysql_rules_give_both_sides_one_form_and_compare_by_source_type() -> None:
    columns = [
        SourceColumn("id", "bigint", "bigint(20) unsigned"),
        SourceColumn("at", "timestamp", "timestamp"),
        SourceColumn("d", "time", "time"),
    ]
    rules = MySqlRules(columns)
    assert rules.form("id", 5, None, source=True) == rules.form("id", 5, pa.int64(), source=False) == Decimal(5)
    naive = dt.datetime(2026, 1, 2, 3, 4, 5)  # noqa: DTZ001 - a TIMESTAMP as PyMySQL reads it in the UTC session
    aware = naive.replace(tzinfo=dt.UTC)
    assert rules.form("at", naive, None, source=True) == rules.form("at", aware, None, source=False)
    source = [{"id": 5, "at": naive, "d": dt.timedelta(hours=-1)}]
    mirror = pa.table({"id": [5], "at": [aware], "d": ["-01:00:00"]})
    assert rules.compare_rows("mirror.t", ["id"], source, mirror).ok
    report = rules.compare_rows("mirror.t", ["id"], source, pa.table({"id": [5], "at": [aware], "d": ["01:00:00"]}))
    assert report.differing_keys == [(Decimal(5),)]


class _MySqlLike:
    """An in-memory MySQL table as PyMySQL reads it (int ids, naive UTC timestamps), with MySQL's rules."""

    COLUMNS = [SourceColumn("id", "int", "int(11)"), SourceColumn("at", "timestamp", "timestamp")]

    def __init__(self, rows: dict[int, dt.datetime]) -> None:
        self.rows = rows

    def current_position(self) -> str:
        return position_text("0-1-1", new_mark())

    def captured_through(self, position: str) -> bool:
        return bool(mark_of(position))

    def ranged_rows(self, table: object, key_columns: list[str], after: object, through: object) -> object:
        for key in sorted(self.rows):
            form = (Decimal(key),)
            if (after is None or form > after) and (through is None or form <= through):  # type: ignore[operator]
                yield {"id": key, "at": self.rows[key]}

    def columns(self, table: object) -> list[str]:
        return ["id", "at"]

    def compare_rules(self, table: object) -> MySqlRules:
        return MySqlRules(self.COLUMNS)


def test_a_table_compares_in_mysqls_forms_chunk_by_chunk() -> None:
    from connector.landing_zone.layout import TableRef
    from connector.readback.mirror_compare import compare_table

    at = dt.datetime(2026, 1, 2, 3, 4, 5)  # noqa: DTZ001
    source = _MySqlLike(dict.fromkeys(range(1, 51), at))
    mirror = pa.table({"id": list(range(1, 51)), "at": [at.replace(tzinfo=dt.UTC)] * 50})
    ref = TableRef("mirror", "t")
    assert compare_table(source, ref, ["id"], lambda: mirror, settle=lambda _p: True, chunk_rows=7).ok  # type: ignore[arg-type]
    later = at.replace(tzinfo=dt.UTC) + dt.timedelta(hours=1)
    wrong = mirror.set_column(1, "at", pa.array([at.replace(tzinfo=dt.UTC)] * 49 + [later]))
    report = compare_table(source, ref, ["id"], lambda: wrong, settle=lambda _p: True, chunk_rows=7)  # type: ignore[arg-type]
    assert report.differing_keys == [(Decimal(50),)], report
