"""Spark's read planner warmed in a real session: the query plans its first batch in the worker the warm-up left.

``connector.spark.planner_warmup`` plans a read of an empty data source; Spark keeps that planner worker and the
query's own read planning (the connector's Kafka source, against a real broker) must reuse it, not start another.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from connector.config import ConnectorSettings, SourceSettings
from connector.events import KafkaRecord
from connector.spark.planner_warmup import warm_planner
from connector.spark.source import plans_with_python, stream
from connector.spark.spark_session import spark_session
from tests.support.kafka import produce

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

PLANNER_MODULE = "pyspark.sql.worker.plan_data_source_read"


def _planner_processes(jvm_pid: int) -> set[int]:
    """This JVM's read-planner processes: PySpark's daemon for the planner module and the workers it forked."""
    found: set[int] = set()
    parents = {jvm_pid}
    for _ in range(2):  # the daemon (a child of the JVM), then its workers
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            parent = int(stat[stat.rfind(")") + 2 :].split()[1])
            if parent in parents and PLANNER_MODULE in command:
                found.add(pid)
        parents |= found
    return found


def test_the_query_plans_its_first_batch_in_the_planner_worker_the_warm_up_left(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = "planner-warm-up"
    produce(kafka_bootstrap, [KafkaRecord(topic, 0, i, b'{"id":%d}' % i, b"{}") for i in range(3)])
    settings = ConnectorSettings(
        source=SourceSettings(kind="kafka", bootstrap_servers=kafka_bootstrap, topics=topic),
        spark={"master": "local[2]"},  # type: ignore[arg-type]
        checkpoint=str(tmp_path / "cp"),
    )
    assert plans_with_python(settings.source)
    read: list[int] = []

    def count(frame: Any, _batch: int) -> None:
        read.append(frame.count())

    spark = spark_session(settings)
    try:
        jvm_pid = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
        assert _planner_processes(jvm_pid) == set()
        warm_planner(spark).join(timeout=120)
        warmed = _planner_processes(jvm_pid)
        query = stream(spark, settings).writeStream.foreachBatch(count)
        query.option("checkpointLocation", str(tmp_path / "cp" / "spark")).trigger(availableNow=True).start()
        spark.streams.awaitAnyTermination(120)
        after = _planner_processes(jvm_pid)
    finally:
        spark.stop()
    assert sum(read) == 3  # the query did plan and read its batch
    assert len(warmed) == 2  # the daemon and the worker it forked, left idle
    assert after == warmed  # the query's planning reused that worker: no other daemon or worker started
