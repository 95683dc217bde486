"""``run``: the streaming service. Spark moves records; the core publishes them in ``foreachBatch``.

The start-up before the query is ``start_up``; the session, ``spark_session``; reading the query's progress,
``progress``. Each micro-batch (bounded by ``maxOffsetsPerTrigger``) is collected to the driver as Arrow
(``spark.decode_on: driver``, the default) or collected in slices on the executors (``executors``,
``connector.spark.slices``). Either way the columnar lane (``connector.collect.lane``) takes the
topics it can decode in bulk and the record-by-record path the rest; the driver joins the pieces,
numbers, encodes, publishes and commits. Spark's checkpoint lives in ``<checkpoint>/spark``, the
connector's ledger in ``<checkpoint>/ledger``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connector.audit.loop import AuditLoop
from connector.config import ConnectorSettings, spark_interval
from connector.errors import ConnectorError
from connector.healing.query_failure import report_query_failure
from connector.kafka.ranges import RangeSplit
from connector.operate import metrics
from connector.operate.health import HealthState
from connector.operate.job_status import JobStatusRecorder
from connector.sink import MirrorSink
from connector.spark.source import kafka_read_spec, stream
from connector.spark.spark_log import write_to_debug_log
from connector.spark.spark_session import QUERY_STOP_TIMEOUT_S, spark_session
from connector.spark.worker_warmup import warm_up
from connector.stream.batch_writer import BatchWriter, DriverBatchWriter, ExecutorBatchWriter, ExecutorCollect
from connector.stream.broker_check import BrokerCheck
from connector.stream.progress import new_progress, offsets_behind, records_per_second
from connector.stream.rebuild_ticker import RebuildTicker
from connector.stream.shutdown import GracefulStop
from connector.stream.start_up import StartedJob, start_up

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


log = logging.getLogger(__name__)


def run(settings: ConnectorSettings, *, resume_from_ledger_offsets: bool = False) -> int:
    """Run the service until stopped (or, with ``available-now``, until caught up).

    ``resume_from_ledger_offsets`` (``--resume-from-ledger``) moves Spark's checkpoint aside and starts a new
    one from the ledger's last end offsets (``connector.healing.resume``).
    """
    # SIGTERM/SIGINT from the first instant on is a stop request, never a kill (exit 143): start-up looks at it
    # between its steps and ends with exit 0 before anything is published; the handlers go back on any error.
    graceful = GracefulStop()
    restore_signals = graceful.install()
    status = JobStatusRecorder()
    if graceful.requested.is_set():  # a signal during the imports or the settings (``connector.early_stop``)
        status.stopped(f"stop requested ({graceful.signal_name}) during start-up")
        return _stopped_before_query(graceful)
    try:
        started = start_up(settings, graceful, status, resume_from_ledger_offsets=resume_from_ledger_offsets)
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


def _start_watchers(started: StartedJob) -> list[Callable[[], None]]:
    """Start the threads that watch what the query cannot see (brokers, Fabric, Debezium); their stops."""
    settings = started.settings
    stops: list[Callable[[], None]] = []
    if settings.source.kind == "kafka" and settings.metrics.broker_check_s:
        stops.append(BrokerCheck(settings.source, started.health, settings.metrics.broker_check_s).start().stop)
    if started.fabric_status is not None:
        stops.append(started.fabric_status.start().stop)
    if started.debezium_status is not None:
        stops.append(started.debezium_status.start().stop)
    return stops


def _run_query(started: StartedJob, graceful: GracefulStop, status: JobStatusRecorder) -> int:
    """Run Spark's query until it ends or a stop is requested; the exit code."""
    settings, health, sink = started.settings, started.health, started.writer.sink
    audit = AuditLoop(settings, sink, started.writer.landing_location) if settings.mirror.audit.enabled else None
    spark = spark_session(settings)
    # Again after the session: PySpark's SparkContext installs a SIGINT handler of its own that calls into the JVM.
    restore_signals = graceful.install()
    if graceful.requested.is_set():
        spark.stop()
        return _stopped_before_query(graceful)
    batch_writer = _batch_writer(started, graceful)
    warm_up(spark, settings)  # beside the source's loading and the query's start, for its first batch
    query = _start_query(spark, settings, graceful.gate(batch_writer, on_refuse=_quiet_query_errors))
    status.running()
    health.set(True, "running")
    stop_watchers = _start_watchers(started)
    rebuilds = RebuildTicker(sink, settings.mirror.rebuild.check_interval_s).start()
    if audit is not None:
        audit.start()
    try:
        try:
            _watch(query, graceful, health, settings.mirror.on_data_lost)
        finally:
            # The last batch may still be published behind: it is committed before anything stops or reports.
            batch_writer.close()
    finally:
        if audit is not None:
            audit.stop()
        rebuilds.stop()
        restore_signals()
        for stop in stop_watchers:
            stop()
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


def _stopped_before_query(graceful: GracefulStop) -> int:
    """A stop requested during start-up: nothing was published (the ledger completed any interrupted batch)."""
    graceful.restore()
    log.info("stopped on %s during start-up: the query never started, nothing was published", graceful.signal_name)
    return 0


def _watch(query: StreamingQuery, graceful: GracefulStop, health: HealthState, on_data_lost: str) -> None:
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
        progress = new_progress(query, last_batch)
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


def _query_failure(text: str, on_data_lost: str) -> ConnectorError:
    """The one error a failed query is reported as; its full text goes to Spark's debug log first.

    Without a debug log (the operator's own Spark log configuration) the full text is logged here instead, for
    a person to read when the cause is not one ``connector.healing.query_failure`` knows.
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
