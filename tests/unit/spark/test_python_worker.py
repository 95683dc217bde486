"""The once-per-worker measure of ``connector.spark.python_worker``, and the PySpark behaviour that made the other one
unnecessary, each in a fresh interpreter.

They change the garbage collector (or the import system) of the process they run in, so every test runs them in a
subprocess of its own, as a Spark Python worker would, and never in pytest's process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter; its standard output."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_prepare_worker_freezes_what_is_alive_once_and_later_garbage_is_still_collected() -> None:
    out = run_python(
        """
import gc
from connector.spark.python_worker import prepare_worker
prepare_worker()
frozen = gc.get_freeze_count()
prepare_worker()
print(frozen > 1000, gc.get_freeze_count() == frozen)

class Node:
    pass
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after the freeze: the collector still frees it
del a, b
print(gc.collect() >= 2)
"""
    )
    assert out.split() == ["True", "True", "True"]


def test_pyspark_invalidates_import_caches_only_when_a_task_adds_a_path() -> None:
    """PySpark 4.0 called ``importlib.invalidate_caches()`` before every task, and every zip importer on the path
    then read its archive again (the measure this module dropped); PySpark 4.2 calls it when a task adds a path."""
    out = run_python(
        """
import importlib, io, struct, tempfile
from pyspark import worker_util
calls = []
importlib.invalidate_caches = lambda: calls.append(1)
files_dir = tempfile.mkdtemp().encode()
def task_header():  # the task's SparkFiles directory and no Python includes, as the JVM sends them
    return io.BytesIO(struct.pack(">i", len(files_dir)) + files_dir + struct.pack(">i", 0))
for _ in range(3):
    worker_util.setup_spark_files(task_header())
print(len(calls))
"""
    )
    assert out.split() == ["1"]
