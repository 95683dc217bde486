"""Once per Spark Python worker: take the per-task full garbage collection of PySpark's daemon off every task.

After each task Spark's daemon (``pyspark/daemon.py``) runs a full ``gc.collect()``, which walks every tracked
object, the imported modules' (pyspark, pyarrow, the connector) included. ``gc.freeze()`` takes what is alive when
the worker starts its first task out of those walks for good. Per-task objects are created after it and are
collected as before; what is frozen is still freed when its last reference goes.

Measured on AMD EPYC, 2 cores, shared with other work:

- PySpark 4.0.1, this module's first version (load average 0.8): ``bench stream --events 2000000
  --max-offsets-per-trigger 200000`` (8 partitions, 200k records per trigger: 80 tasks of 25k records,
  ``decode_on: executors``) took 15.0 executor CPU-s per 1M events (the local JVM and its Python workers, from
  ``/proc``) without the measures and 10.6-11.2 with them; the workers' share halved, to 3.8 per 1M.
- PySpark 4.2.0 (load average 8-22, so read the direct figure): one ``gc.collect()`` of a worker's imports (65,000
  tracked objects) costs 31 ms of CPU, 0.0 ms once frozen (27.7 ms on 4.0.1): about 1.2 CPU-s per 1M events of that
  bench. The bench itself, back to back, executors' CPU-s per 1M: round 1 with the freeze 12.68, with the freeze
  and the zip-importer measure 13.23, with the zip-importer measure only 16.11, with neither 16.54; round 2 with
  neither 14.32, with the freeze 14.45 (the load's swing, 11-22, is larger than the saving).

PySpark 4.0's worker also called ``importlib.invalidate_caches()`` before every task, and Python 3.11's
``zipimporter`` then read each archive on the workers' path (``pyspark.zip``, py4j's zip, spark-core's jar: 16
importers) again, 30-100 ms of CPU per task; this module made those importers keep the directory they had read.
PySpark 4.2 calls it only when a task adds a path, so a worker's later tasks read nothing: that measure no longer
paid (above) and was dropped. ``tests/unit/spark/test_python_worker.py`` checks both
behaviours.
"""

from __future__ import annotations

import functools
import gc


@functools.cache
def prepare_worker() -> None:
    """Freeze what is alive in this process, once; later calls do nothing."""
    gc.freeze()
