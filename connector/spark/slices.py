"""The executor half of ``foreachBatch``: each Spark partition of a micro-batch is collected and staged where it is.

Spark's Kafka source makes one partition per Kafka partition (per offset range), so decoding, marking and
encoding run in Spark's Python workers, in parallel over the executors' cores, and each task writes its
pieces as staged files into the landing zone itself (``connector.collect.staging``). Only their metadata
(paths, rows, sizes, hashes, column types, stops, dead letters) travels to the driver, which numbers, renames
and commits (``SinkBatch.plan``): the driver's memory and CPU do not grow with the batch's bytes.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

from connector.collect.kafka_read import ReadGap, read_ranges, read_ranges_past_gaps
from connector.collect.kafka_spec import KafkaRange, KafkaReadSpec
from connector.collect.pieces import CollectContext, Collected
from connector.collect.slice import collect_slice
from connector.collect.staging import stage_slice
from connector.spark.python_worker import prepare_worker
from connector.storage import Storage
from connector.storage.location import StorageLocation

if TYPE_CHECKING:
    from pyspark import TaskContext
    from pyspark.sql import DataFrame, SparkSession

#: Tasks per executor core a micro-batch of many small partitions is joined into (``frame_in_tasks``).
TASKS_PER_CORE = 4
_SLICE_COLUMN = "slice"
_SLICE_SCHEMA = pa.schema([pa.field(_SLICE_COLUMN, pa.binary())])


@dataclass(frozen=True)
class SliceTask:
    """What every task of one micro-batch needs: pickled into Spark's Python workers with the function."""

    batch_id: int
    context: CollectContext
    landing: StorageLocation  # absolute (a worker's working directory is not the driver's), with its identity
    columnar: bool = True


def collect_slices(frame: DataFrame, task: SliceTask) -> list[Collected]:
    """Collect and stage every Spark partition of ``frame`` on the executors; their metadata comes back."""
    table = frame_in_tasks(frame).mapInArrow(partial(collect_partition, task), f"{_SLICE_COLUMN} binary").toArrow()
    # Pickle only ever crosses between this job's own Python processes (worker → driver).
    return [pickle.loads(data) for data in table.column(_SLICE_COLUMN).to_pylist()]  # noqa: S301


def collect_ranges(
    spark: SparkSession, groups: list[list[KafkaRange]], task: SliceTask, read: KafkaReadSpec, *, past_gaps: bool
) -> tuple[list[Collected], list[ReadGap]]:
    """Read, collect and stage each group of Kafka ranges in one task (``connector.collect.kafka_read``).

    With ``past_gaps`` the tasks read on past offsets Kafka no longer holds and the gaps come back with the
    slices (the driver heals them); without, such a gap fails the batch (``KAFKA_DATA_LOSS``).
    """
    if not groups:
        return [], []
    tasks = spark.sparkContext.parallelize(groups, len(groups))
    done = tasks.map(partial(collect_ranges_task, task, read, past_gaps)).collect()
    return [collected for collected, _ in done], [gap for _, gaps in done for gap in gaps]


def collect_ranges_task(
    task: SliceTask, read: KafkaReadSpec, past_gaps: bool, ranges: list[KafkaRange]
) -> tuple[Collected, tuple[ReadGap, ...]]:
    """One task of ``collect_ranges``: its ranges' records → staged files → their metadata, and the gaps read past."""
    spark_task = _prepared_task()
    if past_gaps:
        records, gaps = read_ranges_past_gaps(read, ranges)
    else:
        records, gaps = read_ranges(read, ranges), ()
    return _collect_and_stage(task, records, spark_task), gaps


def frame_in_tasks(frame: DataFrame) -> DataFrame:
    """``frame`` in at most ``TASKS_PER_CORE`` tasks per core when its partitions are more (many small topics).

    Spark's Kafka source makes a task per topic-partition: a thousand tables with two partitions each are two
    thousand tasks, most of a few records, whose start-up (a Python worker round trip, a consumer lookup) costs
    more than their work. Coalescing joins whole partitions without a shuffle; a slice holding several
    partitions is collected exactly as the driver collects a whole batch (each table's rows in Kafka order).
    """
    target = TASKS_PER_CORE * max(1, frame.sparkSession.sparkContext.defaultParallelism)
    if frame.rdd.getNumPartitions() <= target:
        return frame
    return frame.coalesce(target)


def collect_partition(task: SliceTask, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: one partition's records → staged files and one pickled ``Collected`` of metadata."""
    spark_task = _prepared_task()  # None when tests and ``convert`` call this directly
    arrow_batches = list(batches)
    if not arrow_batches:
        return
    staged = _collect_and_stage(task, pa.Table.from_batches(arrow_batches), spark_task)
    data = pickle.dumps(staged, protocol=pickle.HIGHEST_PROTOCOL)
    yield pa.RecordBatch.from_arrays([pa.array([data], type=pa.binary())], schema=_SLICE_SCHEMA)


def _collect_and_stage(task: SliceTask, records: pa.Table, spark_task: TaskContext | None) -> Collected:
    collected = collect_slice(task.context, records, columnar=task.columnar)
    staged = stage_slice(_landing(task.landing), task.batch_id, collected, task.context)
    # A later attempt (after a failed or lost one, whose staged files stay behind).
    staged.retried = spark_task is not None and spark_task.attemptNumber() > 0
    return staged


def _prepared_task() -> TaskContext | None:
    """The Spark task this runs in, its Python worker prepared; ``None`` outside Spark."""
    spark_task = _task_context()
    if spark_task is not None:
        prepare_worker()
    return spark_task


def _task_context() -> TaskContext | None:
    """The Spark task this runs in, if any."""
    from pyspark import TaskContext

    return TaskContext.get()


_opened: dict[StorageLocation, Storage] = {}


def _landing(location: StorageLocation) -> Storage:
    """The landing zone, opened once per Python worker (Spark reuses workers across tasks and batches)."""
    storage = _opened.get(location)
    if storage is None:
        storage = _opened[location] = location.open()
    return storage
