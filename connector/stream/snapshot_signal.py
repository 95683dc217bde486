"""Asks Debezium for an incremental snapshot of one table through its Kafka signal channel.

Debezium reads signals from ``signal.kafka.topic`` (its default is ``<topic.prefix>-signal``); a signal's
key is the connector's ``topic.prefix`` and its value
``{"type": "execute-snapshot", "data": {"data-collections": ["<collection>"], "type": "incremental"}}``.
The data collection is the table topic without its prefix: ``schema.table`` (PostgreSQL), ``db.table``
(MySQL, MariaDB), ``db.schema.table`` (SQL Server). The connector needs ``kafka`` in
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
from connector.kafka_client import client_security_options
from connector.operate.rebuild import RebuildError
from connector.publish.ledger import TableState

log = logging.getLogger(__name__)

DELIVERY_TIMEOUT_S = 30.0


def signal_target(topic: str, rebuild: RebuildSettings) -> tuple[str, str, str]:
    """(signal topic, signal key = Debezium's topic prefix, data collection) for a table's topic."""
    prefix = rebuild.topic_prefix or topic.split(".", 1)[0]
    if not topic.startswith(f"{prefix}.") or len(topic) == len(prefix) + 1:
        msg = f"topic {topic} does not start with Debezium's topic prefix {prefix!r} (mirror.rebuild.topic_prefix)"
        raise RebuildError(msg)
    return rebuild.signal_topic or f"{prefix}-signal", prefix, topic[len(prefix) + 1 :]


def signal_value(collection: str) -> bytes:
    """The ``execute-snapshot`` signal for exactly one data collection.

    Debezium reads ``data-collections`` as regular expressions: the name is escaped, so a ``.`` matches only
    itself and a MySQL ``$`` in a table name is no end anchor (which would match nothing: no snapshot at all).
    """
    pattern = re.escape(collection)
    return orjson.dumps({"type": "execute-snapshot", "data": {"data-collections": [pattern], "type": "incremental"}})


class KafkaSnapshotSignal:
    """Produces ``execute-snapshot`` signals to the source brokers (the source's security settings apply)."""

    def __init__(self, source: SourceSettings, rebuild: RebuildSettings) -> None:
        if not source.bootstrap_servers:
            msg = "a rebuild signals Debezium through Kafka: source.bootstrap_servers is not set"
            raise RebuildError(msg)
        options, _skipped = client_security_options(source)
        self._config: dict[str, Any] = {
            **options,
            "bootstrap.servers": source.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000),
        }
        self._rebuild = rebuild

    def __call__(self, table_id: str, table: TableState) -> str:
        """Send the signal for ``table`` and wait for the broker's acknowledgement; returns an id for logs."""
        from confluent_kafka import KafkaError, KafkaException, Producer

        assert table.topic is not None  # noqa: S101 - TableRebuilder checks it first
        signal_topic, key, collection = signal_target(table.topic, self._rebuild)
        failures: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _message: object) -> None:
            if err is not None:
                failures.append(err)

        try:
            producer = Producer(self._config)
            producer.produce(signal_topic, key=key.encode(), value=signal_value(collection), on_delivery=on_delivery)
            undelivered = producer.flush(DELIVERY_TIMEOUT_S)
        except KafkaException as exc:
            msg = f"signal topic {signal_topic}: {exc.args[0]}"
            raise RebuildError(msg) from None
        if failures or undelivered:
            why = failures[0].str() if failures else f"not acknowledged within {DELIVERY_TIMEOUT_S:.0f} s"
            msg = f"signal topic {signal_topic} ({self._config['bootstrap.servers']}): {why}"
            raise RebuildError(msg)
        signal_id = f"{signal_topic}:{uuid.uuid4().hex[:12]}"
        log.warning("table %s: asked Debezium (%s) for an incremental snapshot of %s", table_id, key, collection)
        return signal_id
