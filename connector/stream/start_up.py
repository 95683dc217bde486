"""``run``'s start-up, before Spark's query starts.

The preflight, the writer's fence, the ledger's agreement with Spark's checkpoint and the source, and data-loss
healing. ``StartedJob`` holds what the query then needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from connector.config import ConnectorSettings
from connector.debezium.decoder import open_decoder
from connector.debezium.types import type_policy
from connector.debezium_control.debezium_settings import check_debezium_settings
from connector.debezium_control.debezium_status_poller import DebeziumStatusPoller
from connector.debezium_control.snapshot_signal import KafkaSnapshotSignal
from connector.healing.data_loss_healing import heal_data_loss, kafka_check
from connector.healing.resume import resume_from_ledger, starting_offsets
from connector.kafka.spark_checkpoint import SparkCheckpoint
from connector.mirror_writer import MirrorWriter, open_mirror_writer
from connector.operate import metrics, metrics_server
from connector.operate.health import HealthState
from connector.operate.job_status import JobStatusRecorder
from connector.publish.ledger import BatchLedger
from connector.publish.source_identity import check_topic_prefix, check_topics
from connector.spark.source import with_consumer_cache
from connector.storage import Storage
from connector.stream.empty_tables import find_empty_tables
from connector.stream.fabric_status_poller import FabricStatusPoller
from connector.stream.preflight import check_before_spark
from connector.stream.shutdown import GracefulStop

if TYPE_CHECKING:
    pass


log = logging.getLogger(__name__)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartedJob:
    """What start-up hands the query: the settings Spark starts with, health, the writer, Spark's checkpoint."""

    settings: ConnectorSettings
    health: HealthState
    fabric_status: FabricStatusPoller | None
    debezium_status: DebeziumStatusPoller | None
    writer: MirrorWriter
    spark_checkpoint: SparkCheckpoint


def start_up(
    settings: ConnectorSettings, graceful: GracefulStop, status: JobStatusRecorder, *, resume_from_ledger_offsets: bool
) -> StartedJob | None:
    """Every check and recovery before Spark starts; ``None`` when a stop was requested meanwhile."""
    checked = check_before_spark(settings)  # the landing zone opened once: one client (one token on OneLake)
    landing, topics = checked.landing, checked.topics
    if topics:
        settings = with_consumer_cache(settings, sum(topics.values()))
    spark_checkpoint = SparkCheckpoint(Path(settings.checkpoint) / "spark")
    if not resume_from_ledger_offsets:
        # A checkpoint another source wrote (the file source's, another broker's or database's topics), or one
        # whose topics the pattern no longer matches, fails inside Spark, or as a misleading data-loss error:
        # refused first, read-only, before the landing zone. A resume moves that folder aside instead.
        spark_checkpoint.verify_source(settings.source)
    if topics is not None:
        _check_topic_prefix(settings, topics, landing)
    if graceful.requested.is_set():
        return None
    check_debezium_settings(settings)
    health = HealthState(stall_after_s=settings.metrics.stall_after_s)
    if settings.metrics.port:
        server = metrics_server.serve(settings.metrics.port, health, page=settings.metrics.status_page)
        page = " / /status.json" if settings.metrics.status_page else ""
        log.info("metrics on port %d (/metrics /healthz /readyz%s)", server.server_port, page)
    # An incomplete fabric_status section, wrong ids or a stopped database fail here; later reads never stop it.
    fabric_status = FabricStatusPoller.open(settings, health)
    # A missing schema registry URL fails here, before Spark starts.
    open_decoder(settings.source, type_policy(settings.mirror))
    # One writer per checkpoint and landing zone, held until exit: taken before the ledger is read or the
    # start-up clean-up runs, so a second instance is refused before it can delete our uploads.
    writer = open_mirror_writer(
        settings,
        landing=landing,
        until_exit=True,
        on_fenced=status.arm,
        snapshot_signal=KafkaSnapshotSignal(settings.source, settings.mirror.rebuild)
        if settings.source.kind == "kafka"
        else None,
        # A rebuild waits until Fabric no longer lists the table: read fresh when it asks.
        fabric_tables=fabric_status.poll_once if fabric_status is not None else None,
    )
    settings = _agree_with_ledger(settings, writer, spark_checkpoint, topics, resume=resume_from_ledger_offsets)
    writer.sink.queue_empty_tables(find_empty_tables(settings, writer.sink.state, topics))
    metrics.set_table_states(writer.sink)
    metrics.BOARD.describe(settings)  # the status page: the job without secrets, then the sink's tables
    metrics.BOARD.attach_tables(writer.sink)
    if graceful.requested.is_set():
        return None
    log.info(
        "starting source=%s topics=%s landing_zone=%s checkpoint=%s trigger=%s kafka_options=%s recovered_batches=%d",
        settings.source.kind,
        settings.source.topics,
        writer.landing_location,
        settings.checkpoint,
        settings.trigger,
        settings.source.redacted_kafka_options(),
        writer.sink.completed_at_start,
    )
    debezium_status = DebeziumStatusPoller.open(settings)
    return StartedJob(settings, health, fabric_status, debezium_status, writer, spark_checkpoint)


def _check_topic_prefix(settings: ConnectorSettings, topics: Collection[str], landing: Storage) -> None:
    """A landing zone mirrors one Debezium source: refuse topics of another prefix, or two for one table folder.

    Read-only, before the fence: the landing zone is listed and the ledger read, not locked.
    """
    prefix = check_topics(topics, settings.mirror, settings.landing_zone.location.url)
    check_topic_prefix(
        prefix,
        landing,
        BatchLedger(settings.checkpoint_location.open()).state,
        where_ledger=settings.checkpoint,
        topics=settings.source.topics,
    )


def _agree_with_ledger(
    settings: ConnectorSettings,
    writer: MirrorWriter,
    spark_checkpoint: SparkCheckpoint,
    topics: Collection[str] | None,
    *,
    resume: bool,
) -> ConnectorSettings:
    """Bring Spark's checkpoint and the ledger to agree before Spark starts; the settings Spark starts with.

    Spark's checkpoint and the ledger are separate folders: a deleted or older Spark checkpoint would make Spark
    reuse batch ids the ledger calls published (silent loss), so they must agree first.
    """
    sink = writer.sink
    if topics is not None:
        # Checked against the landing zone and the ledger (after the sink's recovery, which commits older plans'
        # states); recorded with the first batch's commit.
        sink.admit_source(topics)
    if resume:
        resume_from_ledger(writer.ledger, spark_checkpoint, writer.landing)
    if topics is not None:
        # Before the checkpoints are compared: a crash while Spark's was being moved aside is finished here.
        _heal_data_loss(settings, writer, spark_checkpoint, topics)
    spark_checkpoint.verify_ledger(sink.state)
    sink.advance_rebuilds()  # a rebuild requested while the connector was down starts before the first batch
    if sink.state.resume_offsets is None:
        return settings
    start = starting_offsets(sink.state.resume_offsets, settings.source)
    log.info("a new Spark checkpoint starts from the ledger's end offsets: %s", start)
    return settings.model_copy(update={"source": settings.source.model_copy(update={"starting_offsets": start})})


def _heal_data_loss(
    settings: ConnectorSettings, writer: MirrorWriter, spark_checkpoint: SparkCheckpoint, topics: Collection[str]
) -> None:
    """Find records Kafka no longer holds before Spark trips over them, and heal them (``mirror.on_data_lost``).

    The tables they carry are marked for rebuild (committed), then Spark's checkpoint moves past them
    (``connector.healing.data_loss_healing``). Partitions a new checkpoint has not read yet are expected from offset
    0 only when Spark would read them so (its own checkpoint); a resume starts them at their first record.
    """
    heal_data_loss(
        writer.ledger,
        spark_checkpoint,
        writer.landing,
        settings.mirror,
        kafka_check(settings.source),
        subscribed=topics if writer.ledger.state.resume_offsets is None else (),
        now=time.time(),
    )
