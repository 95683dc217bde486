"""Writes ``tests/data/checkpoint_spark401``: the checkpoint and landing zone of a run on Spark 4.0.1.

Spark 4.0.1 is the release before the upgrade to 4.2; ``test_spark_upgrade.py`` continues this state under the
installed Spark. Not collected by the suite (no ``test_`` prefix): run it once, explicitly, from a venv with
pyspark 4.0.1 and its Kafka jars (``deploy/local/maven/spark-kafka/pom.xml`` at 4.0.1)::

    python -m pytest tests/integration/spark_checkpoint_fixture.py -p no:cacheprovider

The workload is seeded, so ``prepare`` gives the same records, and the same offsets, on any fresh broker.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.test_stream_kafka import connector_args, prepare
from tests.support.kafka import REPO_ROOT, run_connector

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

FIXTURE = REPO_ROOT / "tests" / "data" / "checkpoint_spark401"
WRITTEN_BY = "4.0.1"
PREFIX = "upgrade401"
#: Operations before the checkpoint was written; the workload then goes on for the run under the new Spark.
OPERATIONS = 300
#: Several micro-batches: the new Spark must continue after the last of them.
MAX_OFFSETS_PER_TRIGGER = 120


def fixture_args(bootstrap: str, tmp: Path) -> list[str]:
    """The ``run`` arguments of the fixture's run (and of the run that continues it), state under ``tmp``."""
    args = connector_args(bootstrap, PREFIX, tmp)
    args[args.index("--max-offsets-per-trigger") + 1] = str(MAX_OFFSETS_PER_TRIGGER)
    return args


def test_write_checkpoint_fixture(kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path) -> None:
    import pyspark

    assert pyspark.__version__ == WRITTEN_BY, f"write the fixture with pyspark {WRITTEN_BY}"
    prepare(make_topic, kafka_bootstrap, PREFIX, OPERATIONS)
    result = run_connector(*fixture_args(kafka_bootstrap, tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    shutil.rmtree(FIXTURE, ignore_errors=True)
    FIXTURE.mkdir(parents=True)
    # Spark's own log is not state: left out to keep the fixture small.
    shutil.copytree(tmp_path / "cp", FIXTURE / "cp", ignore=shutil.ignore_patterns("logs"))
    shutil.copytree(tmp_path / "lz", FIXTURE / "lz")
