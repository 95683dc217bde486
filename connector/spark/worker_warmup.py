"""Spark's Python workers started, and the connector imported in them, while the streaming query starts.

A query's first batch otherwise pays for them: PySpark's daemon starting, a worker forked per core, each importing
the connector, pyarrow and librdkafka and connecting its consumer (1.3 s of a first batch on 2 cores, where a warm
worker's job takes 0.3 s). Spark keeps its Python workers for later tasks, so one small job of a task per core,
run beside the query's start (the JVM planning its first batch, reading offsets, writing its checkpoint), leaves a
ready worker for each of the first batch's tasks. It only ever saves time: a failure is logged and forgotten, and
the batch's tasks start whatever workers are missing themselves.
"""

from __future__ import annotations

import logging
import threading
from functools import partial
from typing import TYPE_CHECKING

from connector.collect.kafka_read import warm_consumer
from connector.collect.kafka_spec import KafkaReadSpec
from connector.spark.planner_warmup import warm_planner
from connector.spark.python_worker import prepare_worker
from connector.spark.source import kafka_read_spec, plans_with_python

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from connector.config import ConnectorSettings

log = logging.getLogger(__name__)


def warm_up(spark: SparkSession, settings: ConnectorSettings) -> None:
    """What `run` warms beside the source's loading and the query's start: the executors' workers, the planner."""
    if settings.spark.decode_on == "executors":
        warm_workers(spark, kafka_read_spec(settings)[0])
    if plans_with_python(settings.source):
        warm_planner(spark)


def warm_workers(spark: SparkSession, read: KafkaReadSpec | None) -> threading.Thread:
    """Start the warm-up job in a background thread (returned, already started); ``read``: the executors' reads."""
    thread = threading.Thread(target=_run, args=(spark, read), name="warm-python-workers", daemon=True)
    thread.start()
    return thread


def _run(spark: SparkSession, read: KafkaReadSpec | None) -> None:
    cores = max(1, spark.sparkContext.defaultParallelism)
    try:
        spark.sparkContext.parallelize(range(cores), cores).foreach(partial(warm_worker, read))
    except Exception as exc:  # noqa: BLE001 - a warm-up never fails the job; the first batch starts its own workers
        log.debug("warming Spark's Python workers failed: %s", exc)


def warm_worker(read: KafkaReadSpec | None, _task: int) -> None:
    """In a Python worker: what a batch's task would do first (importing this module imported the connector)."""
    import connector.spark.slices  # noqa: F401, PLC0415 - the batch's task functions and what they import

    prepare_worker()
    if read is not None:
        warm_consumer(read)
