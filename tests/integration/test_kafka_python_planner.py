"""The connector's own Kafka source (``source.planner: python``) against a real broker and real Spark.

Exactly the mirror after a crash mid-stream, a checkpoint passing from Spark's Java Kafka source to ours and back,
available-now ending where the logs ended, and the records read by the source itself (``spark.decode_on: driver``).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from connector.kafka.initial_offsets import read_initial_offsets
from connector.kafka.spark_checkpoint import SparkCheckpoint
from connector.storage import LocalStorage
from tests.integration.test_stream_kafka import assert_mirror_equals, connector_args, file_digests, prepare
from tests.support.kafka import produce, run_connector

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PYTHON = {"CONNECTOR_SOURCE__PLANNER": "python"}
SPARK = {"CONNECTOR_SOURCE__PLANNER": "spark"}


def _args(bootstrap: str, prefix: str, tmp: Path, max_offsets: int = 300) -> list[str]:
    args = connector_args(bootstrap, prefix, tmp)
    args[args.index("--max-offsets-per-trigger") + 1] = str(max_offsets)
    return args


def _logged_offsets(tmp: Path) -> list[dict[str, dict[str, int]]]:
    """The Kafka offsets of every batch in Spark's offsets log, in batch order."""
    checkpoint = SparkCheckpoint(tmp / "cp" / "spark")
    ids = sorted(int(p.name) for p in (checkpoint.folder / "offsets").iterdir() if p.name.isdigit())
    return [json.loads((checkpoint.offsets(i) or ("{}",))[0]) for i in ids]


def _planners(tmp: Path) -> list[str]:
    """Which source planned each batch: Python's ``json.dumps`` spaces the offsets, Spark's Kafka source does not."""
    checkpoint = SparkCheckpoint(tmp / "cp" / "spark")
    ids = sorted(int(p.name) for p in (checkpoint.folder / "offsets").iterdir() if p.name.isdigit())
    return ["python" if '": {"' in (checkpoint.offsets(i) or ("",))[0] else "spark" for i in ids]


def _ends(bootstrap: str, tmp: Path) -> dict[str, dict[str, int]]:
    """Each matching partition's end offset now, as the offsets log names them."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topics = {t for batch in _logged_offsets(tmp) for t in batch}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=30).topics
    request = {TopicPartition(t, p): OffsetSpec.latest() for t in topics for p in metadata[t].partitions}
    ends: dict[str, dict[str, int]] = {}
    for key, future in admin.list_offsets(request).items():
        ends.setdefault(key.topic, {})[str(key.partition)] = future.result().offset
    return ends


def test_a_crash_mid_stream_continues_exactly(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "ppcrash"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 2500)
    args = _args(kafka_bootstrap, prefix, tmp_path)
    crashed = run_connector(
        *args, wrapper="tests.support.crash_run", env={**PYTHON, "CRASH_OPERATION": "rename_new", "CRASH_AT": "8"}
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    landing = LocalStorage(tmp_path / "lz")
    published = file_digests(landing)
    assert published
    restarted = run_connector(*args, env=PYTHON)
    assert restarted.returncode == 0, restarted.stderr[-4000:]
    assert_mirror_equals(landing, workload)
    assert {k: v for k, v in file_digests(landing).items() if k in published} == published
    logged = _logged_offsets(tmp_path)
    assert len(logged) > 2  # several batches of at most 300 records
    assert set(_planners(tmp_path)) == {"python"}
    assert logged[-1] == _ends(kafka_bootstrap, tmp_path)  # available-now ended at the logs' ends
    initial = read_initial_offsets(tmp_path / "cp" / "spark")
    assert initial is not None
    assert set(initial) == set(logged[0])


def test_a_crash_in_the_first_batch_plans_that_batch_again_from_the_kept_start(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "ppfirst"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 600)
    args = _args(kafka_bootstrap, prefix, tmp_path, max_offsets=100_000)
    crashed = run_connector(
        *args, wrapper="tests.support.crash_run", env={**PYTHON, "CRASH_OPERATION": "rename_new", "CRASH_AT": "1"}
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    kept = (tmp_path / "cp" / "spark" / "sources" / "0" / "0").read_bytes()
    assert kept.startswith(b"\0v1\n{")
    produce(kafka_bootstrap, workload.records(300))  # the restart's batch 0 still ends where it was logged
    restarted = run_connector(*args, env=PYTHON)
    assert restarted.returncode == 0, restarted.stderr[-4000:]
    assert (tmp_path / "cp" / "spark" / "sources" / "0" / "0").read_bytes() == kept
    assert_mirror_equals(LocalStorage(tmp_path / "lz"), workload)


def test_a_checkpoint_passes_from_spark_s_kafka_source_to_ours_and_back(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The upgrade: Spark's Java source killed mid-stream, our source finishes the batch it planned; then back."""
    prefix = "ppupgrade"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 2500)
    args = _args(kafka_bootstrap, prefix, tmp_path)
    crashed = run_connector(
        *args, wrapper="tests.support.crash_run", env={**SPARK, "CRASH_OPERATION": "rename_new", "CRASH_AT": "8"}
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert set(_planners(tmp_path)) == {"spark"}
    landing = LocalStorage(tmp_path / "lz")
    upgraded = run_connector(*args, env=PYTHON)
    assert upgraded.returncode == 0, upgraded.stderr[-4000:]
    assert_mirror_equals(landing, workload)
    upgraded_planners = _planners(tmp_path)
    assert upgraded_planners[0] == "spark"
    assert upgraded_planners[-1] == "python"
    produce(kafka_bootstrap, workload.records(700))
    downgraded = run_connector(*args, env=SPARK)
    assert downgraded.returncode == 0, downgraded.stderr[-4000:]
    assert_mirror_equals(landing, workload)
    assert _planners(tmp_path)[-1] == "spark"
    assert _logged_offsets(tmp_path)[-1] == _ends(kafka_bootstrap, tmp_path)


def test_the_source_reads_the_records_itself_when_the_driver_decodes(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "ppdriver"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 1200)
    env = {**PYTHON, "CONNECTOR_SPARK__DECODE_ON": "driver"}
    result = run_connector(*_args(kafka_bootstrap, prefix, tmp_path), env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert_mirror_equals(LocalStorage(tmp_path / "lz"), workload)
    assert _logged_offsets(tmp_path)[-1] == _ends(kafka_bootstrap, tmp_path)
