"""A tombstone is its key's delete unless the key's delete came right before it (compaction removes the delete).

Every test collects through both paths (``check``: the record path alone, and the columnar lane with the record
path behind it) and asserts they agree, then what the rows are.
"""

from __future__ import annotations

import logging
import random

import numpy as np
import pyarrow as pa
import pytest

from connector.collect.pieces import CollectContext, Collected
from connector.collect.record_path import SliceCollector
from connector.collect.tombstones import DeletedKeys, tombstones_follow_deletes
from connector.config import MirrorSettings, TableSettings
from connector.events import KafkaRecord
from tests.unit.collect.test_lane import check, established, mixed_workload, order_row, orders

TOPIC = "dbserver1.public.orders"
TABLE = "public.orders"
UPSERT = 4  # creates, under the default replay_safe_inserts


def known(with_schema: bool, mirror: MirrorSettings | None = None) -> CollectContext:
    """A context in which the table was published before (its schema and keys established)."""
    topic = orders(with_schema=with_schema, partition=1)
    return established(CollectContext(mirror or MirrorSettings()), [topic.record("c", None, order_row(99))])


def collected(context: CollectContext, records: list[KafkaRecord]) -> Collected:
    """Both paths agree on ``records``; the record path's outcome."""
    check(context, records)
    return SliceCollector(context).collect(records)


def rows(result: Collected) -> list[tuple[int, str, int]]:
    piece = result.pieces[TABLE]
    assert piece.table is not None
    return [(r["id"], r["code"], r["__rowMarker__"]) for r in piece.table.to_pylist()]


@pytest.mark.parametrize("with_schema", [True, False])
def test_a_tombstone_alone_is_its_keys_delete_with_typed_key_columns(with_schema: bool) -> None:
    context = known(with_schema)
    topic = orders(with_schema=with_schema)
    result = collected(context, [topic.tombstone(order_row(3))])
    assert rows(result) == [(3, "c-0", 2)]
    piece = result.pieces[TABLE]
    assert piece.table is not None
    # Every key column, typed as the table's schema types it; the other columns null.
    assert piece.table.schema.field("id").type == pa.int64()
    assert piece.table.schema.field("code").type == pa.string()
    assert piece.table.schema.names[-1] == "__rowMarker__"
    assert all(v is None for k, v in piece.table.to_pylist()[0].items() if k not in ("id", "code", "__rowMarker__"))
    assert piece.events == {"d": 1}
    assert result.skipped.by_kind == {}


def test_a_key_with_its_schema_types_the_delete_without_an_established_schema() -> None:
    """The table is open in the slice (rows of another key), the key's Connect schema types its columns."""
    topic = orders()
    result = collected(
        CollectContext(MirrorSettings()), [topic.record("c", None, order_row(1)), topic.tombstone(order_row(3))]
    )
    assert rows(result) == [(1, "c-1", UPSERT), (3, "c-0", 2)]


@pytest.mark.parametrize("with_schema", [True, False])
def test_a_delete_then_its_tombstone_is_one_delete(with_schema: bool) -> None:
    topic = orders(with_schema=with_schema)
    records = [topic.record("d", order_row(3), None), topic.tombstone(order_row(3)), topic.tombstone(order_row(3))]
    result = collected(known(with_schema), records)
    assert rows(result) == [(3, "c-0", 2)]
    assert result.skipped.by_kind == {"tombstone": 2}
    assert result.pieces[TABLE].events == {"d": 1}


def test_the_delete_keeps_its_place_among_the_keys_rows() -> None:
    """Compaction left the tombstone of a deleted row, then the row was inserted again: delete, then insert."""
    topic = orders()
    records = [
        topic.record("c", None, order_row(1)),
        topic.tombstone(order_row(5)),
        topic.record("c", None, order_row(5, note="back")),
        topic.record("u", None, order_row(1, note="later")),
        topic.tombstone(order_row(1)),
    ]
    assert rows(collected(known(True), records)) == [
        (1, "c-1", UPSERT),
        (5, "c-2", 2),
        (5, "c-2", UPSERT),
        (1, "c-1", 1),
        (1, "c-1", 2),
    ]


@pytest.mark.parametrize("with_schema", [True, False])
def test_the_lane_leaves_a_topic_with_a_compacted_delete_to_the_record_path(with_schema: bool) -> None:
    topic = orders(with_schema=with_schema)
    pairs = mixed_workload(topic)  # its tombstones follow their deletes: the lane takes them
    assert check(known(with_schema), pairs).topics == [TOPIC]
    records = [*mixed_workload(topic, start=100), topic.tombstone(order_row(7)), *mixed_workload(topic, start=200)]
    lane = check(known(with_schema), records)
    assert lane.topics == []
    result = SliceCollector(known(with_schema)).collect(records)
    assert (7, "c-1", 2) in rows(result)


def test_the_lanes_rule_is_the_record_paths() -> None:
    """``tombstones_follow_deletes`` (vectorised) against ``DeletedKeys`` (record by record), on random topics."""
    rng = random.Random(42)
    for _ in range(300):
        size = rng.randrange(1, 30)
        kinds = [rng.choice("cudtt") for _ in range(size)]
        partitions = [rng.randrange(2) for _ in range(size)]
        keys = [f"k{rng.randrange(4)}".encode() for _ in range(size)]
        state = DeletedKeys()
        expected = True
        for kind, partition, key in zip(kinds, partitions, keys, strict=True):
            record = KafkaRecord(TOPIC, partition, 0, key, None)
            if kind == "t":
                expected &= state.follows_delete(record)
            else:
                state.saw(record, kind)
        tombstone = np.array([k == "t" for k in kinds])
        deletes = np.array([k == "d" for k in kinds])
        got = tombstones_follow_deletes(
            pa.array(partitions, pa.int32()), pa.array(range(size), pa.int64()), pa.array(keys), tombstone, deletes
        )
        assert got == expected, (kinds, partitions, keys)


def unwritable(context: CollectContext, records: list[KafkaRecord], caplog: pytest.LogCaptureFixture) -> str:
    """Both paths count the tombstone apart and write nothing for it; the one warning line."""
    with caplog.at_level(logging.WARNING, logger="connector.collect.tombstones"):
        result = collected(context, records)
    assert result.skipped.by_kind.get("tombstone_unwritable") == 1
    piece = result.pieces.get(TABLE)
    assert piece is None or piece.table is None or 2 not in piece.table.column("__rowMarker__").to_pylist()
    lines = [r.getMessage() for r in caplog.records if "tombstone_unwritable" in r.getMessage()]
    assert len(lines) >= 1
    return lines[-1]


def test_a_tombstone_of_a_table_the_mirror_does_not_hold_is_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    line = unwritable(CollectContext(MirrorSettings()), [orders().tombstone(order_row(3))], caplog)
    assert f"{TOPIC}[0]@0" in line and "no rows of the table yet" in line


def test_a_schemaless_key_of_a_table_without_known_types_is_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = orders(with_schema=False)
    records = [topic.record("c", None, order_row(1)), topic.tombstone(order_row(3))]
    line = unwritable(CollectContext(MirrorSettings()), records, caplog)
    assert f"{TOPIC}[0]@1" in line and "types of key columns ['id', 'code'] are not known" in line


def test_mirror_key_columns_missing_from_the_kafka_key_are_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mirror = MirrorSettings(tables={TOPIC: TableSettings(key_columns=["id", "uid"])})
    line = unwritable(known(True, mirror), [orders().tombstone(order_row(3))], caplog)
    assert f"{TOPIC}[0]@0" in line and "key columns ['uid'] are not in the Kafka key" in line
    assert "rebuild the table (python -m connector rebuild public.orders)" in line
