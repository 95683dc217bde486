"""``run``: the streaming service. Spark moves records; the core publishes them in ``foreachBatch``.

Each micro-batch (bounded by ``maxOffsetsPerTrigger``) is collected to the driver as Arrow
(``spark.decode_on: driver``, the default) or collected in slices on the executors (``executors``,
``connector.stream.slices``). Either way the columnar lane (``connector.collect.lane``) takes the
topics it can decode in bulk and the record-by-record path the rest; the driver joins the pieces,
numbers, encodes, publishes and commits. Spark's checkpoint lives in ``<checkpoint>/spark``, the
connector's ledger in ``<checkpoint>/ledger``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from connector.config import ConnectorSettings, spark_interval
from connector.debezium.decoder import open_decoder
from connector.debezium.types import type_policy
from connector.errors import ConnectorError
from connector.mirror_writer import MirrorWriter, open_mirror_writer
from connector.operate import metrics
from connector.operate.job_status import JobStatusRecorder
from connector.publish.ledger import BatchLedger
from connector.publish.source_identity import check_topic_prefix, check_topics
from connector.secrets import has_secret_reference, is_secret_setting, resolve_secret_references
from connector.sink import MirrorSink
from connector.storage import Storage
from connector.stream.batch_writer import BatchWriter, DriverBatchWriter, ExecutorBatchWriter, ExecutorCollect
from connector.stream.broker_check import BrokerCheck
from connector.stream.data_loss_healing import heal_data_loss, kafka_check
from connector.stream.debezium_settings import check_debezium_settings
from connector.stream.fabric_status_poller import FabricStatusPoller
from connector.stream.kafka_ranges import RangeSplit
from connector.stream.preflight import check_before_spark
from connector.stream.query_failure import report_query_failure
from connector.stream.rebuild_ticker import RebuildTicker
from connector.stream.resume import resume_from_ledger, starting_offsets
from connector.stream.shutdown import GracefulStop
from connector.stream.snapshot_signal import KafkaSnapshotSignal
from connector.stream.source import jvm_options, kafka_jars, kafka_read_spec, stream, with_consumer_cache
from connector.stream.spark_checkpoint import SparkCheckpoint
from connector.stream.spark_log import route_to_file, write_to_debug_log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


log = logging.getLogger(__name__)

# How long a stop waits for Spark's stream thread; well inside the Helm chart's terminationGracePeriodSeconds.
QUERY_STOP_TIMEOUT_S = 30.0
# How often rebuilds waiting for Fabric (or mirror.rebuild.wait_s) are looked at between batches.
REBUILD_TICK_S = 5.0


def spark_session(settings: ConnectorSettings) -> SparkSession:
    """A Spark session for the job; Kafka connector jars only when reading Kafka."""
    from pyspark.sql import SparkSession

    # The Python workers that collect slices must run this interpreter, which has the connector installed;
    # PySpark reads the variable when the context starts (the spark.pyspark.python setting is spark-submit's).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName("debezium-fabric-mirror")
        .master(settings.spark.master)
        .config("spark.ui.enabled", "false")
        # The console progress bar would be printed into the service's log.
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        # A query waiting on unreachable brokers ignores interrupts for minutes; a stop gives up after this.
        .config("spark.sql.streaming.stopTimeout", str(int(QUERY_STOP_TIMEOUT_S * 1000)))
        # One Arrow batch per partition slice rather than many small ones.
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
        # Off (Spark 4.1+ defaults it on): staging assumes each task holds whole Kafka partition slices in offset
        # order (connector.stream.slices), and AQE may re-plan a micro-batch's partitions behind that assumption.
        .config("spark.sql.adaptive.streaming.stateless.enabled", "false")
    )
    if settings.source.kind == "kafka":
        builder = builder.config("spark.jars", ",".join(kafka_jars()))
    # Secret references, and secret-looking Hadoop settings (which the running session accepts too).
    secret_conf = {
        k: v
        for k, v in settings.spark.conf.items()
        if has_secret_reference(v) or (k.startswith("spark.hadoop.") and is_secret_setting(k, v))
    }
    for key, value in {**jvm_options(settings), **settings.spark.conf}.items():
        if key not in secret_conf:
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _route_spark_log(spark, settings)
    # PySpark hands start-up settings to the JVM as ``--conf k=v`` arguments, readable by anyone in
    # /proc/<pid>/cmdline: secrets are set on the running session instead, resolved only here.
    for key, value in secret_conf.items():
        spark.conf.set(key, resolve_secret_references(value, f"spark.conf.{key}"))
    return spark


def offsets_behind(progress: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(topic, partition, offsets behind) from a Kafka source's progress: latestOffset − endOffset."""
    out = []
    for source in progress.get("sources", []):
        latest = _offsets(source.get("latestOffset"))
        end = _offsets(source.get("endOffset"))
        for topic, partitions in latest.items():
            for partition, offset in partitions.items():
                done = end.get(topic, {}).get(partition, 0)
                out.append((topic, int(partition), max(0, int(offset) - int(done))))
    return out


def records_per_second(progress: dict[str, Any]) -> float:
    """Kafka offsets a batch covered per second of its trigger: Spark's own row count is 0 when the executors read.

    (``source.reader: direct`` leaves Spark's micro-batch frame unread, so ``processedRowsPerSecond`` counts nothing.)
    """
    covered = 0
    for source in progress.get("sources", []):
        start, end = _offsets(source.get("startOffset")), _offsets(source.get("endOffset"))
        for topic, partitions in end.items():
            covered += sum(max(0, int(o) - int(start.get(topic, {}).get(p, 0))) for p, o in partitions.items())
    seconds = (progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000
    return covered / seconds if seconds else 0.0


def _offsets(raw: Any) -> dict[str, dict[str, int]]:
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {}
    return raw if isinstance(raw, dict) and all(isinstance(v, dict) for v in raw.values()) else {}


def run(settings: ConnectorSettings, *, resume_from_ledger_offsets: bool = False) -> int:
    """Run the service until stopped (or, with ``available-now``, until caught up).

    ``resume_from_ledger_offsets`` (``--resume-from-ledger``) moves Spark's checkpoint aside and starts a new
    one from the ledger's last end offsets (``connector.stream.resume``).
    """
    # SIGTERM/SIGINT from the first instant on is a stop request, never a kill (exit 143): start-up looks at it
    # between its steps and ends with exit 0 before anything is published; the handlers go back on any error.
    graceful = GracefulStop()
    restore_signals = graceful.install()
    status = JobStatusRecorder()
    try:
        started = _start_up(settings, graceful, status, resume_from_ledger_offsets=resume_from_ledger_offsets)
    except BaseException as exc:
        restore_signals()
        status.stopped(_why(exc))
        raise
    if started is None:
        status.stopped(f"stop requested ({graceful.signal_name}) during start-up")
        return _stopped_before_query(graceful)
    try:
        code = _run_query(started, graceful, status)
    except BaseException as exc:
        status.stopped(_why(exc))
        raise
    status.stopped(_exit_reason(code, graceful, settings.trigger))
    return code


def _why(exc: BaseException) -> str:
    """A job-level stop's reason as ``tables`` shows it: the ``error:`` line's text."""
    return str(exc) if isinstance(exc, ConnectorError) else f"{type(exc).__name__}: {exc}"


def _exit_reason(code: int, graceful: GracefulStop, trigger: str) -> str:
    """Why a query that ended without an error ended."""
    if code:
        return "tables stopped (see each table's reason)"
    if graceful.requested.is_set():
        return f"stop requested ({graceful.signal_name})"
    return "caught up (trigger available-now)" if trigger == "available-now" else "the query ended"


def _batch_writer(started: StartedJob, graceful: GracefulStop) -> BatchWriter:
    """``foreachBatch``'s function, reading Kafka on the executors themselves unless Spark's source must."""
    settings = started.settings
    kafka_read, why = kafka_read_spec(settings)
    if settings.source.kind == "kafka":
        how = "the executors read each batch's offsets themselves" if kafka_read else "Spark's Kafka source reads"
        log.info("%s (%s)", how, why)
    sink, health, spark_checkpoint = started.writer.sink, started.health, started.spark_checkpoint
    if settings.spark.decode_on == "driver":
        columnar = settings.spark.columnar_decode
        return DriverBatchWriter(sink, health, spark_checkpoint, columnar=columnar, stop=graceful.requested)
    collect = ExecutorCollect(
        started.writer.landing_location,
        settings.spark.columnar_decode,
        kafka_read,
        RangeSplit(settings.source.max_records_per_partition, settings.source.min_partitions),
    )
    return ExecutorBatchWriter(sink, health, spark_checkpoint, collect, stop=graceful.requested)


def _run_query(started: StartedJob, graceful: GracefulStop, status: JobStatusRecorder) -> int:
    """Run Spark's query until it ends or a stop is requested; the exit code."""
    settings, health, fabric_status, sink = started.settings, started.health, started.fabric_status, started.writer.sink
    spark = spark_session(settings)
    # Again after the session: PySpark's SparkContext installs a SIGINT handler of its own that calls into the JVM.
    restore_signals = graceful.install()
    if graceful.requested.is_set():
        spark.stop()
        return _stopped_before_query(graceful)
    batch_writer = _batch_writer(started, graceful)
    query = _start_query(spark, settings, graceful.gate(batch_writer, on_refuse=_quiet_query_errors))
    status.running()
    health.set(True, "running")
    broker_check = None
    if settings.source.kind == "kafka" and settings.metrics.broker_check_s:
        broker_check = BrokerCheck(settings.source, health, settings.metrics.broker_check_s).start()
    if fabric_status is not None:
        fabric_status.start()
    rebuilds = RebuildTicker(sink, REBUILD_TICK_S).start()
    try:
        try:
            _watch(query, graceful, health, settings.mirror.on_data_lost)
        finally:
            # The last batch may still be published behind: it is committed before anything stops or reports.
            batch_writer.close()
    finally:
        rebuilds.stop()
        restore_signals()
        if broker_check is not None:
            broker_check.stop()
        if fabric_status is not None:
            fabric_status.stop()
    health.set(False, "stopped")
    stopped = _report_tables(sink)
    spark.stop()
    return 1 if stopped else 0


def _start_query(
    spark: SparkSession, settings: ConnectorSettings, write_batch: Callable[[Any, int], None]
) -> StreamingQuery:
    """Start the streaming query: the source's micro-batches into ``write_batch`` (``foreachBatch``)."""
    writer = stream(spark, settings).writeStream.foreachBatch(write_batch)
    writer = writer.option("checkpointLocation", str(Path(settings.checkpoint) / "spark"))
    if settings.trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=spark_interval(settings.trigger))
    return writer.start()


def _report_tables(sink: MirrorSink) -> dict[str, str]:
    """Log the tables left stopped or rebuilding when the query ended; the stopped ones (the exit code's reason)."""
    stopped = sink.stopped_tables
    for table, reason in sorted(stopped.items()):
        log.error("table stopped: %s: %s", table, reason)
    for table, phase in sorted(sink.rebuilding_tables.items()):
        log.warning("table rebuilding: %s: %s (it goes on at the next start)", table, phase)
    return stopped


@dataclass(frozen=True)
class StartedJob:
    """What start-up hands the query: the settings Spark starts with, health, the writer, Spark's checkpoint."""

    settings: ConnectorSettings
    health: metrics.HealthState
    fabric_status: FabricStatusPoller | None
    writer: MirrorWriter
    spark_checkpoint: SparkCheckpoint


def _start_up(
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
    health = metrics.HealthState(stall_after_s=settings.metrics.stall_after_s)
    if settings.metrics.port:
        server = metrics.serve(settings.metrics.port, health, page=settings.metrics.status_page)
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
    return StartedJob(settings, health, fabric_status, writer, spark_checkpoint)


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
    (``connector.stream.data_loss_healing``). Partitions a new checkpoint has not read yet are expected from offset
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


def _stopped_before_query(graceful: GracefulStop) -> int:
    """A stop requested during start-up: nothing was published (the ledger completed any interrupted batch)."""
    graceful.restore()
    log.info("stopped on %s during start-up: the query never started, nothing was published", graceful.signal_name)
    return 0


def _watch(query: StreamingQuery, graceful: GracefulStop, health: metrics.HealthState, on_data_lost: str) -> None:
    """Wait for the query, publishing Kafka lag and a progress line while a backlog is caught up.

    A stop request (SIGTERM/SIGINT) is carried out here, on the main thread: wait for the batch in flight,
    then stop the query (see ``connector.stream.shutdown``).
    """
    last_batch = -1
    # The loop waits on the stop request in Python, not in a py4j call: a signal wakes it at once, so the
    # query is usually stopped before Spark starts another batch (which the gate would refuse).
    while True:
        if graceful.requested.wait(timeout=1.0):
            _stop(query, graceful)
            break
        if _terminated(query, graceful, on_data_lost):
            break
        progress = _new_progress(query, last_batch)
        if progress is None:
            continue
        last_batch = progress["batchId"]
        behind = offsets_behind(progress)
        metrics.record_offsets_behind(behind)
        total = sum(count for _, _, count in behind)
        health.offsets_behind(total)
        if total:
            log.info(
                "catching up: %d offsets behind over %d partitions, %.0f records/s",
                total,
                len(behind),
                records_per_second(progress),
            )
    exception = query.exception()
    if exception is not None and not graceful.explains(exception):
        raise _query_failure(str(exception), on_data_lost) from None


def _new_progress(query: StreamingQuery, last_batch: int) -> dict[str, Any] | None:
    """The query's last progress when it is of a batch after ``last_batch``; ``None`` (one py4j call) otherwise.

    Read through the JVM's object: PySpark's ``lastProgress`` converts the whole progress each time (with a thousand
    topics, every partition's offsets three times over), and this loop asks every second, mostly for a batch seen.
    """
    progress = query._jsq.lastProgress()
    if progress is None or progress.batchId() == last_batch:
        return None
    parsed: dict[str, Any] = orjson.loads(progress.json())
    return parsed


def _route_spark_log(spark: SparkSession, settings: ConnectorSettings) -> None:
    """Spark's stack traces and errors to ``<checkpoint>/logs/spark.log``, its one-line warnings to the console.

    A failed query is reported once, as the one ``error:`` line that names that file (``_query_failure``);
    Spark's own reports of it (hundreds of lines of JVM stacks) would bury that line (``connector.stream.spark_log``).
    """
    debug_log = route_to_file(spark, Path(settings.checkpoint) / "logs" / "spark.log")
    if debug_log is not None:
        log.info("Spark's errors and stack traces are logged to %s", debug_log)


def _query_failure(text: str, on_data_lost: str) -> ConnectorError:
    """The one error a failed query is reported as; its full text goes to Spark's debug log first.

    Without a debug log (the operator's own Spark log configuration) the full text is logged here instead, for
    a person to read when the cause is not one ``connector.stream.query_failure`` knows.
    """
    debug_log = write_to_debug_log(text)
    if debug_log is None:
        log.error("the streaming query failed: %s", text)
    return report_query_failure(text, debug_log, on_data_lost)


def _stop(query: StreamingQuery, graceful: GracefulStop) -> None:
    """Carry out a stop request: wait for the batch in flight to commit, then stop the query."""
    graceful.wait_for_batch_in_flight()
    _quiet_query_errors()
    try:
        query.stop()
    except Exception as exc:
        # Only planning is left to cut short (no batch is in flight, none may start): safe to leave.
        log.warning(
            "the query did not stop within spark.sql.streaming.stopTimeout (%.0f s unless spark.conf sets it): %s; "
            "leaving it: no batch is being published",
            QUERY_STOP_TIMEOUT_S,
            str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        )
    log.info("stopped on %s: the last batch is committed", graceful.signal_name)


def _quiet_query_errors() -> None:
    """Silence Spark's "query terminated with error" log once the batch in flight is done.

    From here on it could only report the refusal of a batch that began after the stop request (a stack
    trace that would alarm an operator); a real failure of the batch in flight has already ended the query
    and is reported by ``_watch``.
    """
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is not None:
        log4j = jvm.org.apache.logging.log4j
        query_log = "org.apache.spark.sql.execution.streaming.MicroBatchExecution"
        log4j.core.config.Configurator.setLevel(query_log, log4j.Level.OFF)


def _terminated(query: StreamingQuery, graceful: GracefulStop, on_data_lost: str) -> bool:
    """Whether the query has ended; a failure that is only a refused batch counts as the end."""
    try:
        # Seconds; PySpark passes int(timeout * 1000) ms on, so a fraction is fine whatever its annotation says.
        return bool(query.awaitTermination(0.05))  # type: ignore[arg-type]
    except Exception as exc:
        # PySpark raises the query's own failure here; one caused by our refusing a batch after a stop
        # request is the stop itself, anything else is ``_watch``'s to report.
        if graceful.explains(exc):
            return True
        raise _query_failure(str(exc), on_data_lost) from None
