"""Once per Spark Python worker: take two fixed costs of PySpark's worker loop off every task.

Measured with ``bench stream`` (8 partitions, 200k records per trigger: 80 tasks of 25k records), they cost
the Python workers more CPU than collecting and staging the records did:

- Before each task PySpark's worker calls ``importlib.invalidate_caches()`` (``setup_spark_files``), and Python
  3.11's ``zipimporter`` answers by reading its whole archive directory again, in Python. Spark puts
  ``pyspark.zip``, py4j's zip and spark-core's jar on the workers' path, with one importer per package folder
  imported from them: 16 archive reads, 30-100 ms of CPU per task. Those archives do not change while a worker
  lives (a file added with ``addPyFile`` arrives as a new path entry, which gets an importer of its own).
- After each task Spark's daemon runs a full ``gc.collect()``, which walks every tracked object, the ~100k of
  the imported modules (pyspark, pyarrow, the connector) included: 50-110 ms per task. ``gc.freeze()`` takes
  what is alive when the worker starts its first task out of those walks for good. Per-task objects are
  created after it and are collected as before; what is frozen is still freed when its last reference goes.
"""

from __future__ import annotations

import functools
import gc
import sys
import zipimport


class ArchiveImporter(zipimport.zipimporter):
    """A zip importer for an archive that does not change while the process lives: nothing to read again."""

    def invalidate_caches(self) -> None:
        """Keep the archive's directory as read (the base class reads the whole archive again)."""


@functools.cache
def prepare_worker() -> None:
    """Apply both measures in this process, once; later calls do nothing."""
    keep_archive_directories()
    gc.freeze()


def keep_archive_directories() -> None:
    """Make the zip importers on the path, and those made from now on, ``ArchiveImporter``s."""
    sys.path_hooks[:] = [ArchiveImporter if hook is zipimport.zipimporter else hook for hook in sys.path_hooks]
    for path, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter:
            # The archive's directory is cached by the module: this reads nothing.
            sys.path_importer_cache[path] = ArchiveImporter(path)
