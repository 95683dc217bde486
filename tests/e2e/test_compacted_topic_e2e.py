"""A compacted Debezium topic whose delete events the cleaner removed under a stopped connector (issue 42 (e)).

On a topic with ``cleanup.policy=compact`` the cleaner drops every record a later one of the same key supersedes:
a delete event goes once its tombstone (same key, null value) is in the cleaned range, and the tombstone stays
for ``delete.retention.ms``. The test creates the table's topic compacted (small segments, a low dirty ratio, a
day of tombstone retention) before Debezium writes to it, mirrors the table, stops the connector, deletes rows
(and updates and inserts others), and writes until the topic shows the cleaner ran: no delete event of the
deleted keys left, their tombstones kept. The connector started again must make the mirror exact by ``verify``:
the tombstones are the deletes.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kafka import run_connector

pytestmark = pytest.mark.e2e

TABLE = "ct_orders"
ROWS = 100
SENTINEL = 1_000_000
WAIT_S = 240  # a bound on waits for real components, never an assertion on time
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "1000",  # a write a second later closes the segment, so the cleaner may clean it
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "86400000",  # tombstones stay a day: the delete's only trace
}


def create_compacted_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        admin.delete_topics([topic])[topic].result(timeout=60)
        wait_until(f"{topic} to be deleted", lambda: topic not in admin.list_topics(timeout=10).topics)
    admin.create_topics([NewTopic(topic, 1, 1, config=COMPACTED)])[topic].result(timeout=60)


def wait_until(what: str, check: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1)
    pytest.fail(f"gave up waiting for {what} after {WAIT_S}s")


def read_topic(bootstrap: str, topic: str) -> list[tuple[int, str | None]]:
    """Every record of the topic, in order: (key id, op), op ``None`` for a tombstone."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"e2e-compacted-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        consumer.assign([TopicPartition(topic, 0, low)])
        out: list[tuple[int, str | None]] = []
        position = low
        while position < high:
            msg = consumer.poll(1.0)
            if msg is None or msg.error() is not None:
                continue
            position = msg.offset() + 1
            key = orjson.loads(msg.key())
            op = None if not msg.value() else orjson.loads(msg.value())["payload"]["op"]
            out.append((int(key["payload"]["id"]), op))
        return out
    finally:
        consumer.close()


def run_args(stack: dict[str, str], tmp: Path) -> list[str]:
    topics = re.escape(stack["topic_prefix"]) + rf"\.public\.{TABLE}"
    return [
        "run",
        *("--bootstrap-servers", stack["bootstrap.servers"], "--topics", topics),
        *("--landing-zone", str(tmp / "lz"), "--checkpoint", str(tmp / "cp")),
        *("--trigger", "available-now", "--metrics-port", "0"),
    ]


def test_deletes_compacted_away_under_a_stopped_connector_come_back_from_their_tombstones(
    shared_stack: dict[str, str], tmp_path: Path
) -> None:
    bootstrap = shared_stack["bootstrap.servers"]
    topic = f"{shared_stack['topic_prefix']}.public.{TABLE}"
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{TABLE}")
        create_compacted_topic(bootstrap, topic)  # before Debezium's first event of the table creates it
        conn.execute(f"CREATE TABLE public.{TABLE} (id int PRIMARY KEY, name text, qty int)")
        conn.execute(f"INSERT INTO public.{TABLE} SELECT g, 'order ' || g, g FROM generate_series(1, {ROWS}) g")
        conn.execute(f"INSERT INTO public.{TABLE} VALUES ({SENTINEL}, 'sentinel', 0)")
    wait_until("the sentinel in Kafka", lambda: (SENTINEL, "c") in read_topic(bootstrap, topic))
    first = run_connector(*run_args(shared_stack, tmp_path))
    assert first.returncode == 0, first.stderr[-5000:]

    # The connector is stopped: rows deleted (others updated and inserted), then the cleaner runs.
    deleted = set(range(5, ROWS + 1, 5))
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        conn.execute(f"DELETE FROM public.{TABLE} WHERE id <= {ROWS} AND id % 5 = 0")
        conn.execute(f"UPDATE public.{TABLE} SET name = 'updated' WHERE id <= {ROWS} AND id % 7 = 0")
        conn.execute(f"INSERT INTO public.{TABLE} SELECT g, 'late ' || g, g FROM generate_series(201, 210) g")

        def compacted() -> bool:
            # Each write a segment later closes the segment before it: what the cleaner may clean.
            conn.execute(f"UPDATE public.{TABLE} SET qty = qty + 1 WHERE id = {SENTINEL}")
            records = read_topic(bootstrap, topic)
            deletes = {key for key, op in records if op == "d"}
            tombstones = {key for key, op in records if op is None}
            return not (deletes & deleted) and deleted <= tombstones

        wait_until("the cleaner to remove the delete events and keep their tombstones", compacted)

    records = read_topic(bootstrap, topic)
    assert not [key for key, op in records if op == "d" and key in deleted]  # only the tombstones say it
    assert {key for key, op in records if op is None} >= deleted

    second = run_connector(*run_args(shared_stack, tmp_path))
    assert second.returncode == 0, second.stderr[-5000:]
    # The tombstones were the deletes: one delete row per deleted key, though no delete event was left to read.
    folder = tmp_path / "lz" / "public.schema" / TABLE
    tables = [pq.read_table(f) for f in sorted(folder.glob("*.parquet"))]
    marked = [t.select(["id", "__rowMarker__"]).to_pylist() for t in tables if "__rowMarker__" in t.column_names]
    assert sorted(r["id"] for rows in marked for r in rows if r["__rowMarker__"] == 2) == sorted(deleted)
    lz = str(tmp_path / "lz")
    exact = run_connector(
        "verify", "--source", shared_stack["postgres"], "--landing-zone", lz, "--tables", f"public.{TABLE}"
    )
    assert exact.returncode == 0, exact.stdout + exact.stderr
    rows = ROWS - len(deleted) + 10 + 1
    assert f"public.{TABLE}: source={rows} mirror={rows} matching={rows} missing=0" in exact.stdout, exact.stdout

    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{TABLE}")
