"""The ``foreachBatch`` function: one micro-batch → the sink → metrics and one log line.

Two writers, one per ``spark.decode_on``, chosen where the job is built. ``DriverBatchWriter`` brings each batch to
the driver as Arrow columns and collects, plans and publishes it there. ``ExecutorBatchWriter`` has the executors
collect and stage batch N+1 while the driver still renames and commits batch N on a thread of its own
(``PublishBehind``): the files are staged durably and the plan of N is in the ledger before ``foreachBatch``
returns, so a crash in between is finished from that plan at the next start. Batch N+1 is planned only once N is
committed (its file numbers follow N's); what N+1 was collected with (the collect context) is checked again then,
and a batch collected with a context that no longer holds (a table stopped while N was published, a rebuild moved
on) is collected again.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from connector.collect.kafka_read import ReadGap
from connector.collect.kafka_spec import KafkaReadSpec
from connector.collect.pieces import CollectContext, Collected
from connector.healing.data_loss import TopicIds
from connector.healing.data_loss_healing import heal_in_batch, lost_in_batch
from connector.kafka.ranges import RangeSplit, batch_ranges
from connector.kafka.spark_checkpoint import SparkCheckpoint
from connector.landing_zone.layout import table_for_topic
from connector.operate import metrics
from connector.operate.health import HealthState
from connector.publish.batch_plan import BatchInput
from connector.publish.batch_result import BatchResult
from connector.publish.source_offsets import kafka_offsets
from connector.sink import MirrorSink, SinkBatch
from connector.spark.slices import TASKS_PER_CORE, SliceTask, collect_ranges, collect_slices
from connector.storage.location import StorageLocation
from connector.stream.batch_retry import retry_transient

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class PublishBehind:
    """Publishes and commits one planned batch at a time on a thread of its own; ``wait`` joins it."""

    def __init__(self, done: Callable[[BatchResult, float, float], None], failed: Callable[[int], None]) -> None:
        self._done = done
        self._failed = failed
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="publish-behind")
        self._future: Future[None] | None = None

    def submit(self, planned: SinkBatch, started: float, collected: float) -> None:
        """Publish ``planned`` (left with ``finish_later``) behind the caller, after the batch before it."""
        self.wait()
        self._future = self._pool.submit(self._finish, planned, started, collected)

    def _finish(self, planned: SinkBatch, started: float, collected: float) -> None:
        try:
            with planned:
                result = planned.finish()
        except BaseException:
            # Raised again by the next ``wait`` (the next batch, or the stop); readiness says so meanwhile.
            self._failed(planned.batch_id)
            raise
        self._done(result, started, collected)

    def wait(self) -> None:
        """Return once the batch published behind is committed; raise what failed it (once)."""
        future, self._future = self._future, None
        if future is not None:
            future.result()

    def close(self) -> None:
        """Wait for the batch published behind (raising what failed it), then release the thread."""
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)


class BatchWriter(ABC):
    """The ``foreachBatch`` function: one micro-batch → the sink → metrics and one log line."""

    def __init__(
        self,
        sink: MirrorSink,
        health: HealthState,
        spark_checkpoint: SparkCheckpoint,
        *,
        stop: threading.Event | None = None,
    ) -> None:
        self.sink = sink
        self.health = health
        self.spark_checkpoint = spark_checkpoint
        self.stop = stop  # a graceful stop ends the wait between retries of a transiently failed batch
        source = sink.source
        # Each batch asks its topics' ids once: a topic created again is a gap whatever its offsets say.
        self._topic_ids = TopicIds(source) if source.kind == "kafka" and source.bootstrap_servers else None

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        """Publish micro-batch ``batch_id``; raising fails the query (Spark then retries it on restart)."""
        try:
            retry_transient(lambda: self._write(frame, batch_id), f"batch {batch_id}", stop=self.stop)
        except Exception:
            metrics.BATCHES.labels("failed").inc()
            metrics.PUBLISH_ERRORS.labels("").inc()
            self.health.set(False, f"batch {batch_id} failed")
            raise

    def close(self) -> None:  # noqa: B027 - only a writer that works behind the query has something to wait for
        """Wait for what the writer still does behind the query; call once the query has stopped."""

    @abstractmethod
    def _write(self, frame: DataFrame, batch_id: int) -> None:
        """Collect, plan and publish micro-batch ``batch_id`` (its report once committed)."""

    def _begin(self, batch_id: int, topic_ids: Mapping[str, str]) -> SinkBatch:
        """Begin a batch with Spark's offsets for it (a replay of a published batch is recognised, else refused).

        Spark logged the batch's offsets before calling us: a batch id counts as published only when the ledger
        recorded the same offsets for it (never skip unknown records). ``topic_ids`` are recorded with them.
        """
        offsets = self.spark_checkpoint.offsets(batch_id)
        return self.sink.begin(batch_id, offsets, str(self.spark_checkpoint.folder), topic_ids)

    def _topic_ids_of(self, batch_id: int) -> dict[str, str]:
        """The ids of the topics batch ``batch_id`` reads (one describe per batch, on the driver); none for files."""
        offsets = self.spark_checkpoint.offsets(batch_id)
        ends = kafka_offsets(offsets) if offsets is not None and self._topic_ids is not None else None
        return self._topic_ids.of_batch(batch_id, list(ends)) if ends and self._topic_ids is not None else {}

    def _heal(self, topic_ids: Mapping[str, str], read: Sequence[ReadGap]) -> None:
        """Gaps the batch found (a topic's id changed, offsets gone), healed before it is planned (in its block).

        ``connector.healing.data_loss_healing.heal_in_batch``: the gaps recorded and exactly their tables' rebuilds
        begun in one ledger commit; the batch's context then changes, and it is collected with the new one.
        """
        lost = lost_in_batch(self.sink.state, topic_ids, read)
        if lost:
            heal_in_batch(self.sink.state, lost, self.sink.mirror, self.sink.commit_tables, topic_ids, now=time.time())

    def _report(self, result: BatchResult, started: float, collected: float) -> None:
        """Metrics, health and the batch's one log line, once it is committed."""
        # Arrow's allocator keeps freed pages for reuse; a batch's worth (hundreds of MB) goes back now.
        pa.default_memory_pool().release_unused()
        metrics.record_batch(result)
        metrics.set_table_states(self.sink)
        self.health.set(True, "running")
        for table, reason in result.stopped.items():
            if result.schema_changes.get(table, ("", ""))[1] != "rebuild":  # a rebuild's decision is logged already
                log.error("table %s stopped: %s", table, reason)
        now = time.monotonic()
        log.info("%s", result.event_line(collect_s=collected - started, duration_s=now - started))


class DriverBatchWriter(BatchWriter):
    """``decode_on: driver``: the batch comes to the driver as Arrow columns and is collected and published there."""

    def __init__(
        self,
        sink: MirrorSink,
        health: HealthState,
        spark_checkpoint: SparkCheckpoint,
        *,
        columnar: bool = True,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__(sink, health, spark_checkpoint, stop=stop)
        self.columnar = columnar

    def _write(self, frame: DataFrame, batch_id: int) -> None:
        started = collected = time.monotonic()
        topic_ids = self._topic_ids_of(batch_id)
        with self._begin(batch_id, topic_ids) as batch:
            given = BatchInput()
            if not batch.published:
                self._heal(topic_ids, ())
                given = BatchInput(table=frame.toArrow(), columnar=self.columnar)
                collected = time.monotonic()
            batch.plan(given)
        self._report(batch.result, started, collected)


@dataclass(frozen=True)
class ExecutorCollect:
    """How the executors collect and stage a batch.

    ``landing_location`` is where they stage (absolute, with the identity each task writes as); ``kafka_read``,
    when set, has them read the batch's Kafka ranges themselves (``source.reader: direct``, split into tasks by
    ``split``), else they take Spark's source rows from the batch's frame.
    """

    landing_location: StorageLocation
    columnar: bool = True
    kafka_read: KafkaReadSpec | None = None
    split: RangeSplit = RangeSplit()


class ExecutorBatchWriter(BatchWriter):
    """``decode_on: executors``: the executors collect and stage each batch, the driver plans it.

    The driver then publishes and commits it behind the next batch's collecting (``PublishBehind``).
    """

    def __init__(
        self,
        sink: MirrorSink,
        health: HealthState,
        spark_checkpoint: SparkCheckpoint,
        collect: ExecutorCollect,
        *,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__(sink, health, spark_checkpoint, stop=stop)
        self.collect = collect
        self._behind = PublishBehind(self._report, self._publish_failed)

    def close(self) -> None:
        """Wait for the batch being published behind; call once the query has stopped."""
        self._behind.close()

    def _write(self, frame: DataFrame, batch_id: int) -> None:
        """Collect on the executors (behind the previous batch's publish), plan, and publish behind the next one."""
        started = time.monotonic()
        topic_ids = self._topic_ids_of(batch_id)
        context = self.sink.collect_context()
        slices, gaps = self._collect(frame, batch_id, context)
        collected = time.monotonic()
        self._behind.wait()
        with self._begin(batch_id, topic_ids) as batch:
            if not batch.published:
                self._heal(topic_ids, gaps)
                while batch.context != context:
                    # The previous batch's publish stopped a table, a rebuild moved on, or a gap just began one:
                    # what the slices were collected with no longer holds. Their files go, the batch is collected
                    # again (a gap it finds again is recorded already; a new one changes the context once more).
                    log.info(
                        "batch %d: the tables' state changed while it was collected; collecting it again", batch_id
                    )
                    self.sink.discard(slices)
                    context = batch.context
                    slices, gaps = self._collect(frame, batch_id, context)
                    self._heal(topic_ids, gaps)
                    collected = time.monotonic()
            batch.plan(BatchInput(slices))
            batch.finish_later()
        self._behind.submit(batch, started, collected)

    def _collect(
        self, frame: DataFrame, batch_id: int, context: CollectContext
    ) -> tuple[list[Collected], list[ReadGap]]:
        """The batch's slices, and the gaps its tasks read past (the direct reader, ``on_data_lost: rebuild``)."""
        task = SliceTask(batch_id, context, self.collect.landing_location, columnar=self.collect.columnar)
        if self.collect.kafka_read is None:
            return collect_slices(frame, task), []
        ranges = batch_ranges(self.spark_checkpoint, batch_id)
        spark = frame.sparkSession
        # A keyless table awaiting its blocking snapshot skips what came before that snapshot's first read (and was
        # streamed before it was asked for): only a task that reads its partition from the batch's start can tell
        # where that read is. Looked up only while such a table exists: most batches have none.
        mirror, awaiting = self.sink.mirror, context.awaiting_snapshot
        whole = {r.topic for r in ranges if table_for_topic(r.topic, mirror).id in awaiting} if awaiting else set()
        tasks = TASKS_PER_CORE * max(1, spark.sparkContext.defaultParallelism)
        groups = self.collect.split.groups(ranges, tasks, whole=whole)
        past_gaps = mirror.on_data_lost == "rebuild"  # else a gap fails the batch: Spark's exit 2
        return collect_ranges(spark, groups, task, self.collect.kafka_read, past_gaps=past_gaps)

    def _publish_failed(self, batch_id: int) -> None:
        self.health.set(False, f"batch {batch_id} failed while it was published")
