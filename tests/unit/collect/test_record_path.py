"""The record path with a table without a key: its rows collected, its update a rebuild, the other tables untouched."""

from __future__ import annotations

from connector.collect.pieces import CollectContext
from connector.collect.record_path import SliceCollector
from connector.config import MirrorSettings, TableSettings
from connector.events import KafkaRecord
from tests.support.debezium import Topic, field

COLUMNS = [field("id", "int32", optional=False), field("name", "string")]
ROW = {"id": 1, "name": "same"}


def keyless(records: list[KafkaRecord]) -> list[KafkaRecord]:
    """Debezium sends a table without a key with a null Kafka key."""
    return [KafkaRecord(r.topic, r.partition, r.offset, None, r.value) for r in records]


def test_a_keyless_tables_identical_rows_all_arrive_as_inserts() -> None:
    logs = Topic("dbserver1.public.logs", COLUMNS, [])
    records = keyless([logs.record("r", None, ROW), logs.record("c", None, ROW), logs.record("c", None, ROW)])
    collected = SliceCollector(CollectContext(MirrorSettings())).collect(records)
    assert collected.stopped == {}
    piece = collected.pieces["public.logs"]
    assert piece.key_columns == () and piece.table is not None
    assert piece.table.to_pylist() == [{**ROW, "__rowMarker__": 0}] * 3


def test_an_update_of_a_keyless_table_resets_it_and_the_other_tables_go_on() -> None:
    logs, orders = Topic("dbserver1.public.logs", COLUMNS, []), Topic("dbserver1.public.orders", COLUMNS, ["id"])
    records = keyless([logs.record("c", None, ROW), logs.record("u", ROW, {"id": 1, "name": "b"})])
    records += [orders.record("c", None, {"id": 5, "name": "o"}), *keyless([logs.record("c", None, ROW)])]
    collected = SliceCollector(CollectContext(MirrorSettings())).collect(records)
    assert collected.resets == {"public.logs": "keyless_change"}
    assert collected.stopped["public.logs"].startswith("dbserver1.public.logs[0]@1: an update of table public.logs")
    assert collected.skipped.by_kind.get("table_stopped") == 1  # the table's later events wait for its rebuild
    assert "public.orders" not in collected.stopped
    orders_piece = collected.pieces["public.orders"]
    assert orders_piece.table is not None and orders_piece.table.num_rows == 1


def test_a_per_table_setting_stops_a_keyless_table_instead() -> None:
    logs = Topic("dbserver1.public.logs", COLUMNS, [])
    mirror = MirrorSettings(tables={"dbserver1.public.logs": TableSettings(keyless_changes="stop")})
    records = keyless([logs.record("c", None, ROW), logs.record("d", ROW, None)])
    collected = SliceCollector(CollectContext(mirror)).collect(records)
    assert collected.resets == {}
    assert "a delete of table public.logs" in collected.stopped["public.logs"]
    assert "mirror.keyless_changes: stop" in collected.stopped["public.logs"]
