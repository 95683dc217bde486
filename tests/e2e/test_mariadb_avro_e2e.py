"""MariaDB → real Debezium MariaDB connector with Apicurio's Avro converter → real Kafka → connector (Spark,
``value_format: avro``) → landing zone, and `verify` against MariaDB.

The stack is ``mariadb_avro_stack`` (``stack.sh up --source mariadb --avro`` against the real Apicurio
Registry of the ``registry`` fixture; Confluent wire format for keys and values). The workload and the checks
are those of ``test_mariadb_e2e`` (the ``workload_mariadb`` tables with every common MySQL type at its edges;
snapshot, inserts, updates, deletes, key moves, a 1000-row transaction, ADD COLUMN, TRUNCATE), run on this
stack: this module overrides ``mariadb_stack`` so that the shared helpers and the ``mariadb`` connection use it.

Types: through Avro every column mirrors as through JSON (checked by hand with a JSON twin connector on the
same database: identical Arrow schemas for all five tables, identical rows; the spatial table ``shapes``, added
later, replays to the same rows from this test's landing zone as from test_mariadb_e2e's, geometry JSON text
byte for byte); `verify` finds zero differences.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from tests.e2e import workload_mariadb
from tests.e2e.mirror_source import MirrorSource
from tests.e2e.test_mariadb_e2e import mirror_snapshot_and_streaming

pytestmark = pytest.mark.e2e

FETCH_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def mariadb_stack(mariadb_avro_stack: dict[str, str]) -> dict[str, str]:
    """This module's MariaDB stack is the Avro one."""
    return mariadb_avro_stack


def first_record(stack: dict[str, str], topic: str) -> tuple[bytes, bytes]:
    """Key and value of the topic's first record (a snapshot read)."""
    consumer = Consumer(
        {"bootstrap.servers": stack["bootstrap.servers"], "group.id": "avro-first", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(FETCH_TIMEOUT_S):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                return msg.key(), msg.value()
    finally:
        consumer.close()
    pytest.fail(f"no record in {topic} within {FETCH_TIMEOUT_S} polls")


def test_keys_and_values_are_confluent_avro_with_registered_schemas(mariadb_stack: dict[str, str]) -> None:
    registry = SchemaRegistryClient({"url": mariadb_stack["schema.registry.url"]})
    prefix = mariadb_stack["topic_prefix"]
    for table in workload_mariadb.TABLES:
        topic = f"{prefix}.mirror.{table}"
        # Once a record is in the topic, the converter has registered its key and value schemas.
        for data in first_record(mariadb_stack, topic):
            assert data[0] == 0  # Confluent's magic byte, then the 4-byte big-endian schema id
            assert registry.get_schema(int.from_bytes(data[1:5], "big")).schema_type == "AVRO"
        assert {f"{topic}-key", f"{topic}-value"} <= set(registry.get_subjects())


@pytest.mark.parametrize("mirror_source", ["mariadb"], indirect=True)
def test_snapshot_and_streaming_mirror_from_avro_equals_mariadb(
    mirror_source: MirrorSource, mariadb: Any, tmp_path: Path
) -> None:
    assert mirror_source.stack["converter"] == "avro"
    mirror_snapshot_and_streaming(mirror_source, mariadb, tmp_path)
