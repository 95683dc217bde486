"""A task's Kafka read: what it keeps of what librdkafka delivers, and a broker that never answers.

(The reads themselves run against a real broker in ``tests/integration/test_kafka_read.py``.)
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pyarrow as pa
import pytest

from connector.collect.kafka_read import _RangeRead, close_consumers, read_ranges
from connector.collect.kafka_spec import KafkaRange, KafkaReadSpec
from connector.errors import TransientError
from connector.spark.source import DIRECT_READ_DEFAULTS


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield port
    close_consumers()


def test_a_read_no_broker_answers_fails_transiently_naming_its_partitions(closed_port: int) -> None:
    options = {**DIRECT_READ_DEFAULTS, "bootstrap.servers": f"127.0.0.1:{closed_port}", "log_level": "0"}
    spec = KafkaReadSpec(tuple(sorted(options.items())), stall_timeout_s=1.5)
    with pytest.raises(TransientError, match=r"stalled for 1.5 s; still waiting on orders-0 \(up to offset 10\)"):
        read_ranges(spec, [KafkaRange("orders", 0, 0, 10)])


def _delivered(rows: list[tuple[str, int, int]]) -> pa.Table:
    return pa.table(
        {
            "topic": pa.array([t for t, _, _ in rows], pa.string()),
            "partition": pa.array([p for _, p, _ in rows], pa.int32()),
            "offset": pa.array([o for _, _, o in rows], pa.int64()),
            "key": pa.array([None] * len(rows), pa.binary()),
            "value": pa.array([f"{t}-{p}@{o}".encode() for t, p, o in rows], pa.binary()),
        }
    )


def test_only_offsets_inside_each_range_are_kept_whatever_librdkafka_delivers() -> None:
    """Runs per partition, stale offsets of a previous assignment, records prefetched past a range's end."""
    reading = _RangeRead(KafkaReadSpec(()), [KafkaRange("a", 0, 5, 10), KafkaRange("b", 1, 0, 100)])
    reading._keep_in_range(_delivered([("a", 0, o) for o in (2, 3, 5, 6)] + [("b", 1, 0), ("b", 1, 1), ("c", 0, 9)]))
    reading._keep_in_range(_delivered([("a", 0, o) for o in (6, 7, 8, 9, 10, 11)] + [("b", 1, 2)]))
    reading._keep_in_range(_delivered([("a", 0, 12)]))  # the range is done: ignored
    table = reading.table()
    by_partition = {
        key: [
            o
            for t, p, o in zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True)
            if (t, p) == key
        ]
        for key in (("a", 0), ("b", 1))
    }
    assert by_partition == {("a", 0): [5, 6, 7, 8, 9], ("b", 1): [0, 1, 2]}
    assert table.num_rows == 8
    assert reading.open == {("b", 1): 100}  # a-0 reached its end offset; b-1 waits for more
