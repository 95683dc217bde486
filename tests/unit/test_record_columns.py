"""Kafka headers from Spark's Arrow batches become each record's ``(name, value)`` pairs, as Kafka held them."""

from __future__ import annotations

import pyarrow as pa

from connector.record_columns import records_from_arrow

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])


def batch(headers: list[list[dict[str, object]] | None]) -> pa.Table:
    count = len(headers)
    return pa.table(
        {
            "topic": pa.array(["t"] * count, pa.string()),
            "partition": pa.array([0] * count, pa.int32()),
            "offset": pa.array(range(count), pa.int64()),
            "key": pa.array([None] * count, pa.binary()),
            "value": pa.array([b"v"] * count, pa.binary()),
            "headers": pa.array(headers, pa.list_(HEADER)),
        }
    )


def test_every_header_keeps_its_order_repeats_and_null_values() -> None:
    raw = [
        [{"key": "traceparent", "value": b"a"}, {"key": "empty", "value": None}, {"key": "traceparent", "value": b"b"}],
        None,
        [],
        [{"key": "__debezium.context.taskId", "value": b"0"}],
    ]
    records, problems = records_from_arrow(batch(raw))
    assert not problems
    assert [r.headers for r in records] == [
        (("traceparent", b"a"), ("empty", None), ("traceparent", b"b")),
        (),
        (),
        (("__debezium.context.taskId", b"0"),),
    ]


def test_sliced_and_chunked_batches_keep_each_records_own_headers() -> None:
    """Spark hands several record batches; a filtered table (the columnar lane's rest) holds slices."""
    raw = [[{"key": f"h{i}", "value": str(i).encode()}] * (i % 3) for i in range(10)]
    table = batch(raw)
    chunked = pa.concat_tables([table.slice(0, 4), table.slice(4, 3), table.slice(7)])
    records, _ = records_from_arrow(chunked.slice(2, 7))
    assert [r.offset for r in records] == list(range(2, 9))
    assert [r.headers for r in records] == [
        tuple((f"h{i}", str(i).encode()) for _ in range(i % 3)) for i in range(2, 9)
    ]
