"""PySpark's worker daemon (``spark.python.daemon.module``) with the connector imported before it forks workers.

PySpark's own daemon forks a bare worker per concurrent task, and each worker then imports pyspark's worker,
pyarrow, librdkafka's client and the connector by itself: about 0.8 CPU-s per worker, paid in a query's first
batch. Imported once here, in the daemon, every forked worker starts with them (copy-on-write pages), and the
daemon's start-up objects are frozen out of the workers' garbage collections (``gc.freeze``, as
``connector.spark.python_worker`` does in a worker). pyspark itself comes from the installed package, compiled,
rather than from the zip Spark puts first on the path (``connector.spark.installed_pyspark``). Nothing here starts
a thread: forking stays safe.
"""

from __future__ import annotations

import gc

from connector.spark.installed_pyspark import prefer_installed_pyspark

prefer_installed_pyspark()  # before the imports below, which import pyspark

import confluent_kafka.admin  # noqa: E402, F401 - a consumer's first topic listing imports it (``kafka_read._know_topics``)
import pandas  # noqa: E402, F401 - pyarrow imports it on a worker's first ``pa.array`` of Python values (0.3 CPU-s each)
import pyspark.worker  # noqa: E402, F401 - what each forked worker runs
from pyspark import daemon  # noqa: E402

import connector.spark.slices  # noqa: E402, F401 - the batch tasks' functions and everything they import

if __name__ == "__main__":
    gc.freeze()
    daemon.manager()
