"""PySpark's worker daemon (``spark.python.daemon.module``) with the connector imported before it forks workers.

PySpark's own daemon forks a bare worker per concurrent task, and each worker then imports pyspark's worker,
pyarrow, librdkafka's client and the connector by itself: about 0.8 CPU-s per worker, paid in a query's first
batch. Imported once here, in the daemon, every forked worker starts with them (copy-on-write pages), and the
daemon's start-up objects are frozen out of the workers' garbage collections (``gc.freeze``, as
``connector.spark.python_worker`` does in a worker). pyspark itself comes from the installed package, compiled,
rather than from the zip Spark puts first on the path (``connector.spark.installed_pyspark``). Nothing here starts
a thread: forking stays safe.

Spark starts one daemon per worker module: the batch tasks' (``pyspark.worker``, named by no argument) and, on the
driver, one for each step of planning a Python data source (``pyspark.sql.worker.create_data_source``,
``plan_data_source_read``, …), named as the daemon's argument. A planning step runs once or twice in a query's
life and needs none of the batch code, so its daemon imports only its own module: the batch imports cost about
0.5 CPU-s per daemon, paid on the driver while the query plans its first batch.
"""

from __future__ import annotations

import gc
import importlib
import sys

from connector.spark.installed_pyspark import prefer_installed_pyspark

#: What the batch tasks' workers import first: pyspark's worker, the tasks' functions and everything they import,
#: librdkafka's admin client (a consumer's first topic listing, ``kafka_read._know_topics``) and pandas (pyarrow
#: imports it on a worker's first ``pa.array`` of Python values, 0.3 CPU-s each).
BATCH_TASK_IMPORTS = ("pyspark.worker", "confluent_kafka.admin", "pandas", "connector.spark.slices")
BATCH_WORKER_MODULE = "pyspark.worker"


def worker_module(argv: list[str]) -> str:
    """The module this daemon's workers run, as PySpark's daemon reads it from its arguments."""
    return argv[1] if len(argv) > 1 and argv[1].startswith("pyspark") else BATCH_WORKER_MODULE


def preload(module: str) -> tuple[str, ...]:
    """Import what the workers of ``module`` need before the daemon forks them; returns the modules imported."""
    prefer_installed_pyspark()  # before any import of pyspark
    wanted = BATCH_TASK_IMPORTS if module == BATCH_WORKER_MODULE else (module,)
    for name in wanted:
        importlib.import_module(name)
    return wanted


if __name__ == "__main__":
    preload(worker_module(sys.argv))
    from pyspark import daemon

    gc.freeze()
    daemon.manager()
