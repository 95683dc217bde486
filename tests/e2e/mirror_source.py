"""The source side the end-to-end suites share: one stack's database as the mirror tests drive it.

A ``MirrorSource`` (the ``mirror_source`` fixture of ``conftest.py``, parametrised by source: ``postgres``
or ``mariadb``) is what a mirror test needs of its source database: the URL ``verify`` reads, and the
watermark that proves Debezium has published every change made before it (a row written after the
workload must reach Kafka: Debezium reads the WAL and the binlog in order). The helpers run the connector
against it the same way for every source.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer

from connector.config import SchemaRegistrySettings
from connector.debezium.avro import AvroDecoder
from connector.debezium.envelope import ChangeEvent, EnvelopeDecoder, Noise
from connector.events import KafkaRecord
from tests.support.kafka import REPO_ROOT, run_connector

WATERMARK_TIMEOUT_S = 240


@dataclass(frozen=True)
class MirrorSource:
    """A stack's source database, as the shared mirror helpers use it."""

    stack: dict[str, str]
    url: str
    """The database URL ``verify --source`` takes."""
    watermark_topic: str
    """The subscription pattern of the watermark table's topic."""
    insert_watermark: Callable[[str], None]
    """Writes a watermark row with this token."""
    decode: Callable[[KafkaRecord], ChangeEvent | Noise]
    """Decodes a record of the watermark topic as the connector does."""
    max_offsets_per_trigger: int


def postgres_source(stack: dict[str, str]) -> MirrorSource:
    """The Postgres stack's database (``stack.sh up``)."""

    def insert(token: str) -> None:
        with psycopg.connect(stack["postgres"], autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS public.e2e_watermark (token text PRIMARY KEY)")
            conn.execute("INSERT INTO public.e2e_watermark VALUES (%s)", (token,))

    return MirrorSource(
        stack, stack["postgres"], "^dbserver1\\.public\\.e2e_watermark", insert, EnvelopeDecoder().decode, 400
    )


def mariadb_source(stack: dict[str, str], conn: Any) -> MirrorSource:
    """The MariaDB stack's database (``stack.sh up --source mariadb``) through ``conn``; Avro when the stack is."""

    def insert(token: str) -> None:
        with conn.cursor() as cursor:
            cursor.execute("INSERT INTO e2e_watermark VALUES (%s)", (token,))

    avro = stack.get("converter") == "avro"
    decoder = AvroDecoder(SchemaRegistrySettings(url=stack["schema.registry.url"])) if avro else EnvelopeDecoder()
    prefix = stack["topic_prefix"]
    return MirrorSource(stack, stack["mariadb"], f"^{prefix}\\.mirror\\.e2e_watermark", insert, decoder.decode, 600)


def run_args(source: MirrorSource, tmp: Path, trigger: str, config: Path) -> list[str]:
    """``run`` of the source's topics into ``tmp/lz`` with the checkpoint ``tmp/cp``."""
    return [
        "run",
        "--config",
        str(config),
        "--bootstrap-servers",
        source.stack["bootstrap.servers"],
        "--topics",
        source.stack["topics"],
        "--landing-zone",
        str(tmp / "lz"),
        "--checkpoint",
        str(tmp / "cp"),
        "--trigger",
        trigger,
        "--max-offsets-per-trigger",
        str(source.max_offsets_per_trigger),
        "--metrics-port",
        "0",
    ]


def wait_for_watermark(source: MirrorSource) -> None:
    """Write a watermark row and wait until its change event is in Kafka (decoded as the connector does)."""
    token = uuid.uuid4().hex
    source.insert_watermark(token)
    consumer = Consumer(
        {
            "bootstrap.servers": source.stack["bootstrap.servers"],
            "group.id": f"watermark-{token}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 2000,
        }
    )
    try:
        consumer.subscribe([source.watermark_topic])
        deadline = time.monotonic() + WATERMARK_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error() is not None or msg.value() is None:
                continue
            event = source.decode(KafkaRecord(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()))
            if isinstance(event, ChangeEvent) and (event.after or {}).get("token") == token:
                return
    finally:
        consumer.close()
    pytest.fail(f"Debezium did not publish the watermark within {WATERMARK_TIMEOUT_S}s")


def catch_up(source: MirrorSource, tmp: Path, config: Path) -> None:
    """Wait until Debezium published every change so far, then run the connector until it has them all."""
    wait_for_watermark(source)
    result = run_connector(*run_args(source, tmp, "available-now", config))
    assert result.returncode == 0, result.stderr[-5000:]


def batch_lines(log: Path) -> int:
    """Batch log lines the connector wrote so far."""
    return log.read_text().count('"event":"batch"') if log.exists() else 0


def wait_for_batch(process: subprocess.Popen[bytes], log: Path, before: int, timeout_s: float = 240) -> None:
    """Until the connector logs a batch after ``before`` (or exits, or the bound passes; the caller checks)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None and batch_lines(log) <= before:
        time.sleep(0.5)


def kill_while_streaming(
    command: list[str],
    log_path: Path,
    rounds: int,
    write: Callable[[int], object],
    rng: random.Random,
    max_pause_s: float,
) -> int:
    """Run ``command`` ``rounds`` times while ``write(round)`` changes the source; returns how many runs were killed.

    Every run but the last gets SIGKILL at a random point once it publishes (Spark's start-up time varies with
    load), the last SIGTERM; each must still be running when its signal comes (killed, not crashed).
    """
    kills = 0
    with log_path.open("w") as log:
        for round_number in range(rounds):
            batches_before = batch_lines(log_path)
            process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=log, env=dict(os.environ))
            try:
                write(round_number)
                wait_for_batch(process, log_path, batches_before)
                time.sleep(rng.uniform(0, max_pause_s))
            finally:
                alive = process.poll() is None
                if round_number < rounds - 1:
                    process.send_signal(signal.SIGKILL)
                    kills += 1
                else:
                    process.send_signal(signal.SIGTERM)
                process.wait(timeout=120)
            assert alive, log_path.read_text()[-3000:]  # killed while running, not after a crash
    return kills


def connect_mariadb(url: str) -> Any:
    """An autocommit PyMySQL connection to the MariaDB database at ``url`` (a stack's ``mariadb`` value), in UTC."""
    import pymysql  # type: ignore[import-untyped]

    from connector.readback.database_mysql import MySqlSource

    source = MySqlSource.from_url(url)
    return pymysql.connect(
        host=source.host,
        port=source.port,
        user=source.user,
        password=source.password,
        database=source.database,
        charset="utf8mb4",
        init_command="SET time_zone = '+00:00'",
        autocommit=True,
    )
