"""The streaming job against a real Kafka broker and real Spark: exactly once, crash-safe, caught up."""

from __future__ import annotations

import hashlib
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from connector.readback.replay import replay_landing_zone
from connector.readback.validate import validate_landing_zone
from connector.storage import LocalStorage, Storage
from tests.support.kafka import produce, run_connector
from tests.support.landing import Landing
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


def connector_args(bootstrap: str, prefix: str, tmp: Path, *extra: str, landing_zone: str | None = None) -> list[str]:
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
        landing_zone or str(tmp / "lz"),
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


def assert_mirror_equals(storage: Storage, workload: Workload) -> None:
    assert [str(p) for p in validate_landing_zone(storage)] == []
    assert replayed_rows(replay_landing_zone(storage)) == workload.expected()


def file_digests(storage: Storage, folder: str = "") -> dict[str, str]:
    """SHA-256 of every numbered file in the landing zone."""
    out: dict[str, str] = {}
    for entry in storage.list_dir(folder):
        if entry.is_dir:
            out.update(file_digests(storage, entry.path))
        elif entry.path.rsplit("/", 1)[-1][:1].isdigit():
            out[entry.path] = hashlib.sha256(storage.read_bytes(entry.path)).hexdigest()
    return out


def test_available_now_catches_up_and_mirror_equals_source(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path, landing: Landing
) -> None:
    """Runs with the landing zone in a local folder and on OneLake (the DFS test double, reached with a
    managed identity through azure-identity); the Spark checkpoint stays local."""
    prefix = f"it1{landing.backend}"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 2500)
    args = connector_args(kafka_bootstrap, prefix, tmp_path, landing_zone=landing.url)
    env = {"CONNECTOR_LANDING_ZONE__CREDENTIAL": "managed_identity"}  # ignored for a local folder
    result = run_connector(*args, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert '"event":"batch"' in result.stderr
    assert_mirror_equals(landing.storage, workload)
    first = file_digests(landing.storage)
    # More changes later: the same job continues the numbering and the mirror follows.
    produce(kafka_bootstrap, workload.records(800))
    again = run_connector(*args, env=env)
    assert again.returncode == 0, again.stderr[-4000:]
    assert_mirror_equals(landing.storage, workload)
    after = file_digests(landing.storage)
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
    landing = LocalStorage(tmp_path / "lz")
    published = file_digests(landing)
    assert published  # the kill came in the middle of publishing, after some files
    restarted = run_connector(*connector_args(kafka_bootstrap, prefix, tmp_path))
    assert restarted.returncode == 0, restarted.stderr[-4000:]
    assert_mirror_equals(landing, workload)
    final = file_digests(landing)
    assert {k: final[k] for k in published} == published  # never overwritten
    assert not list((tmp_path / "lz").rglob("_staged_*"))


def test_spark_s_own_kafka_source_publishes_what_the_direct_read_does(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """``source.reader: spark`` (chosen by itself for JKS stores) works, and both readers publish the same files."""
    prefix = "itreaders"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 1200)
    digests = {}
    for reader in ("direct", "spark"):
        folder = tmp_path / reader
        folder.mkdir()
        result = run_connector(
            *connector_args(kafka_bootstrap, prefix, folder), env={"CONNECTOR_SOURCE__READER": reader}
        )
        assert result.returncode == 0, result.stderr[-4000:]
        said = (
            "the executors read each batch's offsets themselves" if reader == "direct" else "Spark's Kafka source reads"
        )
        assert said in result.stderr
        storage = LocalStorage(str(folder / "lz"))
        assert_mirror_equals(storage, workload)
        digests[reader] = file_digests(storage)
    assert digests["direct"] == digests["spark"]


def test_the_topic_pattern_matches_whole_names_only(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Spark's subscribePattern finds a pattern inside a name: ``itanchor...`` would take ``xitanchor.*`` too."""
    workload = prepare(make_topic, kafka_bootstrap, "itanchor", 300)
    # Names containing the pattern, not matching it, and carrying the same tables with other rows.
    prepare(make_topic, kafka_bootstrap, "xitanchor", 700)
    result = run_connector(*connector_args(kafka_bootstrap, "itanchor", tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    storage = LocalStorage(str(tmp_path / "lz"))
    assert_mirror_equals(storage, workload)
    assert not [e.path for e in storage.list_dir("") if "xitanchor" in e.path]
