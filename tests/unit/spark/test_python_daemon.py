"""The connector's worker daemon preloads the batch code for the batch tasks' workers only, not for planning steps."""

from __future__ import annotations

import subprocess
import sys

from connector.spark.python_daemon import BATCH_WORKER_MODULE, worker_module

PROBE = """
import sys
from connector.spark.python_daemon import preload
preload(sys.argv[1])
print(",".join(name for name in ("connector.spark.slices", "pandas", "pyspark.worker") if name in sys.modules))
"""


def imported_after_preload(module: str) -> set[str]:
    """The batch modules a fresh interpreter holds after ``preload(module)``."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, module], capture_output=True, text=True, check=True, timeout=120
    )
    return set(filter(None, result.stdout.strip().split(",")))


def test_the_worker_module_is_the_daemon_s_argument_as_pyspark_reads_it() -> None:
    assert worker_module(["daemon"]) == BATCH_WORKER_MODULE
    assert worker_module(["daemon", "pyspark.sql.worker.plan_data_source_read"]) == (
        "pyspark.sql.worker.plan_data_source_read"
    )
    assert worker_module(["daemon", "something-else"]) == BATCH_WORKER_MODULE


def test_the_batch_tasks_daemon_imports_the_batch_code() -> None:
    assert imported_after_preload(BATCH_WORKER_MODULE) == {"connector.spark.slices", "pandas", "pyspark.worker"}


def test_a_planning_step_s_daemon_imports_its_own_module_only() -> None:
    assert imported_after_preload("pyspark.sql.worker.plan_data_source_read") == set()
