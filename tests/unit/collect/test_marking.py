"""``RowMarkerMapper`` for a table without a key: inserts only, and an update or delete rebuilds or stops it."""

from __future__ import annotations

import pytest

from connector.collect.marking import KEYLESS_CHANGE, RowMarkerMapper, ToastHandling
from connector.debezium.envelope import EnvelopeDecoder
from connector.errors import TableReset, TableStopped
from connector.events import KafkaRecord, RowMarker
from tests.support.debezium import Topic, field

COLUMNS = [field("id", "int32", optional=False), field("name", "string")]


def mapper(key_columns: tuple[str, ...] = (), *, keyless_changes: str = "rebuild") -> RowMarkerMapper:
    return RowMarkerMapper(
        "public.logs",
        key_columns,
        replay_safe_inserts=True,
        toast=ToastHandling("fail", "__debezium_unavailable_value"),
        keyless_changes=keyless_changes,
    )


def events(*ops: str) -> list[object]:
    t = Topic("dbserver1.public.logs", COLUMNS, [])
    row = {"id": 1, "name": "a"}
    made = [t.record(op, row if op in "ud" else None, None if op == "d" else row) for op in ops]
    decoder = EnvelopeDecoder()
    return [decoder.decode(KafkaRecord(r.topic, r.partition, r.offset, None, r.value)) for r in made]


def test_a_keyless_tables_creates_and_reads_are_inserts_even_with_replay_safe_inserts() -> None:
    """An upsert matches rows by key: without keyColumns insert is the one operation Fabric defines."""
    rows = [mapper().rows(event)[0] for event in events("c", "r", "c")]  # type: ignore[arg-type]
    assert [marker for marker, _ in rows] == [RowMarker.INSERT] * 3
    assert [marker for marker, _ in mapper(("id",)).rows(events("c")[0])] == [RowMarker.UPSERT]  # type: ignore[arg-type]


@pytest.mark.parametrize(("op", "what"), [("u", "an update"), ("d", "a delete")])
def test_an_update_or_delete_of_a_keyless_table_asks_for_its_rebuild_naming_the_record(op: str, what: str) -> None:
    event = events("c", op)[1]
    with pytest.raises(TableReset) as raised:
        mapper().rows(event)  # type: ignore[arg-type]
    assert raised.value.cause == KEYLESS_CHANGE
    assert raised.value.reason.startswith(f"dbserver1.public.logs[0]@1: {what} of table public.logs, which has no key")
    assert "mirror.keyless_changes: rebuild" in raised.value.reason


def test_under_keyless_changes_stop_the_table_stops_with_one_clear_line() -> None:
    with pytest.raises(TableStopped) as raised:
        mapper(keyless_changes="stop").rows(events("c", "u")[1])  # type: ignore[arg-type]
    assert not isinstance(raised.value, TableReset)
    assert "stopped (mirror.keyless_changes: stop)" in raised.value.reason
    assert "dbserver1.public.logs[0]@1" in raised.value.reason
