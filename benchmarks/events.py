"""The benchmark's change events: Debezium JsonConverter records of one 10-column table.

The unit tests use them too (``tests/unit/collect/test_lane.py`` checks the columnar lane against the record
path on them), so they live here rather than inside a benchmark runner.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import orjson

from connector.events import KafkaRecord

BENCH_TOPIC = "bench.public.orders"

_VALUE_SCHEMA = {
    "type": "struct",
    "name": "bench.public.orders.Envelope",
    "fields": [
        {
            "field": field,
            "type": "struct",
            "optional": True,
            "name": "bench.public.orders.Value",
            "fields": [
                {"field": "id", "type": "int64", "optional": False},
                {"field": "customer_id", "type": "int32", "optional": False},
                {"field": "status", "type": "string", "optional": True},
                {"field": "note", "type": "string", "optional": True},
                {
                    "field": "amount",
                    "type": "bytes",
                    "optional": True,
                    "name": "org.apache.kafka.connect.data.Decimal",
                    "parameters": {"scale": "2", "connect.decimal.precision": "12"},
                },
                {"field": "quantity", "type": "int32", "optional": True},
                {"field": "ratio", "type": "double", "optional": True},
                {"field": "paid", "type": "boolean", "optional": True},
                {"field": "created_at", "type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp"},
                {"field": "ship_date", "type": "int32", "optional": True, "name": "io.debezium.time.Date"},
            ],
        }
        for field in ("before", "after")
    ]
    + [
        {"field": "op", "type": "string", "optional": False},
        {"field": "ts_ms", "type": "int64", "optional": True},
    ],
}
_KEY_SCHEMA = {"type": "struct", "fields": [{"field": "id", "type": "int64", "optional": False}]}


def generated_events(count: int, with_schema: bool, partitions: int = 1) -> Iterator[KafkaRecord]:
    """``count`` Debezium events of a 10-column table: 70% creates, 25% updates, 5% deletes."""
    amount = base64.b64encode((123456).to_bytes(4, "big", signed=True)).decode()
    next_offset = [0] * partitions
    for offset in range(count):
        row_id, op = _id_and_op(offset)
        row = {
            "id": row_id,
            "customer_id": offset % 9973,
            "status": "shipped" if offset % 3 else "new",
            "note": f"order note number {offset}",
            "amount": amount,
            "quantity": offset % 17,
            "ratio": offset / 7.0,
            "paid": offset % 2 == 0,
            "created_at": 1_700_000_000_000_000 + offset,
            "ship_date": 19_000 + offset % 365,
        }
        payload: dict[str, object] = {
            "before": {"id": row_id} if op == "d" else None,
            "after": None if op == "d" else row,
            "source": {"connector": "postgresql", "db": "bench"},
            "op": op,
            "ts_ms": 1_700_000_000_000 + offset,
        }
        key: dict[str, object] = {"id": row_id}
        value: dict[str, object] = payload
        if with_schema:
            key = {"schema": _KEY_SCHEMA, "payload": key}
            value = {"schema": _VALUE_SCHEMA, "payload": payload}
        # As Debezium does: a key always goes to the same partition, so per-key order is the partition's order.
        partition = row_id % partitions
        yield KafkaRecord(BENCH_TOPIC, partition, next_offset[partition], orjson.dumps(key), orjson.dumps(value))
        next_offset[partition] += 1


def _id_and_op(offset: int) -> tuple[int, str]:
    """The row and the op of the ``offset``-th event: 70% creates, 25% updates, 5% deletes of earlier ids."""
    if offset % 20 < 14:
        return offset, "c"
    return offset // 2, "u" if offset % 20 < 19 else "d"


def expected_ids(count: int) -> set[int]:
    """The ids a mirror of the first ``count`` generated events holds (a create, or an update, puts a row there)."""
    present: set[int] = set()
    for offset in range(count):
        row_id, op = _id_and_op(offset)
        if op == "d":
            present.discard(row_id)
        else:
            present.add(row_id)
    return present
