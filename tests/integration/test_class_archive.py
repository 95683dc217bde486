"""The Spark driver's class archive, real: written by ``class-archive``'s code and mapped through the setting."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from connector.spark.class_archive import ClassArchiveError, write_class_archive

pytestmark = pytest.mark.spark

# Run in a fresh interpreter: PySpark starts one JVM per process, with the options of the first session.
_SESSION_MAPS = """
import sys
from pathlib import Path
from connector.config import ConnectorSettings, SparkSettings
from connector.spark.spark_session import spark_session
spark = spark_session(ConnectorSettings(spark=SparkSettings(master="local[1]", class_archive=sys.argv[1])))
pid = spark.sparkContext._gateway.proc.pid
print(sys.argv[1] in Path(f"/proc/{pid}/maps").read_text())
spark.stop()
"""
_ARCHIVE_FLAG = re.compile(r"-XX:SharedArchiveFile=(\S+)")


def _archive(tmp_path: Path) -> Path:
    """The suite's archive (tests/conftest.py writes it with ``write_class_archive``), else one written here."""
    found = _ARCHIVE_FLAG.search(os.environ.get("SPARK_SUBMIT_OPTS", ""))
    if found:
        return Path(found.group(1))
    archive = tmp_path / "spark.jsa"
    write_class_archive(archive)
    return archive


def test_the_driver_maps_the_archive_the_setting_names(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    # Only the setting can make this driver map it: the suite's own flag is taken out of its environment.
    options = _ARCHIVE_FLAG.sub("", os.environ.get("SPARK_SUBMIT_OPTS", ""))
    env = {**os.environ, "SPARK_SUBMIT_OPTS": options}
    done = subprocess.run(
        [sys.executable, "-c", _SESSION_MAPS, str(archive)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "True", "the driver JVM did not map the archive"


def test_a_failed_sample_run_names_the_archive_and_leaves_no_file(tmp_path: Path) -> None:
    archive = tmp_path / "spark.jsa"
    # No Java and no shell to start Spark with: the sample run fails at its session's start.
    broken = {name: value for name, value in os.environ.items() if name != "JAVA_HOME"} | {"PATH": str(tmp_path)}
    with pytest.raises(ClassArchiveError, match=re.escape(str(archive))) as failed:
        write_class_archive(archive, broken)
    assert "JAVA_GATEWAY_EXITED" in str(failed.value)  # the run's own output says why
    assert list(tmp_path.iterdir()) == []
