"""The Spark session ``run`` streams with: master, Kafka jars, JVM options, and Spark's own log routed to ours."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from connector.config import ConnectorSettings
from connector.secrets import has_secret_reference, is_secret_setting, resolve_secret_references
from connector.spark.source import jvm_options, kafka_jars, plans_with_python
from connector.spark.spark_log import route_to_file

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = logging.getLogger(__name__)

# How long a stop waits for Spark's stream thread; well inside the Helm chart's terminationGracePeriodSeconds.
QUERY_STOP_TIMEOUT_S = 30.0


def spark_session(settings: ConnectorSettings) -> SparkSession:
    """A Spark session for the job; Kafka connector jars only when Spark's own Kafka source plans the batches."""
    from pyspark.sql import SparkSession

    # The Python workers that collect slices must run this interpreter, which has the connector installed;
    # PySpark reads the variable when the context starts (the spark.pyspark.python setting is spark-submit's).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName("debezium-fabric-mirror")
        .master(settings.spark.master)
        .config("spark.ui.enabled", "false")
        # The console progress bar would be printed into the service's log.
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        # A query waiting on unreachable brokers ignores interrupts for minutes; a stop gives up after this.
        .config("spark.sql.streaming.stopTimeout", str(int(QUERY_STOP_TIMEOUT_S * 1000)))
        # One Arrow batch per partition slice rather than many small ones.
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
        # Off (Spark 4.1+ defaults it on): staging assumes each task holds whole Kafka partition slices in offset
        # order (connector.spark.slices), and AQE may re-plan a micro-batch's partitions behind that assumption.
        .config("spark.sql.adaptive.streaming.stateless.enabled", "false")
    )
    if settings.source.kind == "kafka" and not plans_with_python(settings.source):
        builder = builder.config("spark.jars", ",".join(kafka_jars()))
    # Secret references, and secret-looking Hadoop settings (which the running session accepts too).
    secret_conf = {
        k: v
        for k, v in settings.spark.conf.items()
        if has_secret_reference(v) or (k.startswith("spark.hadoop.") and is_secret_setting(k, v))
    }
    for key, value in {**jvm_options(settings), **_python_daemon(settings), **settings.spark.conf}.items():
        if key not in secret_conf:
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _route_spark_log(spark, settings)
    # PySpark hands start-up settings to the JVM as ``--conf k=v`` arguments, readable by anyone in
    # /proc/<pid>/cmdline: secrets are set on the running session instead, resolved only here.
    for key, value in secret_conf.items():
        spark.conf.set(key, resolve_secret_references(value, f"spark.conf.{key}"))
    return spark


#: ``connector.spark.python_daemon``, named here so that the driver need not import what the daemon imports.
PYTHON_DAEMON_MODULE = "connector.spark.python_daemon"


def _python_daemon(settings: ConnectorSettings) -> dict[str, str]:
    """The connector's worker daemon when the executors collect the batches (their workers import the connector)."""
    return {"spark.python.daemon.module": PYTHON_DAEMON_MODULE} if settings.spark.decode_on == "executors" else {}


def _route_spark_log(spark: SparkSession, settings: ConnectorSettings) -> None:
    """Spark's stack traces and errors to ``<checkpoint>/logs/spark.log``, its one-line warnings to the console.

    A failed query is reported once, as the one ``error:`` line that names that file (``_query_failure``);
    Spark's own reports of it (hundreds of lines of JVM stacks) would bury that line (``connector.spark.spark_log``).
    """
    debug_log = route_to_file(spark, Path(settings.checkpoint) / "logs" / "spark.log")
    if debug_log is not None:
        log.info("Spark's errors and stack traces are logged to %s", debug_log)
