"""The continuous audit on the driver (``mirror.audit``): a thread that runs a round every ``interval_s``.

Each round compares the audited tables with Fabric's Delta tables (``connector.audit.compare``) and repairs what
differs through the running stream: delete rows go out with the sink's next batch (``MirrorSink.queue_deletes``),
re-reads through Debezium's signal channel (``connector.audit.signal``), rebuilds as requests the sink takes
(``connector.publish.rebuild.request_rebuild``). The lag gate waits until the sink has committed every record the
table's topic held once Debezium had the source position, then until Fabric took the files published by then.

A table whose rebuild or refresh is requested or under way (``MirrorSink.healing``) is left out at its turn and as
soon as it is requested during its comparison, and judged again once it runs steadily. A round that overran its
interval is followed by a full interval's pause (``pause_after``), never at once by the next: the rebuild it asked
for is taken by the sink between batches, and the stream gets its CPU back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import orjson

from connector.audit.compare import AuditRound, TableAudit, left_out
from connector.audit.finding import AuditTarget
from connector.audit.signal import KeyedSnapshotSignal
from connector.audit.sources import audit_reader
from connector.config import ConnectorSettings
from connector.config.audit import AuditSettings
from connector.errors import ConfigError
from connector.publish.key_deletes import table_ref
from connector.publish.ledger_state import LedgerState, TableState
from connector.publish.rebuild import request_rebuild
from connector.readback.chunk_compare import Key
from connector.readback.database_mysql import is_mysql_url
from connector.readback.mirror_compare import AuditSource, Settle, fabric_settle
from connector.readback.mirrored_tables import MirroredTables, tables_url
from connector.secrets import resolve_secret_references
from connector.sink import MirrorSink
from connector.storage.location import StorageLocation

log = logging.getLogger(__name__)

POLL_S = 1.0
STOP_WAIT_S = 5.0
"""How long a stop waits for a round under way: it may be waiting up to ``settle_s`` for the mirror, and it only
reads (its repairs went to the sink, which has stopped): the daemon thread is left to end with the process."""


def mirrored_tables(audit: AuditSettings, landing: StorageLocation) -> MirroredTables:
    """Fabric's tables the audit reads: ``tables_path``, else the mirrored database's beside the landing zone.

    Raises:
        ConfigError: neither is known (a local landing zone without ``mirror.audit.tables_path``).
    """
    if audit.tables_path:
        return MirroredTables(audit.tables_path, landing.identity)
    try:
        return MirroredTables(tables_url(landing), landing.identity)
    except ConfigError:
        msg = f"mirror.audit needs tables_path: {landing.url} is no mirrored database's landing zone"
        raise ConfigError(msg) from None


def source_url(audit: AuditSettings) -> str:
    """The source database's URL, its secret reference resolved (never logged).

    Raises:
        ConfigError: ``mirror.audit.source_url`` is not set, or its reference cannot be resolved.
    """
    if audit.source_url is None:
        msg = "mirror.audit.enabled needs mirror.audit.source_url (${env:NAME} or ${file:/path})"
        raise ConfigError(msg)
    return resolve_secret_references(audit.source_url.get_secret_value(), "mirror.audit.source_url")


def audit_targets(state: LedgerState, wanted: Sequence[str]) -> list[AuditTarget]:
    """The tables of a round: those asked for (all when none), running, with keys, no snapshot re-reading them.

    Chosen once at the round's start: each table is asked again at its turn (``AuditRound``'s ``withdrawn``).
    """
    targets = []
    for tid, table in sorted(state.tables.items()):
        if wanted and tid not in wanted:
            continue
        if not table.lifecycle.steady:
            continue
        if not table.key_columns or table.topic is None or table.schema is None:
            continue
        targets.append(AuditTarget(table_ref(tid, table.folder), table.key_columns))
    return targets


class SinkRepairs:
    """The audit's repairs through the running stream (``readback.audit.Repairs``)."""

    def __init__(self, sink: MirrorSink, signal: KeyedSnapshotSignal) -> None:
        self._sink = sink
        self._signal = signal

    def delete(self, table_id: str, keys: Sequence[Key]) -> None:
        """Delete rows with the sink's next batch."""
        self._sink.queue_deletes(table_id, keys)
        log.warning("audit repair: table %s: %d delete rows go out with the next batch", table_id, len(keys))

    def reread(self, table_id: str, keys: Sequence[Key]) -> None:
        """Debezium reads the keys again."""
        table = self._table(table_id)
        assert table.topic is not None  # noqa: S101 - audit_targets takes only tables whose topic is known
        ids = self._signal.reread(table.topic, table.key_columns, keys)
        log.warning(
            "audit repair: table %s: asked Debezium to read %d keys again (signals %s)", table_id, len(keys), ids
        )

    def rebuild(self, table_id: str, reason: str) -> None:
        """A rebuild request, carried out by the sink like ``rebuild``'s."""
        request = request_rebuild(self._sink.ledger.storage, table_id)
        log.warning("audit repair: table %s: rebuild requested (%s; request %s)", table_id, reason, request.id)

    def _table(self, table_id: str) -> TableState:
        return self._sink.state.tables[table_id]


class AuditLoop:
    """Runs an audit round every ``interval_s`` on a daemon thread until ``stop``."""

    def __init__(self, settings: ConnectorSettings, sink: MirrorSink, landing: StorageLocation) -> None:
        self._audit = settings.mirror.audit
        self._sink = sink
        self._url = source_url(self._audit)
        self._tables = mirrored_tables(self._audit, landing)
        signal = KeyedSnapshotSignal(settings.source, settings.mirror.rebuild, mysql=is_mysql_url(self._url))
        self._repairs = SinkRepairs(sink, signal)
        self._settings = settings
        self._source = settings.source
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mirror-audit", daemon=True)

    def start(self) -> AuditLoop:
        """Run in a daemon thread."""
        log.info(
            "audit: every %.0f s against %s, at most %.0f rows/s",
            self._audit.interval_s,
            self._tables.url,
            self._audit.max_rows_per_s,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the loop (at shutdown) without waiting long for a round under way (``STOP_WAIT_S``)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT_S)

    def round(self) -> None:
        """One round over the audited tables (a failure is logged; the next round tries again)."""
        state = self._sink.state
        targets = audit_targets(state, self._audit.tables)
        self._name_left_out(state, {t.id for t in targets})
        if not targets:
            return
        try:
            topics = [topic for t in targets if (topic := state.tables[t.id].topic)]
            with audit_reader(self._url, self._settings, topics) as reader:
                audit = TableAudit(
                    self._audit,
                    reader,
                    self._tables,
                    self._sink.landing,
                    self._settle_for,
                    withdrawn=self._sink.healing,
                )
                rounds = AuditRound(
                    self._audit,
                    audit.audit,
                    self._repairs,
                    stop=self._stopped,
                    checkpoint=self._sink.ledger.storage,
                    withdrawn=self._sink.healing,
                )
                rounds.run(targets)
        except Exception as exc:  # noqa: BLE001 - the next round tries again; the stream goes on
            log.error("audit: the round failed (%s); tried again in %.0f s", exc, self._audit.interval_s)

    def _loop(self) -> None:
        while not self._stopped.is_set():
            started = time.monotonic()
            self.round()
            self._stopped.wait(pause_after(time.monotonic() - started, self._audit.interval_s))

    def _name_left_out(self, state: LedgerState, chosen: set[str]) -> None:
        """Name the audited tables this round leaves out while they are rebuilt or refreshed (stopped ones aside).

        So the log says, each round, why a table has no audit for a while.
        """
        for tid, table in sorted(state.tables.items()):
            if tid in chosen or (self._audit.tables and tid not in self._audit.tables):
                continue
            if not table.lifecycle.stopped:
                left_out(tid, self._sink.healing(tid))

    def _settle_for(self, reader: AuditSource, target: AuditTarget) -> Settle:
        return fabric_settle(
            reader,
            self._sink.landing,
            target.ref,
            timeout_s=self._audit.settle_s,
            published_through=lambda: self._published_through(target.id),
        )

    def _published_through(self, table_id: str) -> int:
        """The table's last file once the sink committed what its topic held now (or the wait ran out)."""
        topic = self._sink.state.tables[table_id].topic
        ends = topic_ends(self._source, topic) if topic else {}
        deadline = time.monotonic() + self._audit.settle_s
        while ends and not _committed_past(self._sink.state, topic or "", ends):
            if time.monotonic() >= deadline or self._stopped.is_set() or self._sink.healing(table_id) is not None:
                break  # a table withdrawn meanwhile is left out right after this wait
            time.sleep(POLL_S)
        return self._sink.state.tables[table_id].next_number - 1


def pause_after(elapsed_s: float, interval_s: float) -> float:
    """Seconds from a round's end to the next round's start: the rest of ``interval_s``, or all of it after an overrun.

    A round back to back with the last would keep the audit reading nonstop, and would come to a table whose rebuild
    the last one asked for before the sink took the request between batches.
    """
    return interval_s - elapsed_s if elapsed_s < interval_s else interval_s


def topic_ends(source: Any, topic: str) -> dict[int, int]:
    """Each partition's end offset (high watermark) of ``topic`` now."""
    from confluent_kafka import Consumer, TopicPartition

    from connector.kafka_client import client_config

    consumer = Consumer(client_config(source, **{"group.id": "cdc-mirror-audit"}))
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = metadata.topics[topic].partitions if topic in metadata.topics else {}
        ends = {}
        for partition in partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            ends[partition] = int(high)
        return ends
    finally:
        consumer.close()


def _committed_past(state: LedgerState, topic: str, ends: dict[int, int]) -> bool:
    """Whether the last committed batch read ``topic`` up to ``ends`` (Spark's end offsets in the ledger)."""
    if not state.sources:
        return False
    read: dict[int, int] = {}
    for line in state.sources[-1].offsets:
        try:
            parsed = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(parsed, dict) and isinstance(parsed.get(topic), dict):
            read.update({int(p): int(o) for p, o in parsed[topic].items()})
    return all(read.get(partition, 0) >= end for partition, end in ends.items() if end > 0)
