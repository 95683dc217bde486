"""The Kafka dead-letter writer against the real broker from ``deploy/local/kafka.sh``."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, Message

from connector.collect.poison import DeadLetter
from connector.config import DeadLetterSettings, SourceSettings
from connector.deadletter.kafka import HEADER_PREFIX, KafkaDeadLetterWriter, producer_config
from connector.events import KafkaRecord
from tests.support.debezium import Topic, field
from tests.support.kafka import produce, run_connector

pytestmark = pytest.mark.kafka


def consume_all(bootstrap: str, topic: str, expected: int) -> list[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"it-dlq-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    out: list[Message] = []
    try:
        for _ in range(300):
            if len(out) >= expected:
                break
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            out.append(message)
        # Nothing more than expected arrives.
        extra = consumer.poll(1.0)
        assert extra is None, extra
    finally:
        consumer.close()
    return out


def test_poison_records_go_to_the_topic_raw_with_their_origin(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(f"it-dlq-{uuid.uuid4().hex[:12]}")
    source = SourceSettings(kind="kafka", bootstrap_servers=kafka_bootstrap)
    writer = KafkaDeadLetterWriter(topic, producer_config(source, DeadLetterSettings(), kafka_bootstrap), 30)
    records = [
        KafkaRecord("dbserver1.public.orders", 2, 41, b'{"id":1}', b"\x00\x00\x00\x00\x09garbage", (("h", b"v"),)),
        KafkaRecord("dbserver1.public.orders", 2, 42, None, b"{not json", (("empty", None),), 1_700_000_000_000),
    ]
    letters = [DeadLetter.from_record(r, "public.orders", f"{r.position}: bad") for r in records]
    writer.write(7, letters)

    messages = consume_all(kafka_bootstrap, topic, 2)
    assert [m.value() for m in messages] == [r.value for r in records]
    assert [m.key() for m in messages] == [r.key for r in records]
    first = dict(messages[0].headers() or [])
    assert first["h"] == b"v"
    assert first["deadletter.topic"] == b"dbserver1.public.orders"
    assert first["deadletter.partition"] == b"2" and first["deadletter.offset"] == b"41"
    assert first["deadletter.table"] == b"public.orders" and first["deadletter.batch_id"] == b"7"
    assert first["deadletter.error"] == b"dbserver1.public.orders[2]@41: bad"
    second = dict(messages[1].headers() or [])
    assert second["empty"] is None and second["deadletter.timestamp"] == b"1700000000000"
    writer.close()


def test_a_replayed_batch_is_delivered_again(kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    """At-least-once across replays, as documented: consumers dedupe by the deadletter.* position headers."""
    topic = make_topic(f"it-dlq-{uuid.uuid4().hex[:12]}")
    writer = KafkaDeadLetterWriter(topic, producer_config(SourceSettings(), DeadLetterSettings(), kafka_bootstrap), 30)
    record = KafkaRecord("t", 0, 5, b"k", b"v")
    letters = [DeadLetter.from_record(record, "t", "bad")]
    writer.write(1, letters)
    writer.write(1, letters)
    messages = consume_all(kafka_bootstrap, topic, 2)
    positions = {
        (dict(m.headers() or [])["deadletter.offset"], dict(m.headers() or [])["deadletter.batch_id"]) for m in messages
    }
    assert positions == {(b"5", b"1")}
    writer.close()


#: Every kind of header a poison record can carry: an application's, Debezium's context headers (which
#: the job used to drop), Debezium's key-change header, one without a value, and a repeated name.
POISON_HEADERS: tuple[tuple[str, bytes | None], ...] = (
    ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    ("__debezium.context.connectorLogicalName", b"dbserver1"),
    ("__debezium.context.taskId", b"0"),
    ("__debezium.newkey", b'{"id":9}'),
    ("empty", None),
    ("traceparent", b"second"),
)


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["folder", "kafka"])
def test_run_dead_letters_a_poison_record_with_every_header(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path, kind: str
) -> None:
    """Through the real job: Spark's Kafka source, the batch, the dead-letter output of either kind."""
    prefix = f"dlqh{kind}{uuid.uuid4().hex[:8]}"
    topic = Topic(f"{prefix}.public.orders", [field("id", "int32", optional=False), field("note", "string")], ["id"])
    make_topic(topic.name)
    context = (("__debezium.context.taskId", b"0"),)
    good = topic.record("c", None, {"id": 1, "note": "a"}, headers=context)
    poison = topic.raw(b"{not json", key=b'{"id":2}')._replace(headers=POISON_HEADERS)
    produce(kafka_bootstrap, [good, poison, topic.record("c", None, {"id": 3, "note": "c"}, headers=context)])
    config = tmp_path / "config.yaml"
    dead_letter = "  kind: folder\n"
    if kind == "kafka":
        dlq_topic = make_topic(f"{prefix}-dlq")
        dead_letter = f"  kind: kafka\n  topic: {dlq_topic}\n"
    config.write_text(f"mirror:\n  poison_policy: dead-letter\ndead_letter:\n{dead_letter}")
    result = run_connector(
        "run",
        "--config",
        str(config),
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topics",
        rf"{prefix}\..*",
        "--landing-zone",
        str(tmp_path / "lz"),
        "--checkpoint",
        str(tmp_path / "cp"),
        "--trigger",
        "available-now",
        "--metrics-port",
        "0",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    if kind == "folder":
        files = sorted((tmp_path / "cp" / "_deadletter" / "public.orders").glob("*.jsonl"))
        letters = [orjson.loads(line) for f in files for line in f.read_bytes().splitlines()]
        assert [letter["offset"] for letter in letters] == [1]
        headers = [(name, None if v is None else base64.b64decode(v)) for name, v in letters[0]["headers"]]
        timestamp_ms = letters[0]["timestamp_ms"]
    else:
        (message,) = consume_all(kafka_bootstrap, dlq_topic, 1)
        assert message.value() == poison.value
        headers = [(name, v) for name, v in message.headers() or [] if not name.startswith(HEADER_PREFIX)]
        timestamp_ms = int(dict(message.headers() or [])[f"{HEADER_PREFIX}timestamp"])
    assert headers == list(POISON_HEADERS)
    # The poison record's own Kafka timestamp (the broker's log time of this run), in milliseconds.
    assert isinstance(timestamp_ms, int) and abs(timestamp_ms - time.time() * 1000) < 3_600_000
