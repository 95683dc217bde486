"""The local stack captures every workload table: snapshot reads, then streamed changes, on the printed topics."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter

import psycopg
import pytest
from confluent_kafka import Consumer

from tests.e2e import workload
from tests.e2e.conftest import SNAPSHOT_ROWS, StackCtl

pytestmark = pytest.mark.e2e

STREAM_OPS = 150
STREAM_SEED = 11
CONSUME_TIMEOUT_S = 180
PLACEHOLDER = "__debezium_unavailable_value"


def test_stack_is_up_and_reports_status(stack: dict[str, str], stack_ctl: StackCtl) -> None:
    status = stack_ctl("status")
    assert re.search(r"^postgres: running", status, re.M), status
    assert re.search(r"^kafka: running", status, re.M), status
    assert re.search(r"^connect: running", status, re.M), status
    assert re.search(rf"^connector: {re.escape(stack['connector'])} RUNNING", status, re.M), status
    with psycopg.connect(stack["postgres"]) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        count = conn.execute("SELECT count(*) FROM public.toasted").fetchone()
        assert count == (SNAPSHOT_ROWS,)


def test_change_events_for_every_table_arrive(stack: dict[str, str]) -> None:
    with psycopg.connect(stack["postgres"], autocommit=True) as conn:
        stats = workload.streaming_phase(conn, STREAM_OPS, seed=STREAM_SEED)

    topic_re = re.compile(stack["topics"])
    expected_topics = {f"dbserver1.public.{name}" for name in workload.table_names()}
    assert all(topic_re.fullmatch(t) for t in expected_topics), stack["topics"]
    want = {f"dbserver1.public.{name}": SNAPSHOT_ROWS + stats.min_messages(name) for name in workload.table_names()}

    consumer = Consumer(
        {
            "bootstrap.servers": stack["bootstrap.servers"],
            "group.id": f"e2e-stack-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    counts: Counter[str] = Counter()
    ops: Counter[tuple[str, str]] = Counter()
    placeholders: Counter[str] = Counter()
    try:
        consumer.subscribe(["^" + stack["topics"]])
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while any(counts[t] < n for t, n in want.items()) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            topic = msg.topic()
            assert topic is not None
            counts[topic] += 1
            value = msg.value()
            if value is None:
                ops[(topic, "tombstone")] += 1
                continue
            envelope = json.loads(value)
            assert set(envelope) == {"schema", "payload"}, "JsonConverter with schemas.enable=true"
            payload = envelope["payload"]
            ops[(topic, payload["op"])] += 1
            if payload["op"] == "u" and PLACEHOLDER in json.dumps(payload["after"]):
                placeholders[topic] += 1
    finally:
        consumer.close()

    assert set(counts) == expected_topics, f"topics regex {stack['topics']!r} matched {sorted(counts)}"
    short = {t: (counts[t], n) for t, n in want.items() if counts[t] < n}
    assert not short, f"(received, expected at least) per topic: {short}"
    for topic in expected_topics:
        assert ops[(topic, "r")] >= SNAPSHOT_ROWS, (topic, ops)
    for op in ("c", "u", "d", "tombstone"):
        assert sum(n for (_, o), n in ops.items() if o == op) > 0, (op, ops)
    # Unchanged TOASTed values under REPLICA IDENTITY DEFAULT come as Debezium's placeholder.
    assert placeholders["dbserver1.public.toasted"] > 0, placeholders
