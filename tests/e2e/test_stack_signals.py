"""Debezium's Kafka signal channel on the local stacks: an ad hoc incremental snapshot of one table.

The stacks register every connector with the ``source`` and ``kafka`` signal channels, a signalling table
outside the captured schemas/databases (``debezium.debezium_signal``: the watermarks of the snapshot windows)
and ``incremental.snapshot.chunk.size`` 100. A table of ``ROWS`` rows is created and streamed, then an
``execute-snapshot`` signal (key = the topic prefix) goes to ``signal_topic`` while three other connections keep
updating, deleting and inserting rows of that table. Debezium must re-read the table in several chunks as
``op: "r"`` events (``source.snapshot`` = ``incremental``), interleaved with the streamed changes, such that
replaying only the events from the signal on, starting from nothing, gives exactly the table's final
contents: what a mirror rebuilding the table from the snapshot relies on. No other table is re-snapshotted;
the sink notifications report STARTED / TABLE_SCAN_COMPLETED / COMPLETED; the watermark rows reach Kafka on
``<prefix>.debezium.debezium_signal``, a topic the stack's ``topics`` regex does not match.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from connector.readback.database_mysql import MySqlSource
from tests.e2e.mirror_source import connect_mariadb
from tests.support.debezium import execute_snapshot_signal, notification

pytestmark = pytest.mark.e2e

ROWS = 500
CHUNK_SIZE = 100  # the stacks' default incremental.snapshot.chunk.size
TABLE = "signal_target"
WAIT_S = 180.0
SENTINEL_ID = 1_000_000
WRITERS = 3


@dataclass
class Source:
    """What differs between the stacks: connections, SQL dialect, Debezium's names for the table."""

    connect: Callable[[], Any]
    schema: str  # Postgres schema / MariaDB database: the middle part of topic and data collection names
    insert_ignore: str  # INSERT of (id, qty, note) that does nothing when the key exists

    @property
    def collection(self) -> str:
        return f"{self.schema}.{TABLE}"


def run(conn: Any, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    """Execute on a psycopg or PyMySQL autocommit connection; the rows when it returns any."""
    with conn.cursor() as cursor:
        cursor.execute(sql, args)
        return list(cursor.fetchall()) if cursor.description else []


def postgres_source(stack: dict[str, str]) -> Source:
    return Source(
        connect=lambda: psycopg.connect(stack["postgres"], autocommit=True),
        schema="public",
        insert_ignore=f"INSERT INTO public.{TABLE} VALUES (%s, %s, %s) ON CONFLICT (id) DO NOTHING",
    )


def mariadb_source(stack: dict[str, str]) -> Source:
    url = MySqlSource.from_url(stack["mariadb"])
    assert url.database, stack["mariadb"]

    return Source(
        connect=lambda: connect_mariadb(stack["mariadb"]),
        schema=url.database,
        insert_ignore=f"INSERT IGNORE INTO {TABLE} VALUES (%s, %s, %s)",
    )


# ---------------------------------------------------------------------------------------------- kafka helpers
def consumer(stack: dict[str, str]) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": stack["bootstrap.servers"],
            "group.id": f"e2e-signals-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def end_offsets(stack: dict[str, str], topics: list[str]) -> dict[str, int]:
    """Each topic's end offset (every stack topic has one partition)."""
    c = consumer(stack)
    try:
        return {t: c.get_watermark_offsets(TopicPartition(t, 0), timeout=10, cached=False)[1] for t in topics}
    finally:
        c.close()


def stack_topics(stack: dict[str, str]) -> list[str]:
    c = consumer(stack)
    try:
        return sorted(c.list_topics(timeout=10).topics)
    finally:
        c.close()


def read(stack: dict[str, str], topic: str, start: int, *, until: Callable[[Any], bool], what: str) -> Iterator[Any]:
    """The messages of ``topic`` from offset ``start`` on, until one satisfies ``until`` (included)."""
    c = consumer(stack)
    try:
        c.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:  # e.g. the topic is not created yet
                assert not msg.error().fatal(), msg.error()
                continue
            yield msg
            if until(msg):
                return
        pytest.fail(f"{topic}: no {what} within {WAIT_S}s")
    finally:
        c.close()


def read_to_end(stack: dict[str, str], topic: str, start: int) -> list[Any]:
    end = end_offsets(stack, [topic])[topic]
    if end <= start:
        return []
    return list(read(stack, topic, start, until=lambda m: m.offset() >= end - 1, what=f"offset {end - 1}"))


def payload(msg: Any) -> dict[str, Any] | None:
    """The change event's payload (JsonConverter with schemas), None for a tombstone."""
    value = msg.value()
    return None if value is None else json.loads(value)["payload"]


# ---------------------------------------------------------------------------------------------- the scenario
class Writer(threading.Thread):
    """Updates (70%), deletes (15%) and inserts (15%) on the table, barely paced, until stopped, on a connection
    of its own."""

    def __init__(self, source: Source, seed: int) -> None:
        super().__init__(daemon=True)
        self.source = source
        self.rng = random.Random(seed)
        self.halt = threading.Event()
        self.ops = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.source.connect() as conn:
                table = self.source.collection
                while not self.halt.is_set():
                    key = self.rng.randint(1, ROWS + 100)
                    kind = self.rng.random()
                    try:
                        if kind < 0.7:
                            sql = f"UPDATE {table} SET qty = qty + 1, note = %s WHERE id = %s"
                            run(conn, sql, (uuid.uuid4().hex, key))
                        elif kind < 0.85:
                            run(conn, f"DELETE FROM {table} WHERE id = %s", (key,))
                        else:
                            run(conn, self.source.insert_ignore, (key, key, "inserted"))
                    except Exception as exc:
                        # Concurrent writers: a statement the database chose as a deadlock's victim did nothing.
                        if "deadlock" not in str(exc).lower():
                            raise
                        continue
                    self.ops += 1
                    time.sleep(0.001)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> int:
        self.halt.set()
        self.join(timeout=60)
        assert not self.is_alive(), "the writer did not stop"
        if self.error is not None:
            raise self.error
        return self.ops


def incremental_snapshot_rebuilds_the_table(stack: dict[str, str], source: Source) -> None:
    prefix = stack["topic_prefix"]
    topic = f"{prefix}.{source.collection}"
    watermark_topic = f"{prefix}.debezium.debezium_signal"
    topics_re = re.compile(stack["topics"])
    assert stack["signal_topic"] == f"{prefix}-signal", stack
    assert topics_re.fullmatch(topic), stack["topics"]
    assert not topics_re.fullmatch(watermark_topic), "the signalling table's topic must not look like a table's"

    with source.connect() as conn:
        run(conn, f"CREATE TABLE {source.collection} (id int PRIMARY KEY, qty int NOT NULL, note varchar(64))")
        rows = ",".join(f"({i}, {i * 10}, 'row {i}')" for i in range(1, ROWS + 1))
        run(conn, f"INSERT INTO {source.collection} VALUES {rows}")
    # The rows are streamed (c events): wait for all of them before asking for the snapshot.
    created = list(read(stack, topic, 0, until=lambda m: m.offset() >= ROWS - 1, what=f"{ROWS} insert events"))
    assert Counter(p["op"] for m in created if (p := payload(m))) == {"c": ROWS}

    others = [t for t in stack_topics(stack) if topics_re.fullmatch(t) and t != topic]
    assert others, "the stack's workload tables"
    starts = end_offsets(stack, [topic, stack["notification_topic"], *others])

    # Several writers, barely paced: when Debezium's streaming is caught up, a chunk's round (open watermark, select,
    # close watermark, seen in the log) takes a few milliseconds, so one paced writer can miss every window.
    writers = [Writer(source, seed=seed) for seed in range(16, 16 + WRITERS)]
    for writer in writers:
        writer.start()
    time.sleep(0.5)
    key, value = execute_snapshot_signal(prefix, [source.collection])
    producer = Producer({"bootstrap.servers": stack["bootstrap.servers"]})
    producer.produce(stack["signal_topic"], key=key, value=value)
    assert producer.flush(30) == 0
    try:
        notes = [
            notification(m.value())
            for m in read(
                stack,
                stack["notification_topic"],
                starts[stack["notification_topic"]],
                until=lambda m: (
                    notification(m.value())["type"] == "COMPLETED"
                    and notification(m.value())["aggregate_type"] == "Incremental Snapshot"
                ),
                what="COMPLETED notification of the incremental snapshot",
            )
        ]
    finally:
        ops = sum(writer.stop() for writer in writers)
    assert ops > 0

    # A last insert after the snapshot completed: once its event is read, every earlier one is (one partition).
    with source.connect() as conn:
        run(conn, f"INSERT INTO {source.collection} VALUES (%s, 0, 'sentinel')", (SENTINEL_ID,))
        final = {row[0]: (row[1], row[2]) for row in run(conn, f"SELECT id, qty, note FROM {source.collection}")}

    def is_sentinel(m: Any) -> bool:
        p = payload(m)
        return p is not None and (p.get("after") or {}).get("id") == SENTINEL_ID

    events = [p for m in read(stack, topic, starts[topic], until=is_sentinel, what="sentinel") if (p := payload(m))]

    # The notifications: one incremental snapshot of this table only, in several chunks, succeeded.
    incremental = [n for n in notes if n["aggregate_type"] == "Incremental Snapshot"]
    kinds = [n["type"] for n in incremental]
    assert kinds[0] == "STARTED" and kinds[-1] == "COMPLETED", kinds
    assert incremental[0]["additional_data"]["data_collections"] == source.collection, incremental[0]
    scans = [n["additional_data"] for n in incremental if n["type"] == "TABLE_SCAN_COMPLETED"]
    assert [(s["scanned_collection"], s["status"]) for s in scans] == [(source.collection, "SUCCEEDED")], scans
    assert kinds.count("IN_PROGRESS") >= 2, f"a multi-chunk snapshot (chunk size {CHUNK_SIZE}): {kinds}"

    # The snapshot's reads: op r, source.snapshot "incremental", interleaved with streamed changes.
    ops_seen = Counter(e["op"] for e in events)
    reads = [i for i, e in enumerate(events) if e["op"] == "r"]
    assert reads, f"no snapshot reads on {topic}: {ops_seen}"
    assert {events[i]["source"]["snapshot"] for i in reads} == {"incremental"}
    streamed_between = [e for e in events[reads[0] : reads[-1]] if e["op"] != "r"]
    assert streamed_between, (
        f"writes did not interleave with the chunks ({ops} writes): {ops_seen}, "
        f"{reads[0]} changes before the first read, {len(events) - 1 - reads[-1]} after the last"
    )
    # The writers keep the table near 300 rows (deletes and inserts over ROWS + 100 keys); a window's own
    # changes drop their keys from its chunk, so most but not all rows are read.
    assert len(reads) >= len(final) // 2, f"{len(reads)} reads for ~{len(final)} rows: {ops_seen}"

    # Replaying only the events since the signal, from nothing, gives the table's final contents.
    rebuilt: dict[int, tuple[int, str]] = {}
    for e in events:
        if e["op"] == "d":
            rebuilt.pop(e["before"]["id"], None)
        else:
            after = e["after"]
            rebuilt[after["id"]] = (after["qty"], after["note"])
    missing = sorted(set(final) - set(rebuilt))[:10]
    extra = sorted(set(rebuilt) - set(final))[:10]
    wrong = sorted(k for k in set(final) & set(rebuilt) if final[k] != rebuilt[k])[:10]
    assert (missing, extra, wrong) == ([], [], []), f"replay != table ({len(final)} rows, {ops} writes, {ops_seen})"

    # No other table was re-snapshotted.
    for other in others:
        reread = [p for m in read_to_end(stack, other, starts[other]) if (p := payload(m)) and p["op"] == "r"]
        assert reread == [], f"{other} was snapshotted again"

    # The watermarks (signalling table rows <id>-open / <id>-close) reach Kafka on a topic of their own.
    windows = read_to_end(stack, watermark_topic, 0)
    ids = {((payload(m) or {}).get("after") or {}).get("id", "") for m in windows}
    assert any(i.endswith("-open") for i in ids) and any(i.endswith("-close") for i in ids), sorted(ids)[:6]


def test_postgres_incremental_snapshot_through_the_kafka_signal_channel(shared_stack: dict[str, str]) -> None:
    incremental_snapshot_rebuilds_the_table(shared_stack, postgres_source(shared_stack))


def test_mariadb_incremental_snapshot_through_the_kafka_signal_channel(mariadb_stack: dict[str, str]) -> None:
    incremental_snapshot_rebuilds_the_table(mariadb_stack, mariadb_source(mariadb_stack))
