"""Prometheus instruments (declared once, low-cardinality labels) and the functions that record into them.

The HTTP endpoint serving them is ``metrics_server``; what /readyz reports is ``health.HealthState``.

Labels are tables, ops, skip kinds and Kafka topic-partitions: bounded by the source database's
schema, never by data.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from connector import __version__
from connector.fabric.status import FabricDatabaseStatus, FabricTableStatus
from connector.operate.debezium_status import DebeziumConnectorStatus
from connector.operate.status_history import BatchSample
from connector.operate.status_model import StatusBoard
from connector.publish.batch_result import BatchResult

log = logging.getLogger(__name__)

#: What the status page shows (``/`` and ``/status.json``), filled by the functions below as the service runs.
BOARD = StatusBoard()

REGISTRY = CollectorRegistry(auto_describe=True)

EVENTS = Counter(
    "cdc_mirror_events", "Change events decoded, by table and Debezium op.", ["table", "op"], registry=REGISTRY
)
ROWS = Counter("cdc_mirror_rows_published", "Rows published to the landing zone.", ["table"], registry=REGISTRY)
ROWS_MARKER_FREE = Counter(
    "cdc_mirror_rows_published_marker_free",
    "Rows published in files without __rowMarker__ (initial loads: Fabric's fast path); part of rows_published.",
    ["table"],
    registry=REGISTRY,
)
FILES = Counter("cdc_mirror_files_published", "Data files published to the landing zone.", ["table"], registry=REGISTRY)
BYTES = Counter("cdc_mirror_bytes_published", "Bytes of data files published.", ["table"], registry=REGISTRY)
BATCH_DURATION = Histogram(
    "cdc_mirror_batch_duration_seconds",
    "Wall time of one micro-batch in the sink.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
    registry=REGISTRY,
)
BATCHES = Counter("cdc_mirror_batches", "Micro-batches by outcome (committed, failed).", ["outcome"], registry=REGISTRY)
LAST_COMMIT = Gauge(
    "cdc_mirror_last_batch_committed_timestamp_seconds", "Unix time of the last committed batch.", registry=REGISTRY
)
BATCH_LAG = Gauge(
    "cdc_mirror_batch_lag_seconds", "Now minus the newest source ts_ms in the last batch.", registry=REGISTRY
)
OFFSETS_BEHIND = Gauge(
    "cdc_mirror_kafka_offsets_behind",
    "Kafka offsets not yet processed, per topic-partition.",
    ["topic", "partition"],
    registry=REGISTRY,
)
SKIPPED = Counter(
    "cdc_mirror_records_skipped", "Records that carry no row change, by kind.", ["kind"], registry=REGISTRY
)
TABLE_STOPPED = Gauge("cdc_mirror_table_stopped", "1 when a table is stopped.", ["table"], registry=REGISTRY)
TABLES_STOPPED = Gauge("cdc_mirror_tables_stopped", "Number of stopped tables.", registry=REGISTRY)
TABLE_REBUILDING = Gauge(
    "cdc_mirror_table_rebuilding",
    "1 while a table's rebuild waits (folder deleted, Fabric not done with it yet), else 0.",
    ["table"],
    registry=REGISTRY,
)
PUBLISH_ERRORS = Counter(
    "cdc_mirror_publish_errors",
    "Failed publish attempts (batches that raised), by table when known.",
    ["table"],
    registry=REGISTRY,
)
DEAD_LETTERS = Counter(
    "cdc_mirror_dead_letters",
    "Poison records sent to the dead-letter output (poison_policy dead-letter), by table.",
    ["table"],
    registry=REGISTRY,
)
SCHEMA_CHANGES = Counter(
    "cdc_mirror_schema_changes",
    "Schema changes seen in a table's events, by kind (column_added, column_removed, type_changed, key_changed) "
    "and the action mirror.schema_changes took (refresh, union, rebuild, keep, stop).",
    ["table", "kind", "action"],
    registry=REGISTRY,
)
DATA_LOST = Counter(
    "cdc_mirror_data_lost",
    "Gaps in a table's Kafka partitions recorded at start (records aged out, deleted or their topic re-created "
    "before the connector read them); each begins the table's rebuild (mirror.on_data_lost: rebuild).",
    ["table"],
    registry=REGISTRY,
)
TABLE_RESETS = Counter(
    "cdc_mirror_table_resets",
    "Rebuilds begun because the source reset a table, by reason: truncate (mirror.truncate_policy: rebuild), "
    "new_snapshot (Debezium snapshotted it again after its initial load: a slot or offsets lost), snapshot_restart "
    "(Debezium restarted its snapshot during the table's initial load), keyless_change (an update or delete of a "
    "table without a key, mirror.keyless_changes: rebuild).",
    ["table", "reason"],
    registry=REGISTRY,
)
READY = Gauge("cdc_mirror_ready", "1 while /readyz answers 200 (see HealthState).", registry=REGISTRY)
KAFKA_REACHABLE = Gauge(
    "cdc_mirror_kafka_reachable",
    "1 while the driver's periodic metadata request reaches a Kafka broker (metrics.broker_check_s).",
    registry=REGISTRY,
)
FABRIC_TABLE_STATE = Gauge(
    "cdc_mirror_fabric_table_state",
    "1 for the state Fabric's mirroring reports for the table (fabric_status); one series per table.",
    ["table", "state"],
    registry=REGISTRY,
)
FABRIC_TABLE_FAILED = Gauge(
    "cdc_mirror_fabric_table_failed",
    "1 while Fabric reports the table Failed (or Error).",
    ["table"],
    registry=REGISTRY,
)
FABRIC_PROCESSED_ROWS = Gauge(
    "cdc_mirror_fabric_processed_rows", "Rows Fabric reports it has applied to the table.", ["table"], registry=REGISTRY
)
# Registered with the first read (record_fabric_status): without a Fabric status source there is no series,
# rather than a 0 that would read as "unreadable".
FABRIC_STATUS_READABLE = Gauge(
    "cdc_mirror_fabric_status_readable", "1 when the last read of Fabric's status succeeded, else 0.", registry=None
)
# Also registered with the first read: a 0 before any read would fire CdcMirrorFabricDatabaseDown.
FABRIC_DATABASE_UP = Gauge(
    "cdc_mirror_fabric_database_up",
    "1 while Fabric reports the mirrored database Running without error (getMirroringStatus), else 0.",
    registry=None,
)
DEBEZIUM_UP = Gauge(
    "cdc_mirror_debezium_up",
    "1 while Kafka Connect reports the Debezium connector and each of its tasks RUNNING, else 0 (FAILED, PAUSED, "
    "UNASSIGNED, no task, not registered); source.debezium_connect_url.",
    ["connector"],
    registry=REGISTRY,
)
DEBEZIUM_FAILED = Gauge(
    "cdc_mirror_debezium_failed",
    "The connector's instance and tasks Kafka Connect reports FAILED; they stay so until restarted.",
    ["connector"],
    registry=REGISTRY,
)
# Registered with the first read, as the Fabric status is: no Connect URL, no series.
DEBEZIUM_STATUS_READABLE = Gauge(
    "cdc_mirror_debezium_status_readable",
    "1 when the last read of the Debezium connectors' status from Kafka Connect succeeded, else 0.",
    registry=None,
)
SOURCE_LOSSY_SETTINGS = Gauge(
    "cdc_mirror_source_lossy_settings",
    "Debezium connector settings found at start that lose data silently (source.debezium_connect_url; "
    "0 when none or not checked).",
    registry=REGISTRY,
)
AUDIT_ROWS_CHECKED = Counter(
    "cdc_mirror_audit_rows_checked",
    "Rows the continuous audit (mirror.audit) read, source and Fabric's tables together.",
    registry=REGISTRY,
)
AUDIT_DIFFERENCES = Counter(
    "cdc_mirror_audit_differences",
    "Differences the audit confirmed (a key whose mirror row is missing, extra or different once the mirror caught "
    "up; a column set; a file lost before Fabric took it); each is repaired.",
    ["table"],
    registry=REGISTRY,
)
AUDIT_LAST_CLEAN = Gauge(
    "cdc_mirror_audit_last_clean_timestamp_seconds",
    "When the audit last found the table equal to the source (Unix time); no series before the first clean audit.",
    ["table"],
    registry=REGISTRY,
)
BUILD_INFO = Gauge("cdc_mirror_build_info", "Connector version.", ["version"], registry=REGISTRY)
BUILD_INFO.labels(__version__).set(1)
# Series that exist from the start read as 0 rather than "no data" in dashboards and alerts.
for _outcome in ("committed", "failed"):
    BATCHES.labels(_outcome)
for _kind in (
    "tombstone",
    "tombstone_unwritable",
    "heartbeat",
    "transaction",
    "schema_change",
    "message",
    "malformed",
    "table_stopped",
    "truncate",
    "before_snapshot",
):
    SKIPPED.labels(_kind)


def record_batch(result: BatchResult, now: float | None = None) -> None:
    """Count one committed batch."""
    now = time.time() if now is None else now
    for table, entry in result.tables.items():
        PUBLISH_ERRORS.labels(table)
        for op, count in entry.events.items():
            EVENTS.labels(table, op).inc(count)
        if entry.rows:
            ROWS.labels(table).inc(entry.rows)
        if entry.marker_free_rows:
            ROWS_MARKER_FREE.labels(table).inc(entry.marker_free_rows)
        if entry.files:
            FILES.labels(table).inc(entry.files)
            BYTES.labels(table).inc(entry.bytes)
    for kind, count in result.skipped.by_kind.items():
        SKIPPED.labels(kind).inc(count)
    for table, count in result.dead_letters.items():
        DEAD_LETTERS.labels(table).inc(count)
    for table, (kind, action) in result.schema_changes.items():
        SCHEMA_CHANGES.labels(table, kind, action).inc()
    for table, reason in result.resets.items():
        TABLE_RESETS.labels(table, reason).inc()
    BATCH_DURATION.observe(result.duration_s)
    BATCHES.labels("committed").inc()
    LAST_COMMIT.set(now)
    lag = None if result.max_source_ts_ms is None else max(0.0, now - result.max_source_ts_ms / 1000)
    if lag is not None:
        BATCH_LAG.set(lag)
    BOARD.history.add_batch(BatchSample(now, result.records, result.duration_s, result.files, lag))


class TableStates(Protocol):
    """What the table gauges read of the sink."""

    @property
    def table_ids(self) -> Iterable[str]:
        """Every table the ledger knows."""

    @property
    def stopped_tables(self) -> Mapping[str, str]:
        """Stopped tables, with the reason."""

    @property
    def rebuilding_tables(self) -> Mapping[str, str]:
        """Tables being rebuilt, with the phase."""


def set_table_states(sink: TableStates) -> None:
    """Publish every table's stopped and rebuilding flags (a rebuilt table goes back to 0 on both)."""
    stopped, rebuilding = sink.stopped_tables, sink.rebuilding_tables
    for table in sink.table_ids:
        TABLE_STOPPED.labels(table).set(1 if table in stopped else 0)
        TABLE_REBUILDING.labels(table).set(1 if table in rebuilding else 0)
        DATA_LOST.labels(table)  # 0 until a gap is recorded: the series exists, so its increase() is exact
    TABLES_STOPPED.set(len(stopped))


def record_offsets_behind(behind: Iterable[tuple[str, int, int]]) -> None:
    """Set offsets-behind per (topic, partition, offsets)."""
    total = 0
    for topic, partition, count in behind:
        OFFSETS_BEHIND.labels(topic, str(partition)).set(count)
        total += count
    BOARD.history.add_offsets_behind(total)


_fabric_lock = threading.Lock()
_fabric_states: dict[str, str] = {}
_registered_on_first_read: set[Gauge] = set()
_registration_lock = threading.Lock()


def _set_readable(gauge: Gauge, readable: bool) -> None:
    """Set a ``*_status_readable`` gauge, registering it first: without a status source there is no series."""
    with _registration_lock:
        if gauge not in _registered_on_first_read:
            REGISTRY.register(gauge)
            _registered_on_first_read.add(gauge)
    gauge.set(1 if readable else 0)


def record_fabric_status(tables: Mapping[str, FabricTableStatus] | None) -> None:
    """Publish one read of Fabric's status (``connector.fabric.status``); ``None`` when it was unreadable.

    A table's old state series is removed when its state changes, and all its series when Fabric no longer
    lists it. An unreadable status only sets ``cdc_mirror_fabric_status_readable`` to 0: the tables keep
    their last known values, so a failed table stays visible (and alerting) while the API is down.
    """
    BOARD.fabric_tables(tables)
    with _fabric_lock:
        _set_readable(FABRIC_STATUS_READABLE, tables is not None)
        if tables is None:
            return
        for table in set(_fabric_states) - set(tables):
            FABRIC_TABLE_STATE.remove(table, _fabric_states.pop(table))
            FABRIC_TABLE_FAILED.remove(table)
            FABRIC_PROCESSED_ROWS.remove(table)
        for table, status in tables.items():
            previous = _fabric_states.get(table)
            if previous is not None and previous != status.state:
                FABRIC_TABLE_STATE.remove(table, previous)
            _fabric_states[table] = status.state
            FABRIC_TABLE_STATE.labels(table, status.state).set(1)
            FABRIC_TABLE_FAILED.labels(table).set(1 if status.failed else 0)
            if status.processed_rows is None:
                FABRIC_PROCESSED_ROWS.remove(table)
            else:
                FABRIC_PROCESSED_ROWS.labels(table).set(status.processed_rows)


_database_registered = False


def record_fabric_database(status: FabricDatabaseStatus | None) -> None:
    """Publish one read of the database's status; an unreadable one keeps the last value (as the tables do)."""
    global _database_registered
    BOARD.fabric_database(status)
    if status is None:
        return
    with _fabric_lock:
        if not _database_registered:
            REGISTRY.register(FABRIC_DATABASE_UP)
            _database_registered = True
        FABRIC_DATABASE_UP.set(1 if status.up else 0)


_debezium_lock = threading.Lock()
_debezium_connectors: set[str] = set()


def record_debezium_status(statuses: Mapping[str, DebeziumConnectorStatus] | None) -> None:
    """Publish one read of the connectors' status; ``None`` when Kafka Connect could not be read.

    An unreadable status only sets ``cdc_mirror_debezium_status_readable`` to 0: a FAILED task stays visible
    (and alerting) while Connect does not answer. A connector no longer listed loses its series.
    """
    BOARD.debezium(statuses)
    with _debezium_lock:
        _set_readable(DEBEZIUM_STATUS_READABLE, statuses is not None)
        if statuses is None:
            return
        for gone in _debezium_connectors - statuses.keys():
            DEBEZIUM_UP.remove(gone)
            DEBEZIUM_FAILED.remove(gone)
        _debezium_connectors.clear()
        _debezium_connectors.update(statuses)
        for name, status in statuses.items():
            DEBEZIUM_UP.labels(name).set(1 if status.up else 0)
            DEBEZIUM_FAILED.labels(name).set(status.failed)


# Here, not in ``metrics_server``: the preflight names a taken port without importing the server.
def metrics_port_problem(port: int, exc: OSError) -> str:
    """One line for a metrics port that cannot be bound, naming the port and the settings that choose it."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"metrics.port {port} is already in use by another process; choose another "
            "(--metrics-port, CONNECTOR_METRICS__PORT) or 0 to turn the endpoint off"
        )
    return f"metrics.port {port} cannot be listened on: {exc.strerror or type(exc).__name__}"
