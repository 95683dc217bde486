"""The executors' own Kafka reads (``source.reader: direct``) against a real broker: Spark's ranges, exactly.

Each test reads offset ranges as a micro-batch's task does (``connector.collect.kafka_read.read_ranges``): every
record inside a range once and in offset order, nothing outside it, ranges ending on offsets the log skips
(transaction markers), and offsets Kafka no longer holds reported as data loss with the topic, partition and
offsets, in the wording the job's failure report reads.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from connector.collect.kafka_read import (
    KafkaRange,
    KafkaReadSpec,
    KafkaRecordsLost,
    ReadGap,
    close_consumers,
    read_ranges,
    read_ranges_past_gaps,
)
from connector.config import ConnectorSettings, MirrorSettings, SourceSettings
from connector.healing.query_failure import SourceDataLost, explain_query_failure
from connector.spark.source import kafka_read_spec

pytestmark = pytest.mark.kafka

TIMEOUT_S = 30


@pytest.fixture(autouse=True)
def _closed_consumers() -> Iterator[None]:
    """This process's consumers go with each test (the broker stops at the session's end)."""
    yield
    close_consumers()


def _spec(bootstrap: str, **mirror: object) -> KafkaReadSpec:
    settings = ConnectorSettings(
        source=SourceSettings(kind="kafka", bootstrap_servers=bootstrap),
        mirror=MirrorSettings.model_validate(mirror),
    )
    spec, why = kafka_read_spec(settings)
    assert spec is not None, why
    return spec


def _produce(bootstrap: str, topic: str, partition: int, count: int, headers: list[tuple[str, bytes]] | None = None):  # type: ignore[no-untyped-def]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        producer.produce(
            topic,
            key=f"k{partition}-{i}".encode(),
            value=f"v{partition}-{i}".encode(),
            partition=partition,
            headers=headers,
        )
    assert producer.flush(TIMEOUT_S) == 0


def test_ranges_of_several_partitions_are_read_exactly_in_offset_order(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(f"it-read-{uuid.uuid4().hex[:10]}", 3)
    for partition in range(3):
        _produce(kafka_bootstrap, topic, partition, 500)
    ranges = [KafkaRange(topic, 0, 0, 500), KafkaRange(topic, 1, 120, 380), KafkaRange(topic, 2, 499, 500)]
    spec = _spec(kafka_bootstrap)
    for _ in range(2):  # the second read reuses the worker's consumer, reassigned
        table = read_ranges(spec, ranges)
        assert table.column_names == ["topic", "partition", "offset", "key", "value"]
        rows = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))
        for kafka_range in ranges:
            offsets = [o for p, o in rows if p == kafka_range.partition]
            assert offsets == list(range(kafka_range.start, kafka_range.end))
        values = dict(zip(rows, table.column("value").to_pylist(), strict=True))
        assert values[(1, 120)] == b"v1-120"
        assert values[(2, 499)] == b"v2-499"
        assert set(table.column("topic").to_pylist()) == {topic}


def test_headers_and_timestamps_are_read_when_the_mirror_needs_them(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(f"it-read-h-{uuid.uuid4().hex[:10]}", 1)
    headers = [("__debezium.oldkey", b"{}"), ("__debezium.context.txId", b"7"), ("traceparent", b"00-1")]
    _produce(kafka_bootstrap, topic, 0, 3, headers)
    keep_last = read_ranges(_spec(kafka_bootstrap, toast_policy="keep-last"), [KafkaRange(topic, 0, 0, 3)])
    assert keep_last.column("headers").to_pylist()[0] == [{"key": "__debezium.oldkey", "value": b"{}"}]
    assert "timestamp_ms" not in keep_last.column_names
    everything = KafkaReadSpec(_spec(kafka_bootstrap).options, headers="all", timestamps=True)
    table = read_ranges(everything, [KafkaRange(topic, 0, 1, 3)])
    assert [h["key"] for h in table.column("headers").to_pylist()[0]] == [k for k, _ in headers]
    assert all(ts > 1_700_000_000_000 for ts in table.column("timestamp_ms").to_pylist())


def test_a_range_that_ends_on_a_transaction_marker_ends(kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    """Debezium's exactly-once producers write commit markers: offsets with no record the range still covers."""
    topic = make_topic(f"it-read-tx-{uuid.uuid4().hex[:10]}", 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, key=b"k", value=f"t{i}".encode(), partition=0)
    producer.commit_transaction(TIMEOUT_S)
    # The coordinator writes the commit marker after the commit returns: wait until the log holds it.
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "probe", "isolation.level": "read_uncommitted"})
    deadline = time.monotonic() + TIMEOUT_S
    low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S, cached=False)
    while high < 5 and time.monotonic() < deadline:
        time.sleep(0.1)
        low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S, cached=False)
    probe.close()
    assert high == 5  # four records and the commit marker
    table = read_ranges(_spec(kafka_bootstrap), [KafkaRange(topic, 0, low, high)])
    assert table.column("value").to_pylist() == [b"t0", b"t1", b"t2", b"t3"]


def test_offsets_kafka_no_longer_holds_are_data_loss_named_by_partition(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(f"it-read-lost-{uuid.uuid4().hex[:10]}", 2)
    _produce(kafka_bootstrap, topic, 0, 10)
    _produce(kafka_bootstrap, topic, 1, 10)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 1, 6)], request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)
    spec = _spec(kafka_bootstrap)
    with pytest.raises(KafkaRecordsLost) as aged_out:
        read_ranges(spec, [KafkaRange(topic, 0, 0, 10), KafkaRange(topic, 1, 2, 10)])
    text = str(aged_out.value)
    assert f"offset [2, 10) for topic partition {topic}-1" in text
    assert "[6, 10)" in text  # what the log holds now
    explained = explain_query_failure(f"org.apache.spark.api.python.PythonException: {text}", "rebuild")
    assert isinstance(explained, SourceDataLost)
    assert topic in str(explained)
    with pytest.raises(KafkaRecordsLost, match=rf"offset \[5, 12\) for topic partition {topic}-0"):
        read_ranges(spec, [KafkaRange(topic, 0, 5, 12)])  # past the log's end: a shorter, re-created log
    assert read_ranges(spec, [KafkaRange(topic, 1, 6, 10)]).num_rows == 4  # what is there still reads


def test_offsets_kafka_no_longer_holds_are_read_past_and_named(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    """Issue 42: with ``mirror.on_data_lost: rebuild`` a task reads on past a gap (records deleted, a shorter log)
    and names it, while the other partitions of the same read are read whole."""
    topic = make_topic(f"it-read-past-{uuid.uuid4().hex[:10]}", 3)
    for partition in (0, 1, 2):
        _produce(kafka_bootstrap, topic, partition, 10)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 1, 6)], request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)
    ranges = [KafkaRange(topic, 0, 0, 10), KafkaRange(topic, 1, 2, 10), KafkaRange(topic, 2, 5, 14)]
    table, gaps = read_ranges_past_gaps(_spec(kafka_bootstrap), ranges)
    assert sorted(gaps) == [ReadGap(topic, 1, 2, 5, "retention"), ReadGap(topic, 2, 5, None, "recreated")]
    rows = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))
    assert [o for p, o in rows if p == 0] == list(range(10))
    assert [o for p, o in rows if p == 1] == [6, 7, 8, 9]  # read on where the log starts now


class _CountingConsumer(Consumer):
    """A real consumer that counts its cluster listings (the worker's consumer, put in place by the test)."""

    listings = 0

    def list_topics(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.listings += 1
        return super().list_topics(*args, **kwargs)


def test_a_reused_consumer_lists_the_cluster_before_a_topic_new_to_it(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    """A topic the worker's consumer has not read is in its metadata cache before it is assigned.

    librdkafka otherwise looks up a new topic's leader only on its once-a-second scan: each task holding a table
    its consumer had not read waited about a second (``connector.collect.kafka_read._know_topics``).
    """
    from connector.collect import kafka_read

    first = make_topic(f"it-known-{uuid.uuid4().hex[:10]}", 1)
    _produce(kafka_bootstrap, first, 0, 3)
    spec = _spec(kafka_bootstrap)
    consumer = kafka_read._consumers[spec.options] = _CountingConsumer(dict(spec.options))
    assert read_ranges(spec, [KafkaRange(first, 0, 0, 3)]).num_rows == 3
    assert consumer.listings == 1
    assert read_ranges(spec, [KafkaRange(first, 0, 1, 3)]).num_rows == 2
    assert consumer.listings == 1  # a topic it listed already: no second request
    second = make_topic(f"it-new-{uuid.uuid4().hex[:10]}", 2)
    _produce(kafka_bootstrap, second, 1, 4)
    table = read_ranges(spec, [KafkaRange(first, 0, 2, 3), KafkaRange(second, 1, 0, 4)])
    assert consumer.listings == 2
    assert sorted(zip(table.column("topic").to_pylist(), table.column("offset").to_pylist(), strict=True)) == [
        (first, 2),
        *[(second, offset) for offset in range(4)],
    ]
