"""The streaming job against a real Kafka broker and real Spark: exactly once, crash-safe, caught up."""

from __future__ import annotations

import hashlib
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from connector.storage import LocalStorage
from connector.tools.replay import replay_landing_zone
from connector.tools.validate import validate_landing_zone
from tests.support.kafka import produce, run_connector
from tests.support.model import Workload, replayed_rows

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def prepare(make_topic: Callable[..., str], bootstrap: str, prefix: str, operations: int) -> Workload:
    workload = Workload(prefix, partitions=3)
    make_topic(workload.customers.name, 3)
    make_topic(workload.orders.name, 3)
    make_topic(f"__debezium-heartbeat.{prefix}", 1)
    produce(bootstrap, workload.records(operations))
    produce(
        bootstrap,
        [workload.customers.raw(b'{"ts_ms":1}')._replace(topic=f"__debezium-heartbeat.{prefix}", partition=0)],
    )
    return workload


def connector_args(bootstrap: str, prefix: str, tmp: Path, *extra: str) -> list[str]:
    config = tmp / "config.yaml"
    config.write_text("mirror:\n  max_rows_per_file: 400\n")
    return [
        "run",
        "--config",
        str(config),
        "--bootstrap-servers",
        bootstrap,
        "--topics",
        rf"(__debezium-heartbeat\.)?{prefix}(\..*)?",
        "--landing-zone",
        str(tmp / "lz"),
        "--checkpoint",
        str(tmp / "cp"),
        "--trigger",
        "available-now",
        "--max-offsets-per-trigger",
        "1500",
        "--metrics-port",
        "0",
        *extra,
    ]


def assert_mirror_equals(tmp: Path, workload: Workload) -> None:
    storage = LocalStorage(tmp / "lz")
    assert [str(p) for p in validate_landing_zone(storage)] == []
    assert replayed_rows(replay_landing_zone(storage)) == workload.expected()


def file_digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and p.name[:1].isdigit()
    }


def test_available_now_catches_up_and_mirror_equals_source(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    workload = prepare(make_topic, kafka_bootstrap, "it1", 2500)
    result = run_connector(*connector_args(kafka_bootstrap, "it1", tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    assert '"event":"batch"' in result.stderr
    assert_mirror_equals(tmp_path, workload)
    first = file_digests(tmp_path / "lz")
    # More changes later: the same job continues the numbering and the mirror follows.
    produce(kafka_bootstrap, workload.records(800))
    again = run_connector(*connector_args(kafka_bootstrap, "it1", tmp_path))
    assert again.returncode == 0, again.stderr[-4000:]
    assert_mirror_equals(tmp_path, workload)
    after = file_digests(tmp_path / "lz")
    assert {k: after[k] for k in first} == first  # nothing published is rewritten
    assert len(after) > len(first)


@pytest.mark.parametrize(
    ("operation", "at"),
    [("rename_new", 3), ("rename_new", 8), ("commit", 2)],
    ids=["between-files-batch-1", "between-files-later", "after-last-file-before-commit"],
)
def test_sigkill_while_publishing_then_restart(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path, operation: str, at: int
) -> None:
    prefix = f"crash{operation[:3]}{at}"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 2500)
    crashed = run_connector(
        *connector_args(kafka_bootstrap, prefix, tmp_path),
        wrapper="tests.support.crash_run",
        env={"CRASH_OPERATION": operation, "CRASH_AT": str(at)},
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    published = file_digests(tmp_path / "lz")
    assert published  # the kill came in the middle of publishing, after some files
    restarted = run_connector(*connector_args(kafka_bootstrap, prefix, tmp_path))
    assert restarted.returncode == 0, restarted.stderr[-4000:]
    assert_mirror_equals(tmp_path, workload)
    final = file_digests(tmp_path / "lz")
    assert {k: final[k] for k in published} == published  # never overwritten
    assert not list((tmp_path / "lz").rglob("_staged_*"))
