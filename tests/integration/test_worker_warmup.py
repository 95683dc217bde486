"""Spark's Python workers in a real session: forked by the connector's daemon, warmed beside the query's start.

``connector.spark.python_daemon`` imports the connector (and pyspark from its installed package) before it forks a
worker; ``connector.spark.worker_warmup`` runs a task per core that creates each worker's Kafka consumer and fills
its metadata cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.config import ConnectorSettings, SourceSettings
from connector.spark.source import kafka_read_spec
from connector.spark.spark_session import spark_session
from connector.spark.worker_warmup import warm_workers

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_workers_start_with_the_connector_imported_and_a_warmed_consumer(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = ConnectorSettings(
        source=SourceSettings(kind="kafka", bootstrap_servers=kafka_bootstrap, topics="warm-up"),
        spark={"master": "local[2]"},  # type: ignore[arg-type]
        checkpoint=str(tmp_path / "cp"),
    )
    read, why = kafka_read_spec(settings)
    assert read is not None, why

    # Defined here, so Spark ships them by value: a worker runs them without importing any module of this test.
    def imported(_task: int) -> bool:
        import sys

        # pandas: pyarrow imports it on the first ``pa.array`` of Python values, as every read's record columns are.
        wanted = ("connector.spark.slices", "pandas", "confluent_kafka.admin")
        # pyspark and py4j from the installed, compiled packages, not from the zips Spark puts first on the path.
        compiled = all(".zip" not in (sys.modules[name].__file__ or ".zip") for name in ("pyspark", "py4j"))
        return compiled and all(name in sys.modules for name in wanted)

    def consumer_ready(_task: int) -> bool:
        from connector.collect import kafka_read

        return bool(kafka_read._consumers) and bool(kafka_read._listed)

    spark = spark_session(settings)
    try:
        forked = spark.sparkContext.parallelize(range(2), 2).map(imported).collect()
        warm_workers(spark, read).join(timeout=120)
        warmed = spark.sparkContext.parallelize(range(2), 2).map(consumer_ready).collect()
    finally:
        spark.stop()
    assert forked == [True, True]  # PySpark's own daemon forks bare workers: False
    assert warmed == [True, True]
