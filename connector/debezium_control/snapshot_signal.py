"""Asks Debezium for an incremental snapshot of one table through its Kafka signal channel.

Debezium reads signals from ``signal.kafka.topic`` (its default is ``<topic.prefix>-signal``); a signal's
key is the connector's ``topic.prefix`` and its value
``{"id": "<id>", "type": "execute-snapshot", "data": {"data-collections": ["<collection>"], "type": "incremental"}}``;
Debezium's notifications of that snapshot carry the same ``id``
(``connector.debezium_control.snapshot_notifications``), and ``stop-snapshot`` (same ``data``) stops it for that
collection.
The data collection is the table topic without its prefix: ``schema.table`` (PostgreSQL), ``db.table``
(MySQL, MariaDB), ``db.schema.table`` (SQL Server). A table without a key gets a ``blocking`` snapshot instead:
an incremental one reads in chunks by primary key and skips a table without one, while a blocking one pauses
streaming and reads the table whole, as the initial snapshot did. The connector needs ``kafka`` in
``signal.enabled.channels`` and, for PostgreSQL and the others that watermark through it, a signalling
table (``signal.data.collection``): README, "Rebuilding a table".
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

import orjson

from connector.config import RebuildSettings, SourceSettings
from connector.debezium_control.snapshot_notifications import NotificationReader
from connector.kafka_client import client_config
from connector.publish.ledger_state import TableState
from connector.publish.lifecycle import SnapshotNotice
from connector.publish.rebuild import RebuildError

log = logging.getLogger(__name__)

DELIVERY_TIMEOUT_S = 30.0


def signal_target(topic: str, rebuild: RebuildSettings) -> tuple[str, str, str]:
    """(signal topic, signal key = Debezium's topic prefix, data collection) for a table's topic."""
    prefix = rebuild.topic_prefix or topic.split(".", 1)[0]
    if not topic.startswith(f"{prefix}.") or len(topic) == len(prefix) + 1:
        msg = f"topic {topic} does not start with Debezium's topic prefix {prefix!r} (mirror.rebuild.topic_prefix)"
        raise RebuildError(msg)
    return rebuild.signal_topic or f"{prefix}-signal", prefix, topic[len(prefix) + 1 :]


def signal_value(
    collection: str, signal_id: str | None = None, kind: str = "execute-snapshot", snapshot: str = "incremental"
) -> bytes:
    """The ``execute-snapshot`` (or ``stop-snapshot``) signal for exactly one data collection.

    Debezium reads ``data-collections`` as regular expressions: the name is escaped, so a ``.`` matches only
    itself and a MySQL ``$`` in a table name is no end anchor (which would match nothing: no snapshot at all).
    """
    pattern = re.escape(collection)
    body: dict[str, Any] = {"type": kind, "data": {"data-collections": [pattern], "type": snapshot}}
    if signal_id is not None:
        body = {"id": signal_id, **body}
    return orjson.dumps(body)


def signal_producer_config(source: SourceSettings, who: str) -> dict[str, Any]:
    """Librdkafka settings of a producer of Debezium signals: the source's brokers and security, acknowledged."""
    if not source.bootstrap_servers:
        msg = f"{who} signals Debezium through Kafka: source.bootstrap_servers is not set"
        raise RebuildError(msg)
    return client_config(
        source, **{"acks": "all", "enable.idempotence": True, "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000)}
    )


class KafkaSnapshotSignal:
    """Produces ``execute-snapshot`` signals to the source brokers (the source's security settings apply)."""

    def __init__(self, source: SourceSettings, rebuild: RebuildSettings) -> None:
        self._config = signal_producer_config(source, "a rebuild")
        self._rebuild = rebuild
        self._source = source
        self._reader: NotificationReader | None = None
        self._checked = False

    def __call__(self, table_id: str, table: TableState) -> str:
        """Send the signal for ``table`` and wait for the broker's acknowledgement; returns the signal's id."""
        signal_id = uuid.uuid4().hex
        snapshot = "blocking" if table.keyless else "incremental"
        collection = self._send(table, "execute-snapshot", signal_id, snapshot)
        log.warning(
            "table %s: asked Debezium (%s) for a%s %s snapshot of %s (signal %s)",
            table_id,
            self._rebuild.topic_prefix or _topic(table).split(".", 1)[0],
            "n" if snapshot == "incremental" else "",
            snapshot,
            collection,
            signal_id,
        )
        return signal_id

    def stop(self, table_id: str, table: TableState) -> None:
        """Ask Debezium to stop its incremental snapshot of ``table`` (a new one is asked for after it)."""
        collection = self._send(table, "stop-snapshot", uuid.uuid4().hex)
        log.warning("table %s: asked Debezium to stop its incremental snapshot of %s", table_id, collection)

    def collection(self, table: TableState) -> str:
        """The table's data collection, as Debezium names it in its notifications."""
        return signal_target(_topic(table), self._rebuild)[2]

    def notices(self, table: TableState, since: float | None) -> list[SnapshotNotice] | None:
        """Debezium's incremental snapshot notifications not read yet; ``None`` when there is no channel to read.

        The first call opens the channel (``since``: the oldest awaited request) and says once when there is none.
        """
        if self._reader is None and not self._checked:
            self._checked = True
            self._reader = self._open(table)
        return self._reader.read(since) if self._reader is not None else None

    def close(self) -> None:
        """Close the notification reader."""
        if self._reader is not None:
            self._reader.close()

    def _open(self, table: TableState) -> NotificationReader | None:
        from confluent_kafka import KafkaException

        prefix = signal_target(_topic(table), self._rebuild)[1]
        explicit = self._rebuild.notification_topic
        reader = NotificationReader(self._source, explicit or f"{prefix}-notifications")
        try:
            present = reader.exists()
        except KafkaException as exc:
            present = False
            log.warning("notification topic %s not readable: %s", reader.topic, exc)
        if not present and not explicit:
            log.warning(
                "no Debezium notification topic %s (mirror.rebuild.notification_topic): a rebuild or refresh ends "
                "when its incremental snapshot is asked for, not when Debezium completed it",
                reader.topic,
            )
            return None
        if self._source.value_format != "json":
            log.warning(
                "Debezium's notifications (%s) are read as JSON only (value_format %s): a rebuild or refresh ends "
                "when its incremental snapshot is asked for",
                reader.topic,
                self._source.value_format,
            )
            return None
        log.info("rebuilds follow Debezium's incremental snapshots through %s", reader.topic)
        return reader

    def _send(self, table: TableState, kind: str, signal_id: str, snapshot: str = "incremental") -> str:
        from confluent_kafka import KafkaError, KafkaException, Producer

        signal_topic, key, collection = signal_target(_topic(table), self._rebuild)
        failures: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _message: object) -> None:
            if err is not None:
                failures.append(err)

        value = signal_value(collection, signal_id, kind, snapshot)
        try:
            producer = Producer(self._config)
            producer.produce(signal_topic, key=key.encode(), value=value, on_delivery=on_delivery)
            undelivered = producer.flush(DELIVERY_TIMEOUT_S)
        except KafkaException as exc:
            msg = f"signal topic {signal_topic}: {exc.args[0]}"
            raise RebuildError(msg) from None
        if failures or undelivered:
            why = failures[0].str() if failures else f"not acknowledged within {DELIVERY_TIMEOUT_S:.0f} s"
            msg = f"signal topic {signal_topic} ({self._config['bootstrap.servers']}): {why}"
            raise RebuildError(msg)
        return collection


def _topic(table: TableState) -> str:
    if table.topic is None:
        msg = "its Kafka topic is not known yet (no event of it was read); it is learnt from the next event"
        raise RebuildError(msg)
    return table.topic
