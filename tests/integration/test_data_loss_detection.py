"""Finding the Kafka records the mirror still needs and no longer can read, on a real broker.

Records are removed as retention would (``DeleteRecords`` moves the log start offset), a topic is deleted and
created again, a compacted topic really compacts: ``check_offsets`` must name exactly the partitions and offsets
lost, and nothing for the compacted topic's gaps or the untouched topics.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from connector.config import SourceSettings
from connector.healing.data_loss import LostRange, Partition, check_offsets, read_brokers
from connector.publish.ledger import BatchLedger
from connector.publish.lifecycle import Lifecycle
from connector.readback.replay import replay_landing_zone
from connector.storage.local import LocalStorage
from tests.integration.test_stream_kafka import connector_args
from tests.support.debezium import Topic, field
from tests.support.kafka import produce as kafka_produce
from tests.support.kafka import run_connector
from tests.support.model import replayed_rows

pytestmark = [pytest.mark.kafka]

TIMEOUT_S = 60.0
# The broker's log cleaner looks for work every 15 s (log.cleaner.backoff.ms); these settings make a
# compacted topic's first segment eligible at once.
FAST_COMPACTION = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.001",
    "min.compaction.lag.ms": "0",
}


def unique(name: str) -> str:
    return f"loss.{name}.{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, count: int, partition: int = 0, keys: int | None = None) -> None:
    """``count`` records to one partition; with ``keys``, cycling over that many keys (for compaction)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        key = f"k{i % keys if keys else i}".encode()
        producer.produce(topic, key=key, value=f"v{i}".encode(), partition=partition)
    assert producer.flush(TIMEOUT_S) == 0


def delete_records_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    """What retention does: every record of the partition before ``offset`` is gone, the log starts there."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, partition, offset)], request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def delete_topic(bootstrap: str, name: str) -> None:
    """Delete ``name`` and wait until the brokers no longer list it (deletion completes asynchronously)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name], operation_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while name in admin.list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            pytest.fail(f"topic {name} still listed {TIMEOUT_S}s after its deletion")
        time.sleep(0.2)


def create_topic(bootstrap: str, name: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config)], operation_timeout=TIMEOUT_S)[name].result(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        topic = admin.list_topics(topic=name, timeout=10).topics.get(name)
        if topic is not None and topic.error is None and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"topic {name} not ready after {TIMEOUT_S}s")
        time.sleep(0.2)


def offsets_held(bootstrap: str, topic: str) -> list[int]:
    """The offsets partition 0 of ``topic`` still holds, read from its start to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "data-loss-test", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
        consumer.assign([TopicPartition(topic, 0, low)])
        held: list[int] = []
        while not held or held[-1] < high - 1:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"{topic}: nothing read after offset {held[-1:]} of [{low}, {high})"
            assert message.error() is None, message.error()
            held.append(message.offset())
        return held
    finally:
        consumer.close()


def test_records_deleted_from_one_partition_are_exactly_that_range(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    """Three tables' topics; the mirror committed up to offset 40 of each partition; retention then removes
    offsets below 70 of one partition: that range, and nothing of the other partition or topics, is reported."""
    orders, customers, items = (make_topic(unique(t), 2) for t in ("orders", "customers", "items"))
    for topic in (orders, customers, items):
        for partition in (0, 1):
            produce(kafka_bootstrap, topic, 100, partition)
    source = SourceSettings(bootstrap_servers=kafka_bootstrap)
    expected = {Partition(t, p): 40 for t in (orders, customers, items) for p in (0, 1)}
    before = check_offsets(source, expected)
    assert before.lost == ()

    delete_records_before(kafka_bootstrap, customers, 1, 70)
    delete_records_before(kafka_bootstrap, items, 0, 40)  # up to the expected offset exactly: nothing lost
    after = check_offsets(source, expected)
    assert after.lost == (LostRange(customers, 1, 40, 69, "retention", 70),)
    assert after.topic_ids == before.topic_ids and set(after.topic_ids) == {orders, customers, items}


def test_a_new_partition_whose_first_records_aged_out_is_reported_from_offset_zero(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    """A topic created while the connector was down (a new table) that retention already trimmed: Spark would
    read it from 0, so offsets [0, log start) are lost for a table never mirrored."""
    known, new = make_topic(unique("known"), 1), make_topic(unique("new"), 1)
    produce(kafka_bootstrap, known, 10)
    produce(kafka_bootstrap, new, 30)
    delete_records_before(kafka_bootstrap, new, 0, 12)
    source = SourceSettings(bootstrap_servers=kafka_bootstrap)
    check = check_offsets(source, {Partition(known, 0): 10}, subscribed=[known, new])
    assert check.lost == (LostRange(new, 0, 0, 11, "retention", 12),)


def test_a_topic_deleted_and_created_again_is_recreated(kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    """Offsets start over in the new log: an end offset below the expected one, or (when recorded) another
    topic id even once the new log is longer than the old; a topic deleted for good is partition-gone."""
    topic, gone = make_topic(unique("recreated"), 1), make_topic(unique("gone"), 1)
    produce(kafka_bootstrap, topic, 50)
    produce(kafka_bootstrap, gone, 5)
    source = SourceSettings(bootstrap_servers=kafka_bootstrap)
    expected = {Partition(topic, 0): 50, Partition(gone, 0): 5}
    first = check_offsets(source, expected)
    assert first.lost == ()

    delete_topic(kafka_bootstrap, topic)
    delete_topic(kafka_bootstrap, gone)
    make_topic(topic, 1)
    produce(kafka_bootstrap, topic, 7)
    shorter = check_offsets(source, expected)
    assert shorter.lost == (
        LostRange(gone, 0, 5, None, "partition-gone", None),
        LostRange(topic, 0, 50, None, "recreated", 0),
    )
    assert shorter.topic_ids[topic] != first.topic_ids[topic] and gone not in shorter.topic_ids

    produce(kafka_bootstrap, topic, 100)  # the new log now reaches past offset 50: only the id tells
    recreated = LostRange(topic, 0, 50, None, "recreated", 0)
    assert check_offsets(source, {Partition(topic, 0): 50}).lost == ()
    assert check_offsets(source, {Partition(topic, 0): 50}, recorded_ids=first.topic_ids).lost == (recreated,)
    assert check_offsets(source, {Partition(topic, 0): 50}, recorded_ids=shorter.topic_ids).lost == ()


def test_a_compacted_topic_with_gaps_is_no_data_loss(kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    """The broker really compacts (30 records over 3 keys: only each key's newest stays), and the offsets the
    mirror expects inside the gaps are no loss; the policies are read from the brokers' topic configurations."""
    compacted = unique("compacted")
    create_topic(kafka_bootstrap, compacted, FAST_COMPACTION)
    both = unique("compact-delete")
    create_topic(kafka_bootstrap, both, {"cleanup.policy": "compact,delete"})
    plain = make_topic(unique("plain"), 1)
    produce(kafka_bootstrap, compacted, 30, keys=3)
    # A segment is compacted once it is no longer the active one: two later records roll the first segment.
    for _ in range(2):
        time.sleep(0.2)  # past segment.ms, so the next record starts a new segment
        produce(kafka_bootstrap, compacted, 1, keys=1)
    deadline = time.monotonic() + 3 * TIMEOUT_S
    while len(held := offsets_held(kafka_bootstrap, compacted)) == 32:
        if time.monotonic() > deadline:
            pytest.fail(f"{compacted} was not compacted within {3 * TIMEOUT_S}s")
        time.sleep(1.0)
    assert 10 not in held  # the gap the mirror's next offset falls into

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    states = read_brokers(admin, [compacted, both, plain])
    assert [states[t].compacted for t in (compacted, both, plain)] == [True, False, False]
    source = SourceSettings(bootstrap_servers=kafka_bootstrap)
    assert check_offsets(source, {Partition(compacted, 0): 10}).lost == ()

    with pytest.raises(KafkaException, match="POLICY_VIOLATION"):  # records of a compacted topic never age out
        delete_records_before(kafka_bootstrap, compacted, 0, 20)


def test_a_compacted_topic_compacted_under_the_checkpoint_mirrors_exactly_with_no_rebuild(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Issue 32 through ``run``: a compacted table topic is compacted while the connector is behind (the offsets it
    would read next are gone inside the log, not before its start); the next run is no data loss, rebuilds
    nothing, and the mirror holds each key's last state."""
    columns = [field("id", "int32", optional=False), field("v", "string")]
    items = Topic(f"cmp{uuid.uuid4().hex[:6]}.public.items", columns, ["id"])
    create_topic(kafka_bootstrap, items.name, FAST_COMPACTION)
    args = connector_args(kafka_bootstrap, items.name.split(".")[0], tmp_path)
    kafka_produce(kafka_bootstrap, [items.record("c", None, {"id": i, "v": "created"}, partition=0) for i in (1, 2, 3)])
    first = run_connector(*args)
    assert first.returncode == 0, first.stderr[-4000:]
    checkpointed = len(offsets_held(kafka_bootstrap, items.name))
    updates = [items.record("u", None, {"id": 1 + n % 3, "v": f"v{n}"}, partition=0) for n in range(30)]
    kafka_produce(kafka_bootstrap, updates)
    for n in range(2):  # roll the active segment so the updates above become compactable
        time.sleep(0.2)
        kafka_produce(kafka_bootstrap, [items.record("u", None, {"id": 3, "v": f"last{n}"}, partition=0)])
    deadline = time.monotonic() + 3 * TIMEOUT_S
    while checkpointed in (held := offsets_held(kafka_bootstrap, items.name)) or len(held) == checkpointed + 32:
        if time.monotonic() > deadline:
            pytest.fail(f"{items.name} was not compacted under the checkpoint within {3 * TIMEOUT_S}s: {held}")
        time.sleep(1.0)

    second = run_connector(*args)
    assert second.returncode == 0, second.stderr[-4000:]
    state = BatchLedger(LocalStorage(tmp_path / "cp")).state
    assert state.data_gaps == () and state.tables["public.items"].lifecycle == Lifecycle()
    rows = replayed_rows(replay_landing_zone(LocalStorage(tmp_path / "lz")))["public.items"]
    assert rows == [{"id": 1, "v": "v27"}, {"id": 2, "v": "v28"}, {"id": 3, "v": "last1"}]
