"""Slices: a batch collected as one slice per Kafka partition (as Spark's executors do) and joined on the driver.

The driver-only path collects a whole batch in one slice; the executor path collects each partition
apart and the sink joins the pieces. Both must publish a mirror equal to the source.
"""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from connector.collect.record_path import SliceCollector
from connector.collect.staging import stage_slice
from connector.config import MirrorSettings
from connector.events import ROW_MARKER_COLUMN, KafkaRecord
from connector.publish.batch_plan import BatchInput
from connector.readback.replay import replay_landing_zone
from connector.readback.validate import validate_landing_zone
from connector.sink import MirrorSink
from connector.spark.slices import SliceTask, collect_partition
from connector.storage.local import LocalStorage
from connector.storage.location import StorageLocation
from tests.support.debezium import PLACEHOLDER, Topic, field
from tests.support.model import Workload, replayed_rows


def sink_at(root: Path, **mirror: Any) -> MirrorSink:
    return MirrorSink(LocalStorage(root / "lz"), LocalStorage(root / "cp"), MirrorSettings(**mirror))


def by_partition(records: list[KafkaRecord]) -> list[list[KafkaRecord]]:
    """The records of each (topic, partition), in offset order: what one Spark task of the Kafka source reads."""
    ordered = sorted(records, key=lambda r: (r.topic, r.partition, r.offset))
    return [list(group) for _, group in itertools.groupby(ordered, key=lambda r: (r.topic, r.partition))]


def publish_in_slices(sink: MirrorSink, batch_id: int, records: list[KafkaRecord]) -> None:
    """What ``decode_on: executors`` does: each partition collected and staged apart, its metadata pickled across."""
    context = sink.collect_context()
    staged = [
        stage_slice(sink.landing, batch_id, SliceCollector(context).collect(part), context)
        for part in by_partition(records)
    ]
    with sink.begin(batch_id) as batch:
        batch.plan(BatchInput([pickle.loads(pickle.dumps(s)) for s in staged])).finish()


def test_partition_slices_publish_the_same_mirror_as_one_slice(tmp_path: Path) -> None:
    workload = Workload("slices", partitions=3, seed=11)
    batches = [workload.records(400) for _ in range(5)]
    whole, sliced = sink_at(tmp_path / "whole", max_rows_per_file=150), sink_at(tmp_path / "sliced")
    for batch_id, records in enumerate(batches):
        whole.process_batch(batch_id, records)
        publish_in_slices(sliced, batch_id, records)
    for root in ("whole", "sliced"):
        storage = LocalStorage(tmp_path / root / "lz")
        assert [str(p) for p in validate_landing_zone(storage)] == []
        assert replayed_rows(replay_landing_zone(storage)) == workload.expected()


def test_a_column_only_one_partition_has_is_joined_and_the_marker_stays_last(tmp_path: Path) -> None:
    narrow = Topic("db.public.items", [field("id", "int32", optional=False), field("name", "string")], ["id"])
    wide = Topic(
        "db.public.items",
        [field("id", "int32", optional=False), field("name", "string"), field("colour", "string")],
        ["id"],
    )
    records = [
        narrow.record("c", None, {"id": 1, "name": "a"})._replace(partition=0, offset=0),
        wide.record("c", None, {"id": 2, "name": "b", "colour": "red"})._replace(partition=1, offset=0),
        narrow.record("u", {"id": 1, "name": "a"}, {"id": 1, "name": "a2"})._replace(partition=0, offset=1),
    ]
    sink = sink_at(tmp_path)
    publish_in_slices(sink, 0, records)
    storage = LocalStorage(tmp_path / "lz")
    assert [str(p) for p in validate_landing_zone(storage)] == []
    (table,) = replay_landing_zone(storage).values()
    assert sorted(table.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a2", "colour": None},
        {"id": 2, "name": "b", "colour": "red"},
    ]
    files = [p for p in (tmp_path / "lz").rglob("*.parquet") if not p.name.startswith("_")]
    assert files
    for path in files:
        assert pq.read_schema(path).names[-1] == ROW_MARKER_COLUMN


def test_keep_last_tables_are_deferred_to_the_driver_with_its_store(tmp_path: Path) -> None:
    topic = Topic("db.public.docs", [field("id", "int32", optional=False), field("body", "string")], ["id"])
    first = [topic.record("c", None, {"id": i, "body": f"text {i}"})._replace(partition=i % 2) for i in range(4)]
    second = [topic.record("u", None, {"id": i, "body": PLACEHOLDER})._replace(partition=i % 2) for i in range(4)]
    sink = sink_at(tmp_path, toast_policy="keep-last")
    context = sink.collect_context()
    collected = SliceCollector(context).collect(first)
    assert collected.deferred == first and not collected.pieces  # only the driver holds the store
    publish_in_slices(sink, 0, first)
    publish_in_slices(sink, 1, second)
    (table,) = replay_landing_zone(LocalStorage(tmp_path / "lz")).values()
    assert sorted(table.to_pylist(), key=lambda r: r["id"]) == [{"id": i, "body": f"text {i}"} for i in range(4)]


def test_a_spark_partition_becomes_one_pickled_slice(tmp_path: Path) -> None:
    workload = Workload("task", partitions=1, seed=5)
    records = workload.records(50)
    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": [r.topic for r in records],
            "partition": [r.partition for r in records],
            "offset": [r.offset for r in records],
            "key": pa.array([r.key for r in records], pa.binary()),
            "value": pa.array([r.value for r in records], pa.binary()),
            "headers": pa.array([list(r.headers) for r in records], headers),
        }
    )
    sink = sink_at(tmp_path)
    task = SliceTask(0, sink.collect_context(), StorageLocation(sink.landing.url))
    (out,) = list(collect_partition(task, iter([batch])))
    collected = pickle.loads(out.column(0)[0].as_py())
    assert collected.records == len(records)
    assert collected.retried is False  # outside a retried Spark task
    assert sum(p.rows for p in collected.pieces.values()) >= len([r for r in records if r.value])
    # Only metadata comes back: the rows are in the files the task staged in the landing zone.
    assert all(p.table is None and p.files for p in collected.pieces.values())
    staged = {f.path for p in collected.pieces.values() for f in p.files}
    assert staged == {str(p.relative_to(tmp_path / "lz")) for p in (tmp_path / "lz").rglob("_staged_*")}
    with sink.begin(0) as batch:
        batch.plan(BatchInput([collected])).finish()
    assert replayed_rows(replay_landing_zone(LocalStorage(tmp_path / "lz"))) == workload.expected()
    assert not list((tmp_path / "lz").rglob("_staged_*"))
    assert list(collect_partition(task, iter([]))) == []


def test_what_a_failed_task_attempt_staged_goes_once_its_batch_commits(tmp_path: Path) -> None:
    """A task attempt that died after staging left files no plan names; its retry's slice says it was a retry.

    Once the batch commits, the driver removes that batch's staged files from the retried slice's folders, and
    leaves the next batch's (it may be staging already) and every numbered file alone.
    """
    workload = Workload("retried", partitions=2, seed=3)
    sink = sink_at(tmp_path)
    publish_in_slices(sink, 0, workload.records(200))
    context = sink.collect_context()
    records = workload.records(200)
    parts = by_partition(records)
    failed = stage_slice(sink.landing, 1, SliceCollector(context).collect(parts[0]), context)  # died after this
    retry = stage_slice(sink.landing, 1, SliceCollector(context).collect(parts[0]), context)
    retry.retried = True
    others = [stage_slice(sink.landing, 1, SliceCollector(context).collect(part), context) for part in parts[1:]]
    orphans = [f.path for piece in failed.pieces.values() for f in piece.files]
    folder = next(iter(failed.pieces.values())).ref.folder
    next_batch = f"{folder}/_staged_2_early_0_abcd.parquet"
    sink.landing.create(next_batch, b"staged by batch 2 already")
    assert orphans and all(sink.landing.exists(path) for path in orphans)

    with sink.begin(1) as batch:
        batch.plan(BatchInput([pickle.loads(pickle.dumps(s)) for s in [retry, *others]])).finish()

    assert not any(sink.landing.exists(path) for path in orphans)
    assert sink.landing.exists(next_batch)
    sink.landing.delete(next_batch)
    assert [str(p) for p in validate_landing_zone(sink.landing)] == []
    assert replayed_rows(replay_landing_zone(sink.landing)) == workload.expected()
