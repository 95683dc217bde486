"""The benchmark's change events: Debezium JsonConverter records of one 10-column table.

Each carries the whole envelope Debezium 3.x's PostgreSQL connector writes (``postgres_envelope``: the 17-field
``source`` block, ``transaction``, ``ts_us``, ``ts_ns``; as captured in ``tests/data/real_pg``), so a benchmark
parses as many bytes per event as a running service does, not a best case. The unit tests use them too
(``tests/unit/collect/test_lane.py`` checks the columnar lane against the record path on them), so they live
here rather than inside a benchmark runner.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping

import orjson

from connector.events import KafkaRecord

BENCH_TOPIC = "bench.public.orders"


def _field(field: str, kind: str, optional: bool = True, /, **more: object) -> dict[str, object]:
    """One field of a Connect schema, its keys in JsonConverter's order (the values' bytes depend on it)."""
    return {"field": field, "type": kind, "optional": optional, **more}


_ROW_FIELDS = [
    _field("id", "int64", False),
    _field("customer_id", "int32", False),
    _field("status", "string"),
    _field("note", "string"),
    _field(
        "amount",
        "bytes",
        name="org.apache.kafka.connect.data.Decimal",
        parameters={"scale": "2", "connect.decimal.precision": "12"},
    ),
    _field("quantity", "int32"),
    _field("ratio", "double"),
    _field("paid", "boolean"),
    _field("created_at", "int64", name="io.debezium.time.MicroTimestamp"),
    _field("ship_date", "int32", name="io.debezium.time.Date"),
]
# Debezium 3.7's PostgreSQL ``source`` block, as in tests/data/real_pg.
_SOURCE_FIELDS = [
    _field("version", "string", False),
    _field("connector", "string", False),
    _field("name", "string", False),
    _field("ts_ms", "int64", False),
    _field(
        "snapshot",
        "string",
        name="io.debezium.data.Enum",
        version=1,
        parameters={"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
        default="false",
    ),
    _field("db", "string", False),
    _field("sequence", "string"),
    _field("ts_us", "int64"),
    _field("ts_ns", "int64"),
    _field("schema", "string", False),
    _field("table", "string", False),
    _field("txId", "int64"),
    _field("lsn", "int64"),
    _field("xmin", "int64"),
    _field("origin", "string"),
    _field("origin_lsn", "int64"),
]
_TRANSACTION_FIELDS = [
    _field("id", "string", False),
    _field("total_order", "int64", False),
    _field("data_collection_order", "int64", False),
]
_VALUE_SCHEMA = {
    "type": "struct",
    "name": "bench.public.orders.Envelope",
    "fields": [
        _field(side, "struct", name="bench.public.orders.Value", fields=_ROW_FIELDS) for side in ("before", "after")
    ]
    + [
        _field(
            "source", "struct", False, name="io.debezium.connector.postgresql.Source", version=1, fields=_SOURCE_FIELDS
        ),
        _field("transaction", "struct", name="event.block", version=1, fields=_TRANSACTION_FIELDS),
        _field("op", "string", False),
        _field("ts_ms", "int64"),
        _field("ts_us", "int64"),
        _field("ts_ns", "int64"),
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
        before, after = ({"id": row_id}, None) if op == "d" else (None, row)
        payload = postgres_envelope(before, after, op, 1_700_000_000_000 + offset, "orders", offset)
        key: dict[str, object] = {"id": row_id}
        value: dict[str, object] = payload
        if with_schema:
            key = {"schema": _KEY_SCHEMA, "payload": key}
            value = {"schema": _VALUE_SCHEMA, "payload": payload}
        # As Debezium does: a key always goes to the same partition, so per-key order is the partition's order.
        partition = row_id % partitions
        yield KafkaRecord(BENCH_TOPIC, partition, next_offset[partition], orjson.dumps(key), orjson.dumps(value))
        next_offset[partition] += 1


def postgres_envelope(
    before: Mapping[str, object] | None,
    after: Mapping[str, object] | None,
    op: str,
    ts_ms: int,
    table: str,
    position: int,
) -> dict[str, object]:
    """A change event's payload as Debezium 3.x's PostgreSQL connector writes it, of database ``bench``.

    ``position`` stands for the event's place in the WAL (its LSN and transaction id grow with it).
    """
    lsn = 26_000_000 + 64 * position
    source = {
        "version": "3.7.0.Final",
        "connector": "postgresql",
        "name": "bench",
        "ts_ms": ts_ms - 300,
        "snapshot": "false",
        "db": "bench",
        "sequence": f'[null,"{lsn}"]',
        "ts_us": (ts_ms - 300) * 1_000,
        "ts_ns": (ts_ms - 300) * 1_000_000,
        "schema": "public",
        "table": table,
        "txId": 700 + position,
        "lsn": lsn,
        "xmin": None,
        "origin": None,
        "origin_lsn": None,
    }
    return {
        "before": before,
        "after": after,
        "source": source,
        "transaction": None,
        "op": op,
        "ts_ms": ts_ms,
        "ts_us": ts_ms * 1_000 + 224,
        "ts_ns": ts_ms * 1_000_000 + 224_314,
    }


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
