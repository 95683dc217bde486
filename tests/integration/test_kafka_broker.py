"""The local broker from ``deploy/local/kafka.sh`` round-trips messages with per-partition order."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

pytestmark = pytest.mark.kafka

MESSAGES = 1000
PARTITIONS = 3


def test_produce_and_consume_keeps_per_partition_order(kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    """1000 messages over 3 partitions come back complete and in order within each partition."""
    topic = make_topic(f"it-broker-{uuid.uuid4().hex[:12]}", PARTITIONS)

    delivery_errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            delivery_errors.append(err)

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "linger.ms": 5})
    sent: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    for i in range(MESSAGES):
        partition = i % PARTITIONS
        producer.produce(
            topic, key=str(i).encode(), value=str(i).encode(), partition=partition, on_delivery=on_delivery
        )
        sent[partition].append(i)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert delivery_errors == []

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"it-broker-{uuid.uuid4().hex[:12]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    received: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        count = 0
        while count < MESSAGES and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            partition = msg.partition()
            assert partition is not None
            offset = msg.offset()
            assert offset is not None
            value = msg.value()
            assert isinstance(value, bytes)
            received[partition].append((offset, int(value)))
            count += 1
    finally:
        consumer.close()

    assert sum(len(v) for v in received.values()) == MESSAGES
    for partition in range(PARTITIONS):
        offsets = [o for o, _ in received[partition]]
        assert offsets == list(range(len(sent[partition]))), f"partition {partition} offsets"
        assert [v for _, v in received[partition]] == sent[partition], f"partition {partition} order"
