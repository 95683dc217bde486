"""MariaDB → real Debezium MariaDB connector → real Kafka → connector (Spark) → landing zone, and `verify`
against MariaDB.

The stack is the session's ``mariadb_stack`` (``stack.sh up --source mariadb``): the snapshot rows of
``workload_mariadb`` hold every common MySQL type at its edges. Each test mirrors the topics from the
start into its own landing zone, waits until Debezium has published every change (a watermark row
written after the workload must reach Kafka: the binlog is read in order), runs the connector until
caught up, and requires `verify` to find zero differences in every table and `validate` no problem.

The helpers take any MariaDB stack's values: on one with ``converter=avro`` (``test_mariadb_avro_e2e``) the
connector and the watermark wait read Avro through the stack's schema registry.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql  # type: ignore[import-untyped]
import pytest
from confluent_kafka import Consumer

from connector.config import SchemaRegistrySettings
from connector.debezium.avro import AvroDecoder
from connector.debezium.envelope import ChangeEvent, EnvelopeDecoder
from connector.events import KafkaRecord
from connector.oracle.source_mysql import MySqlSource
from connector.oracle.validate import validate_landing_zone
from connector.oracle.verify import verify
from connector.storage import LocalStorage
from tests.e2e import workload_mariadb
from tests.support.kafka import REPO_ROOT, run_connector

pytestmark = pytest.mark.e2e

WATERMARK_TIMEOUT_S = 240


def is_avro(stack: dict[str, str]) -> bool:
    return stack.get("converter") == "avro"


def write_config(tmp: Path, stack: dict[str, str]) -> Path:
    """The connector's YAML: with Avro topics, ``value_format: avro`` and the stack's registry."""
    source = (
        f"source:\n  value_format: avro\n  schema_registry:\n    url: {stack['schema.registry.url']}\n"
        if is_avro(stack)
        else ""
    )
    config = tmp / "config.yaml"
    config.write_text(
        "mirror:\n"
        "  truncate_policy: recreate\n"  # TRUNCATE (skipped.operations=none) rebuilds the table's folder
        "  max_rows_per_file: 300\n" + source
    )
    return config


def run_args(stack: dict[str, str], tmp: Path, trigger: str, config: Path) -> list[str]:
    return [
        "run",
        "--config",
        str(config),
        "--bootstrap-servers",
        stack["bootstrap.servers"],
        "--topics",
        stack["topics"],
        "--landing-zone",
        str(tmp / "lz"),
        "--checkpoint",
        str(tmp / "cp"),
        "--trigger",
        trigger,
        "--max-offsets-per-trigger",
        "600",
        "--metrics-port",
        "0",
    ]


@pytest.fixture
def mariadb(mariadb_stack: dict[str, str]) -> Iterator[Any]:
    """An autocommit PyMySQL connection to the stack's database, in UTC.

    A module may override ``mariadb_stack`` (``test_mariadb_avro_e2e`` does, with ``mariadb_avro_stack``).
    """
    source = MySqlSource.from_url(mariadb_stack["mariadb"])
    conn = pymysql.connect(
        host=source.host,
        port=source.port,
        user=source.user,
        password=source.password,
        database=source.database,
        charset="utf8mb4",
        init_command="SET time_zone = '+00:00'",
        autocommit=True,
    )
    try:
        yield conn
    finally:
        conn.close()


def wait_for_watermark(stack: dict[str, str], conn: Any) -> None:
    """Write a watermark row and wait until its change event is in Kafka (decoded as the connector does)."""
    token = uuid.uuid4().hex
    decoder = (
        AvroDecoder(SchemaRegistrySettings(url=stack["schema.registry.url"])) if is_avro(stack) else EnvelopeDecoder()
    )
    with conn.cursor() as cursor:
        cursor.execute("INSERT INTO e2e_watermark VALUES (%s)", (token,))
    prefix = stack["topics"].split("\\.")[0]
    consumer = Consumer(
        {
            "bootstrap.servers": stack["bootstrap.servers"],
            "group.id": f"watermark-{token}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 2000,
        }
    )
    try:
        consumer.subscribe([f"^{prefix}\\.mirror\\.e2e_watermark"])
        deadline = time.monotonic() + WATERMARK_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error() is not None or msg.value() is None:
                continue
            event = decoder.decode(KafkaRecord(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()))
            if isinstance(event, ChangeEvent) and (event.after or {}).get("token") == token:
                return
    finally:
        consumer.close()
    pytest.fail(f"Debezium did not publish the watermark within {WATERMARK_TIMEOUT_S}s")


def catch_up(stack: dict[str, str], conn: Any, tmp: Path, config: Path) -> None:
    wait_for_watermark(stack, conn)
    result = run_connector(*run_args(stack, tmp, "available-now", config))
    assert result.returncode == 0, result.stderr[-5000:]


def assert_mirror_equals_source(stack: dict[str, str], tmp: Path) -> None:
    problems = [str(p) for p in validate_landing_zone(LocalStorage(tmp / "lz"))]
    assert problems == []
    reports = verify(stack["mariadb"], str(tmp / "lz"))
    assert {f"mirror.{name}" for name in workload_mariadb.TABLES} <= {r.table for r in reports}
    failures = [r.line() + "\n  " + "\n  ".join(r.examples) for r in reports if not r.ok]
    assert failures == [], "\n".join(failures)
    for report in reports:
        assert report.source_rows == report.mirror_rows == report.matching, report.line()


def source_count(conn: Any, table: str) -> int:
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {table}")  # noqa: S608 - test constants
        return int(cursor.fetchone()[0])


def mirror_snapshot_and_streaming(stack: dict[str, str], conn: Any, tmp: Path) -> None:
    """Mirror the snapshot, then a streaming phase (inserts, updates, deletes, key moves, a 1000-row
    transaction), ADD COLUMN and TRUNCATE, and another phase; the mirror must equal the source."""
    config = write_config(tmp, stack)
    first = run_connector(*run_args(stack, tmp, "available-now", config))  # the snapshot
    assert first.returncode == 0, first.stderr[-5000:]
    assert list((tmp / "lz" / "mirror.schema" / "all_types").glob("0*.parquet"))

    workload_mariadb.streaming_phase(conn, seed=1)
    workload_mariadb.evolve_and_truncate(conn, seed=1)
    workload_mariadb.streaming_phase(conn, seed=2, big_transaction=False)
    catch_up(stack, conn, tmp, config)

    assert source_count(conn, "wiped") == 5  # only the rows inserted after TRUNCATE
    assert source_count(conn, "items") > 1000  # the 1000-row transaction
    assert_mirror_equals_source(stack, tmp)


def test_snapshot_and_streaming_mirror_equals_mariadb(
    mariadb_stack: dict[str, str], mariadb: Any, tmp_path: Path
) -> None:
    mirror_snapshot_and_streaming(mariadb_stack, mariadb, tmp_path)
    result = run_connector(
        "verify",
        "--source",
        mariadb_stack["mariadb"],
        "--landing-zone",
        str(tmp_path / "lz"),
        "--tables",
        "mirror.all_types",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mirror.all_types: source=" in result.stdout
    assert "differing=0" in result.stdout


def batch_lines(log: Path) -> int:
    return log.read_text().count('"event":"batch"') if log.exists() else 0


def wait_for_batch(process: subprocess.Popen[bytes], log: Path, before: int, timeout_s: float = 240) -> None:
    """Until the connector logs a batch after ``before`` (or exits, or the bound passes; the caller checks)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None and batch_lines(log) <= before:
        time.sleep(0.5)


def test_connector_sigkilled_during_streaming_mirror_equals_mariadb(
    mariadb_stack: dict[str, str], mariadb: Any, tmp_path: Path
) -> None:
    config = write_config(tmp_path, mariadb_stack)
    rng = random.Random(15)
    command = [sys.executable, "-m", "connector", *run_args(mariadb_stack, tmp_path, "1s", config)]
    log_path = tmp_path / "connector.log"
    kills = 0
    with log_path.open("w") as log:
        for round_number in range(3):
            batches_before = batch_lines(log_path)
            process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=log, env=dict(os.environ))
            try:
                workload_mariadb.streaming_phase(mariadb, seed=10 + round_number, big_transaction=round_number == 0)
                if round_number == 1:
                    workload_mariadb.evolve_and_truncate(mariadb, seed=10 + round_number)
                # Kill at a random point once this run is publishing (Spark's start-up time varies with load).
                wait_for_batch(process, log_path, batches_before)
                time.sleep(rng.uniform(0, 3))
            finally:
                alive = process.poll() is None
                if round_number < 2:
                    process.send_signal(signal.SIGKILL)
                    kills += 1
                else:
                    process.send_signal(signal.SIGTERM)
                process.wait(timeout=120)
            assert alive, log_path.read_text()[-3000:]  # killed while running, not after a crash
    assert kills == 2
    assert list((tmp_path / "lz").rglob("0*.parquet"))  # the killed runs did publish
    catch_up(mariadb_stack, mariadb, tmp_path, config)
    assert_mirror_equals_source(mariadb_stack, tmp_path)
