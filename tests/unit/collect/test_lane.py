"""The columnar lane gives exactly what the record-by-record path gives, and leaves it what it cannot take.

Every test collects the same records twice: once through ``SliceCollector`` alone (the reference), once
through ``ColumnarLane`` with the records it leaves going through ``SliceCollector``. The outcomes must be
equal: the same Arrow table per table (schema, nullability, values, marker order), the same events,
positions, skip counts, stopped tables and dead letters. Each test also says which topics the lane must
have taken, so a lane that silently took nothing would fail.
"""

from __future__ import annotations

import base64
import decimal
import json
import random
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from benchmarks.events import generated_events
from connector.collect.lane import LANE_MIN_RECORDS, LaneResult, collect_in_lane
from connector.collect.pieces import CollectContext, Collected
from connector.collect.record_path import SliceCollector
from connector.config import MirrorSettings, TableSettings
from connector.debezium import bulk_json
from connector.events import KafkaRecord
from connector.kcat import record_from_kcat
from connector.record_columns import records_from_arrow
from connector.spark.source import headers_needed
from tests.support.debezium import Topic, decimal_field, encode_decimal, field

DATA = Path(__file__).resolve().parents[2] / "data"
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
PLACEHOLDER = "__debezium_unavailable_value"


def as_arrow(records: list[KafkaRecord]) -> pa.Table:
    """Records as Spark's Kafka source hands them to ``foreachBatch``."""
    return pa.table(
        {
            "topic": pa.array([r.topic for r in records], pa.string()),
            "partition": pa.array([r.partition for r in records], pa.int32()),
            "offset": pa.array([r.offset for r in records], pa.int64()),
            "key": pa.array([r.key for r in records], pa.binary()),
            "value": pa.array([r.value for r in records], pa.binary()),
            "headers": pa.array([list(r.headers) for r in records], HEADERS),
        }
    )


def through_lane(context: CollectContext, records: list[KafkaRecord]) -> tuple[LaneResult, Collected]:
    lane = collect_in_lane(context, as_arrow(records), min_records=1)
    rest, problems = records_from_arrow(lane.rest)
    assert not problems
    return lane, SliceCollector(context).collect(rest).absorb(lane.collected)


def assert_same(expected: Collected, actual: Collected) -> None:
    assert actual.records == expected.records
    assert actual.skipped.by_kind == expected.skipped.by_kind
    assert actual.stopped == expected.stopped
    assert [(p.table, p.topic, p.partition, p.offset, p.error) for p in actual.poison] == [
        (p.table, p.topic, p.partition, p.offset, p.error) for p in expected.poison
    ]
    assert sorted(actual.pieces) == sorted(expected.pieces)
    for tid, want in expected.pieces.items():
        got = actual.pieces[tid]
        if want.table is None or got.table is None:
            assert got.table is want.table, tid
        else:
            assert got.table.schema == want.table.schema, tid
            assert got.table.equals(want.table), (tid, got.table.to_pylist()[:5], want.table.to_pylist()[:5])
        assert (got.key_columns, got.first, got.events, got.initial) == (
            want.key_columns,
            want.first,
            want.events,
            want.initial,
        ), tid
        assert (got.max_source_ts_ms, got.connector, got.recreate) == (
            want.max_source_ts_ms,
            want.connector,
            want.recreate,
        ), tid


def check(context: CollectContext, records: list[KafkaRecord]) -> LaneResult:
    """Collect both ways, assert the outcomes are equal, and return what the lane did."""
    expected = SliceCollector(context).collect(records)
    lane, actual = through_lane(context, records)
    assert_same(expected, actual)
    return lane


def established(context: CollectContext, records: list[KafkaRecord]) -> CollectContext:
    """The context after a first batch of ``records`` fixed each table's schema (as the ledger would)."""
    collected = SliceCollector(context).collect(records)
    schemas = {}
    for tid, piece in collected.pieces.items():
        assert piece.table is not None
        schemas[tid] = piece.table.schema.remove(piece.table.schema.get_field_index("__rowMarker__"))
    return CollectContext(
        context.mirror, established=schemas, key_columns={t: p.key_columns for t, p in collected.pieces.items()}
    )


def orders(with_schema: bool = True, partition: int = 0) -> Topic:
    return Topic(
        "dbserver1.public.orders",
        [
            field("id", "int64", optional=False),
            field("code", "string", optional=False),
            field("note", "string"),
            field("qty", "int16"),
            field("ratio", "float"),
            field("price", "double"),
            field("paid", "boolean"),
            decimal_field("amount", 12, 2),
            field("blob", "bytes"),
            field("created", "int64", "io.debezium.time.MicroTimestamp"),
            field("day", "int32", "io.debezium.time.Date"),
            field("at", "string", "io.debezium.time.ZonedTimestamp"),
            field("uid", "string", "io.debezium.data.Uuid"),
        ],
        ["id", "code"],
        with_schema=with_schema,
        partition=partition,
    )


def order_row(i: int, **changes: Any) -> dict[str, Any]:
    row = {
        "id": i,
        "code": f"c-{i % 3}",
        "note": None if i % 4 == 0 else f'note \u00e9 {i} "quoted" \\ back',
        "qty": i % 300,
        "ratio": i / 8,
        "price": i * 1.25,
        "paid": i % 2 == 0,
        "amount": encode_decimal(f"{i * 7}.{i % 100:02d}", 2),
        "blob": "AAEC" if i % 5 else None,
        "created": 1_700_000_000_000_000 + i,
        "day": 19_000 + i,
        "at": f"2024-05-01T08:30:00.{i:06d}Z",
        "uid": f"00000000-0000-0000-0000-{i:012d}",
    }
    row.update(changes)
    return row


def mixed_workload(topic: Topic, start: int = 0) -> list[KafkaRecord]:
    """Snapshot reads, creates, updates (with and without ``before``), key changes, deletes, tombstones."""
    out = [topic.record("r", None, order_row(i)) for i in range(start, start + 5)]
    out += [topic.record("c", None, order_row(i), ts_ms=1_700_000_000_000 + i) for i in range(start + 5, start + 12)]
    out.append(topic.record("u", None, order_row(start + 1, note="updated")))
    # REPLICA IDENTITY FULL: an update with before; one that keeps the key, one that changes it.
    out.append(topic.record("u", order_row(start + 2), order_row(start + 2, qty=7)))
    out.append(topic.record("u", order_row(start + 3), order_row(start + 300, note="moved")))
    out.append(topic.record("d", {"id": start + 4, "code": f"c-{(start + 4) % 3}"}, None))
    out.append(topic.tombstone({"id": start + 4, "code": f"c-{(start + 4) % 3}"}))
    out.append(topic.record("d", order_row(start + 5), None))
    out.append(topic.tombstone(order_row(start + 5)))
    out.append(topic.record("c", None, order_row(start + 6, note=None, blob=None, amount=None)))
    return out


def test_the_benchmark_events_take_the_lane_with_and_without_schemas() -> None:
    with_schema = sorted(generated_events(3_000, True, 4), key=lambda r: (r.partition, r.offset))
    lane = check(CollectContext(MirrorSettings()), with_schema)
    assert lane.topics == ["bench.public.orders"]
    assert lane.rest.num_rows == 0
    schemaless = sorted(generated_events(3_000, False, 4), key=lambda r: (r.partition, r.offset))
    first_batch = CollectContext(MirrorSettings())
    assert check(first_batch, schemaless).topics == ["bench.public.orders"]
    assert check(established(first_batch, schemaless), schemaless).topics == ["bench.public.orders"]


def schemaless_first_batch(change: str) -> list[KafkaRecord]:
    """A schemaless table's first batch, with one kind of column the row path infers a type for."""
    topic = orders(with_schema=False)
    records = mixed_workload(topic)
    if change == "nested value":
        records.append(topic.record("c", None, order_row(40, note={"a": 1})))
    elif change == "ints and strings":
        records.append(topic.record("c", None, order_row(40, qty="many")))
    elif change == "whole doubles":
        records = [r._replace(value=(r.value or b"").replace(b'"price":', b'"price":2.0,"p":')) for r in records]
    elif change == "ints and doubles":
        records.append(topic.record("c", None, order_row(40, qty=2.5)))
    elif change == "int beyond int64":
        big = topic.record("c", None, order_row(40, qty=12345))
        records.append(big._replace(value=(big.value or b"").replace(b'"qty":12345', b'"qty":18446744073709551616')))
    elif change == "a column the first row lacks":
        records.append(topic.record("c", None, {**order_row(40), "extra": 1}))
    elif change == "a column of nulls":
        records = [r._replace(value=(r.value or b"").replace(b'"note":', b'"empty":null,"note":')) for r in records]
    elif change == "a delete first":
        records.insert(0, topic.record("d", {"id": 99, "code": "c-0"}, None))
    return records


@pytest.mark.parametrize(
    ("change", "lane_takes_it"),
    [
        ("none", True),
        ("ints and doubles", True),
        ("a column of nulls", True),
        ("nested value", False),
        ("ints and strings", False),
        ("whole doubles", False),
        ("int beyond int64", False),
        ("a column the first row lacks", False),
        ("a delete first", False),
    ],
)
@pytest.mark.parametrize("blocks", ["one block", "many blocks"])
def test_a_schemaless_tables_first_batch_infers_types_as_the_row_path(
    change: str, lane_takes_it: bool, blocks: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No schema and no established one: the lane infers column types and order exactly as the row path.

    With many blocks Arrow infers each block apart and unifies them (a block of deletes has no 'after').
    """
    if blocks == "many blocks":
        monkeypatch.setattr(bulk_json, "_CHUNK_BYTES", 1)  # a chunk, and so a block, per line
    records = schemaless_first_batch(change)
    for policy in ("stop", "dead-letter"):
        lane = check(CollectContext(MirrorSettings(poison_policy=policy)), records)
        assert lane.topics == (["dbserver1.public.orders"] if lane_takes_it else [])


@pytest.mark.parametrize("replay_safe_inserts", [False, True])
def test_every_op_key_changes_and_tombstones_mark_alike(replay_safe_inserts: bool) -> None:
    mirror = MirrorSettings(replay_safe_inserts=replay_safe_inserts)
    records = mixed_workload(orders())
    lane = check(CollectContext(mirror), records)
    assert lane.topics == ["dbserver1.public.orders"]
    piece = lane.collected.pieces["public.orders"]
    assert piece.table is not None
    # The key change became a delete of the old key, then an insert of the new one.
    rows = piece.table.to_pylist()
    moved = next(i for i, r in enumerate(rows) if r["id"] == 300)
    assert rows[moved - 1]["id"] == 3 and rows[moved - 1]["__rowMarker__"] == 2
    assert rows[moved]["__rowMarker__"] == (4 if replay_safe_inserts else 0)


def test_schemaless_tables_with_an_established_schema_mark_alike() -> None:
    topic = orders(with_schema=False)
    first = mixed_workload(topic)
    context = established(CollectContext(MirrorSettings()), first)
    lane = check(context, mixed_workload(topic, start=20))
    assert lane.topics == ["dbserver1.public.orders"]


def test_interleaved_partitions_and_several_topics() -> None:
    a0, a1 = orders(partition=0), orders(partition=1)
    customers = Topic(
        "dbserver1.public.customers", [field("id", "int32", optional=False), field("name", "string")], ["id"]
    )
    records: list[KafkaRecord] = []
    for i in range(30):
        records.append((a0 if i % 2 else a1).record("c", None, order_row(i)))
        records.append(customers.record("c", None, {"id": i, "name": f"n{i}"}))
    lane = check(CollectContext(MirrorSettings()), records)
    assert sorted(lane.topics) == ["dbserver1.public.customers", "dbserver1.public.orders"]


def test_an_established_column_the_schema_no_longer_has_stays_as_nulls() -> None:
    topic = orders()
    context = established(CollectContext(MirrorSettings()), mixed_workload(topic))
    slim = Topic(
        "dbserver1.public.orders",
        [field("id", "int64", optional=False), field("code", "string", optional=False)],
        ["id", "code"],
    )
    records = [slim.record("c", None, {"id": i, "code": "c-0"}) for i in range(5)]
    lane = check(context, records)
    assert lane.topics == ["dbserver1.public.orders"]
    piece = lane.collected.pieces["public.orders"]
    assert piece.table is not None and piece.table.column("note").null_count == 5


def test_real_debezium_postgres_output_marks_alike() -> None:
    taken: dict[str, list[str]] = {}
    for path in sorted((DATA / "real_pg").glob("*.jsonl")):
        records = [record_from_kcat(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
        for policy in ("stop", "dead-letter"):
            mirror = MirrorSettings(truncate_policy="ignore", poison_policy=policy)
            taken[path.stem] = check(CollectContext(mirror), records).topics
    # Snapshot reads, creates, deletes with tombstones and the REPLICA IDENTITY FULL key changes are the lane's.
    assert "dbserver1.public.full_identity" in taken["update_pk_change"]
    assert "dbserver1.public.composite_key" in taken["update_pk_change"]
    assert taken["delete_tombstone"] and taken["snapshot_read"] and taken["create"]
    # A TOASTed placeholder is not.
    assert "dbserver1.public.toasted" not in taken["update_toast_unchanged"]


def leave(records: list[KafkaRecord], context: CollectContext | None = None) -> None:
    """The lane must leave these records' topic to the row path, and the outcome stays the row path's."""
    lane = check(context or CollectContext(MirrorSettings()), records)
    assert lane.topics == []
    assert lane.rest.num_rows == len(records)


@pytest.mark.parametrize(
    "changes",
    [
        {"note": PLACEHOLDER},
        {"blob": base64.b64encode(PLACEHOLDER.encode()).decode()},
    ],
)
def test_a_toasted_placeholder_leaves_the_topic_to_the_row_path(changes: dict[str, Any]) -> None:
    topic = orders()
    records = mixed_workload(topic)
    records.append(topic.record("u", None, order_row(1, **changes)))
    leave(records)
    leave(records, CollectContext(MirrorSettings(poison_policy="dead-letter")))
    deleted = [*mixed_workload(topic), topic.record("d", order_row(2, **changes), None)]
    leave(deleted)


def test_a_value_merely_containing_the_placeholder_text_takes_the_lane() -> None:
    """The row path fills only values equal to the placeholder; one that contains it is ordinary text."""
    topic = orders()
    records = [*mixed_workload(topic), topic.record("u", None, order_row(1, note=f"see {PLACEHOLDER}"))]
    assert check(CollectContext(MirrorSettings()), records).topics == [topic.name]


@pytest.mark.parametrize(
    "damage",
    [
        "truncated",
        "bit flip",
        "garbage",
        "NaN",
        "-Infinity",
        "NaN outside the rows",
        "Infinity in a list",
        "invalid UTF-8",
        "invalid UTF-8 key",
        "nested key",
        "no key",
        "pretty printed",
        "truncate op",
        "another schema",
    ],
)
def test_records_the_lane_cannot_vouch_for_leave_the_topic_to_the_row_path(damage: str) -> None:
    topic = orders()
    records = mixed_workload(topic)
    victim = records[6]
    value = victim.value or b""
    if damage == "truncated":
        records[6] = victim._replace(value=value[: len(value) // 2])
    elif damage == "bit flip":
        records[6] = victim._replace(value=value.replace(b'"op":"c"', b'"op":"x"'))
    elif damage == "garbage":
        records[6] = victim._replace(value=b"\x00\xffnot json")
    elif damage == "NaN":
        records[6] = victim._replace(value=value.replace(b'"price":7.5', b'"price":NaN'))
    elif damage == "-Infinity":
        records[6] = victim._replace(value=value.replace(b'"ratio":0.75', b'"ratio":-Infinity'))
    elif damage == "NaN outside the rows":
        records[6] = victim._replace(value=value.replace(b'"op":"c"', b'"op":"c","transaction":{"lag":NaN}'))
    elif damage == "Infinity in a list":
        records[6] = victim._replace(value=value.replace(b'"op":"c"', b'"op":"c","extra":[1.5,Infinity]'))
    elif damage == "invalid UTF-8":
        records[6] = victim._replace(value=value.replace(b'"code":"c-0"', b'"code":"c-\xb1"'))
    elif damage == "invalid UTF-8 key":
        records[6] = victim._replace(key=(victim.key or b"").replace(b'"c-0"', b'"c-\xb1"'))
        assert records[6].key != victim.key
    elif damage == "nested key":
        records[6] = victim._replace(key=b'{"id":{"deep":1},"code":"c-0"}')
    elif damage == "no key":
        records[6] = victim._replace(key=None)
    elif damage == "pretty printed":
        records[6] = victim._replace(value=orjson.dumps(orjson.loads(value), option=orjson.OPT_INDENT_2))
    elif damage == "truncate op":
        records.insert(6, topic.truncate())
    elif damage == "another schema":
        other = Topic(
            "dbserver1.public.orders", [field("id", "int64", optional=False), field("code", "string")], ["id", "code"]
        )
        records[6] = other.record("c", None, {"id": 6, "code": "c-0"})._replace(offset=victim.offset)
    if damage in ("NaN", "-Infinity", "NaN outside the rows", "Infinity in a list", "invalid UTF-8"):
        assert records[6].value != value
    for policy in ("stop", "dead-letter"):
        leave(records, CollectContext(MirrorSettings(poison_policy=policy, truncate_policy="ignore")))


def test_tables_the_lane_never_takes() -> None:
    records = mixed_workload(orders())
    leave(records, CollectContext(MirrorSettings(toast_policy="keep-last")))
    leave(records, CollectContext(MirrorSettings(decimal_columns={"public.orders.note": "10,2"})))
    leave(records, CollectContext(MirrorSettings(), stopped=frozenset({"public.orders"})))
    backwards = [records[1], records[0], *records[2:]]
    leave(backwards)
    heartbeat = Topic("__debezium-heartbeat.dbserver1", [field("id", "int32", optional=False)], ["id"])
    leave([heartbeat.record("c", None, {"id": 1})])


def test_a_value_that_does_not_convert_leaves_the_topic_to_the_row_path() -> None:
    topic = orders()
    records = mixed_workload(topic)
    records.append(topic.record("c", None, order_row(50, qty=70_000)))  # int16 overflow
    records.append(topic.record("c", None, order_row(51, amount="not base64!")))
    for policy in ("stop", "dead-letter"):
        leave(records, CollectContext(MirrorSettings(poison_policy=policy)))


RETYPED_VALUES: list[Any] = [2.5, 2.0, 2, -0.0, 10**19, 2**53 + 1.5, "x", "2024-05-01T08:30:00Z", True, None, {"a": 1}]


def retyped(value: bytes, rng: random.Random) -> bytes:
    """The value with one row column set to a value of another kind (what schemaless inference must follow)."""
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError:
        return value
    payload = document.get("payload", document) if isinstance(document, dict) else None
    row = payload.get("after") or payload.get("before") if isinstance(payload, dict) else None
    if not isinstance(row, dict) or not row:
        return value
    row[rng.choice(sorted(row))] = rng.choice(RETYPED_VALUES)
    return orjson.dumps(document)


@pytest.mark.parametrize("with_schema", [True, False])
def test_a_field_outside_the_rows_changing_kind_between_chunks_is_parsed_safely(
    with_schema: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arrow's reader crashed the process on a string in one block and an object in the next: chunks stay apart."""
    monkeypatch.setattr(bulk_json, "_CHUNK_BYTES", 300)
    records = mixed_workload(orders(with_schema=with_schema))
    half = len(records) // 2
    extra = [b'"transaction":"t-1",', b'"transaction":{"id":"t-1","total_order":1},']
    records = [
        r._replace(value=(r.value or b"").replace(b'"op":', extra[i >= half] + b'"op":')) if r.value else r
        for i, r in enumerate(records)
    ]
    assert check(CollectContext(MirrorSettings()), records).topics == ["dbserver1.public.orders"]


def test_fields_a_schema_does_not_declare_are_ignored_alike_and_not_built_by_the_lane() -> None:
    """With a schema, the lane parses only the envelope fields it reads (``bulk_json.parse_envelopes``).

    A row field the schema lacks is ignored by both paths, as Kafka Connect's JsonConverter does; a field outside
    the rows that is a string in one record and an object in the next, in one chunk, would stop Arrow's reader if
    the lane built it: the lane takes the topic all the same.
    """
    topic = orders()
    records = mixed_workload(topic)
    records[5] = records[5]._replace(value=(records[5].value or b"").replace(b'"code":"c-2"', b'"code":"c-2","junk":5'))
    transaction = [b'"transaction":"t-1",', b'"transaction":{"id":"t-1","total_order":1},']
    records = [
        r._replace(value=(r.value or b"").replace(b'"op":', transaction[i % 2] + b'"op":')) if r.value else r
        for i, r in enumerate(records)
    ]
    assert b'"junk":5' in (records[5].value or b"")
    lane = check(CollectContext(MirrorSettings()), records)
    assert lane.topics == ["dbserver1.public.orders"]
    piece = lane.collected.pieces["public.orders"]
    assert piece.table is not None and "junk" not in piece.table.column_names
    # Without a schema the lane must see every row field (a new column), so it builds them all and leaves the
    # topic whose transaction block changes kind to the record path.
    schemaless = [r._replace(value=orjson.dumps(orjson.loads(r.value)["payload"])) if r.value else r for r in records]
    assert check(CollectContext(MirrorSettings()), schemaless).topics == []


@pytest.mark.parametrize("with_schema", [True, False])
def test_randomly_damaged_batches_collect_alike(with_schema: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded damage (truncation, bit flips, splices, garbage, keys, retyped values): both ways agree.

    Without schemas (and no established one) this is the lane's type inference against the row path's.
    """
    rng = random.Random(20261121)
    if not with_schema:
        monkeypatch.setattr(bulk_json, "_CHUNK_BYTES", 300)  # many chunks, each inferred apart
    topic = orders(with_schema=with_schema)
    base = mixed_workload(topic) + mixed_workload(topic, start=40)
    donors = [r.value or b"" for r in base]
    taken = 0
    for trial in range(150):
        records = list(base)
        for _ in range(rng.choice([0, 0, 1, 2])):
            index = rng.randrange(len(records))
            victim = records[index]
            value = victim.value or b""
            kind = rng.choice(["truncate", "flip", "splice", "garbage", "key", "retype", "retype"])
            if kind == "truncate":
                records[index] = victim._replace(value=value[: rng.randrange(len(value) + 1)])
            elif kind == "flip" and value:
                data = bytearray(value)
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
                records[index] = victim._replace(value=bytes(data))
            elif kind == "splice":
                donor = rng.choice(donors)
                cut = rng.randrange(len(value) + 1)
                records[index] = victim._replace(value=value[:cut] + donor[rng.randrange(len(donor) + 1) :])
            elif kind == "garbage":
                records[index] = victim._replace(value=rng.randbytes(rng.randrange(64)))
            elif kind == "retype":
                records[index] = victim._replace(value=retyped(value, rng))
            elif kind == "key" and victim.key:
                key = bytearray(victim.key)
                key[rng.randrange(len(key))] ^= 1 << rng.randrange(8)
                records[index] = victim._replace(key=bytes(key))
        policy = "dead-letter" if trial % 2 else "stop"
        lane = check(CollectContext(MirrorSettings(poison_policy=policy)), records)
        taken += len(lane.topics)
    assert taken > 40  # the undamaged trials, at least, went through the lane


def test_headers_are_read_only_when_a_table_can_use_them() -> None:
    assert not headers_needed(MirrorSettings())
    assert headers_needed(MirrorSettings(toast_policy="keep-last"))
    assert headers_needed(MirrorSettings(tables={"dbserver1.public.t": TableSettings(toast_policy="keep-last")}))
    assert headers_needed(MirrorSettings(poison_policy="dead-letter"))
    records = mixed_workload(orders())
    without = as_arrow(records).drop_columns(["headers"])
    found, problems = records_from_arrow(without)
    assert not problems
    assert found == [r._replace(headers=()) for r in records]


def delta_safe_types() -> Topic:
    """Columns whose Debezium types the landing zone writes as Delta-safe types (README, "Types")."""
    vsd = {
        "field": "free",
        "type": "struct",
        "optional": True,
        "name": "io.debezium.data.VariableScaleDecimal",
        "fields": [field("scale", "int32", optional=False), field("value", "bytes", optional=False)],
    }
    return Topic(
        "dbserver1.public.typed",
        [
            field("id", "int64", optional=False),
            vsd,
            decimal_field("wide", 65, 30),
            decimal_field("unsigned", 20, 0),
            field("t_ms", "int32", "io.debezium.time.Time"),
            field("t_us", "int64", "io.debezium.time.MicroTime"),
            field("t_ns", "int64", "io.debezium.time.NanoTime"),
            field("ts_ms", "int64", "io.debezium.time.Timestamp"),
            field("ts_ns", "int64", "io.debezium.time.NanoTimestamp"),
            field("zoned", "string", "io.debezium.time.ZonedTimestamp"),
            {**field("bits12", "bytes", "io.debezium.data.Bits"), "parameters": {"length": "12"}},
            {**field("bits80", "bytes", "io.debezium.data.Bits"), "parameters": {"length": "80"}},
        ],
        ["id"],
    )


def typed_row(i: int) -> dict[str, Any]:
    free = f"{i}.{i:020d}" if i % 2 else f"-{i}E-{i % 25}"
    scale = max(0, -int(decimal.Decimal(free).as_tuple().exponent))
    return {
        "id": i,
        "free": {"scale": scale, "value": encode_decimal(free, scale)},
        "wide": encode_decimal(f"{i}{'7' * 34}.{i:030d}", 30),
        "unsigned": encode_decimal(str(2**64 - 1 - i), 0),
        "t_ms": (i * 7_777_777) % 86_400_000,
        "t_us": (i - 5) * 3_600_000_000 * 100,  # MySQL TIME: negative and beyond a day
        "t_ns": i * 1_234_567_891,
        "ts_ms": 1_700_000_000_000 + i,
        "ts_ns": (-1) ** i * (1_700_000_000_123_456_789 + i),
        "zoned": f"2024-05-01T08:30:00.{i:07d}Z",
        "bits12": base64.b64encode(bytes([i % 256, i % 16])).decode(),
        "bits80": base64.b64encode(bytes([i % 256, 1])).decode(),
    }


def test_delta_safe_types_convert_in_the_lane_as_in_the_row_path() -> None:
    topic = delta_safe_types()
    records = [topic.record("r", None, typed_row(i)) for i in range(12)]
    records.append(topic.record("u", typed_row(3), {**typed_row(3), "free": None, "t_us": None}))
    records.append(topic.record("d", typed_row(4), None))
    lane = check(CollectContext(MirrorSettings()), records)
    assert lane.topics == [topic.name]
    piece = lane.collected.pieces["public.typed"]
    assert piece.table is not None
    schema = piece.table.schema
    assert schema.field("free").type == schema.field("wide").type == schema.field("t_us").type == pa.string()
    assert schema.field("ts_ns").type == pa.timestamp("us") and schema.field("bits12").type == pa.int64()
    assert all(f.nullable for f in schema if f.name != "__rowMarker__")  # key columns too


def test_declared_and_refused_decimals_are_the_row_paths() -> None:
    """A declared decimal or a refused wide decimal leaves the table to the row path, which decides alike."""
    topic = delta_safe_types()
    records = [topic.record("r", None, typed_row(i)) for i in range(4)]
    declared = MirrorSettings(decimal_columns={"public.typed.unsigned": "20,0"})
    leave(records, CollectContext(declared))
    for policy in ("stop", "dead-letter"):
        refused = MirrorSettings(wide_decimals="stop", poison_policy=policy)
        leave(records, CollectContext(refused))
        outcome = SliceCollector(CollectContext(refused)).collect(records)
        # A refused type stops the table whatever the poison policy: it is a schema matter, not a bad record.
        assert "mirror.wide_decimals" in outcome.stopped["public.typed"]
        assert "dbserver1.public.typed[0]@0" in outcome.stopped["public.typed"]
        assert not outcome.poison


def test_a_declared_decimal_that_cannot_hold_a_value_stops_the_table_naming_the_setting() -> None:
    topic = delta_safe_types()
    records = [topic.record("r", None, typed_row(1))]  # free: 1.00000000000000000001 (scale 20); wide: 65 digits
    for mirror, setting in (
        (MirrorSettings(decimal_columns={"public.typed.free": "38,10"}), "mirror.decimal_columns['public.typed.free']"),
        (MirrorSettings(variable_scale_decimal="38,10"), "mirror.variable_scale_decimal"),
        (MirrorSettings(decimal_columns={"public.typed.wide": "38,30"}), "mirror.decimal_columns['public.typed.wide']"),
    ):
        outcome = SliceCollector(CollectContext(mirror)).collect(records)
        assert setting in outcome.stopped["public.typed"], outcome.stopped
        assert "dbserver1.public.typed[0]@0" in outcome.stopped["public.typed"]
    fits = MirrorSettings(decimal_columns={"public.typed.free": "38,20"})
    piece = SliceCollector(CollectContext(fits)).collect(records).pieces["public.typed"]
    assert piece.table is not None
    assert piece.table.schema.field("free").type == pa.decimal128(38, 20)
    assert piece.table.column("free").to_pylist() == [decimal.Decimal("1.00000000000000000001")]


def test_a_table_without_key_columns_is_collected_alike_by_the_lane_and_the_record_path() -> None:
    """A keyless table (null Kafka keys): its inserts, duplicates included, are inserts (0) on both paths."""
    keyless = Topic("db.public.nokey", [field("id", "int32", optional=False), field("name", "string")], [])
    records = [keyless.record(op, None, {"id": i % 2, "name": "same"}, key_row=None) for i, op in enumerate("ccrc")]
    records = [KafkaRecord(r.topic, r.partition, r.offset, None, r.value) for r in records]
    context = CollectContext(mirror=MirrorSettings(replay_safe_inserts=True))
    lane = check(context, records)
    assert lane.topics == ["db.public.nokey"]
    piece = lane.collected.pieces["public.nokey"]
    assert piece.key_columns == ()
    assert piece.table is not None
    assert piece.table.column("__rowMarker__").to_pylist() == [0, 0, 0, 0]  # no key for an upsert to match
    assert piece.table.column("id").to_pylist() == [0, 1, 0, 1]


def test_an_update_of_a_keyless_table_is_left_to_the_record_path_which_rebuilds_it() -> None:
    keyless = Topic("db.public.nokey", [field("id", "int32", optional=False), field("name", "string")], [])
    records = [keyless.record("c", None, {"id": 1, "name": "a"}, key_row=None)]
    records.append(keyless.record("u", {"id": 1, "name": "a"}, {"id": 1, "name": "b"}, key_row=None))
    records = [KafkaRecord(r.topic, r.partition, r.offset, None, r.value) for r in records]
    context = CollectContext(mirror=MirrorSettings())
    lane = check(context, records)
    assert lane.topics == []
    collected = SliceCollector(context).collect(records)
    assert collected.resets == {"public.nokey": "keyless_change"}
    assert "db.public.nokey[0]@1: an update of table public.nokey" in collected.stopped["public.nokey"]


def test_topics_of_few_records_go_to_the_record_path_and_collect_alike() -> None:
    """A batch touching many tables with a change or two each: the lane's fixed cost per topic would dominate.

    Below ``LANE_MIN_RECORDS`` records in the slice a topic is the record path's; at it, the lane's. Either way
    the outcome is the record path's, also when a big topic shares the slice with small ones.
    """
    context = CollectContext(MirrorSettings())
    big, small = orders(), Topic("dbserver1.public.tiny", [field("id", "int32", optional=False)], ["id"])
    records = [big.record("c", None, order_row(i)) for i in range(LANE_MIN_RECORDS)]
    records += [small.record("c", None, {"id": i}) for i in range(LANE_MIN_RECORDS - 1)]
    expected = SliceCollector(context).collect(records)
    lane = collect_in_lane(context, as_arrow(records))
    assert lane.topics == [big.name]
    assert lane.rest.num_rows == LANE_MIN_RECORDS - 1
    rest, problems = records_from_arrow(lane.rest)
    assert not problems
    assert_same(expected, SliceCollector(context).collect(rest).absorb(lane.collected))
    assert collect_in_lane(context, as_arrow(records[1:])).topics == []
