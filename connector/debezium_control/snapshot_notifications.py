"""Reads Debezium's incremental snapshot notifications on the driver, for the rebuilds that wait on them.

Debezium's sink notification channel (``notification.enabled.channels: sink``) writes each notification to
``notification.sink.topic.name`` in the connector's converter: JSON, with or without the schema envelope::

    {"id": "<the execute-snapshot signal's id>", "aggregate_type": "Incremental Snapshot", "type": "IN_PROGRESS",
     "additional_data": {"connector_name": "...", "data_collections": "public.a,public.b",
                         "current_collection_in_progress": "public.a", "maximum_key": "3000",
                         "last_processed_key": "1200"}, "timestamp": 1695817046353}

Only ``Incremental Snapshot`` notifications are kept (the initial snapshot's are not the rebuild's). The reader
never joins a consumer group: it starts at the end of the topic, or, when a snapshot asked for before this process
started is still awaited, a minute before it was asked for (the notifications sent meanwhile are read again).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import orjson

from connector.config import SourceSettings
from connector.kafka_client import client_config
from connector.publish.lifecycle import SnapshotNotice

log = logging.getLogger(__name__)

INCREMENTAL = "Incremental Snapshot"
#: Read from this long before the oldest awaited request (clocks of Debezium's and this host differ a little).
REWIND_S = 60.0
METADATA_TIMEOUT_S = 10.0
POLL_S = 0.2
BATCH = 500


def decode_notice(value: bytes | None, where: str = "") -> SnapshotNotice | None:
    """An incremental snapshot notification, or ``None`` for any other record (initial snapshot, undecodable)."""
    if not value:
        return None
    try:
        raw = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if isinstance(raw, dict) and "schema" in raw and isinstance(raw.get("payload"), dict):
        raw = raw["payload"]
    if not isinstance(raw, dict) or raw.get("aggregate_type") != INCREMENTAL or not raw.get("id"):
        return None
    data: dict[str, Any] = raw.get("additional_data") or {}
    collections = tuple(c.strip() for c in str(data.get("data_collections") or "").split(",") if c.strip())
    return SnapshotNotice(
        id=str(raw["id"]),
        type=str(raw.get("type")),
        collections=collections,
        current=data.get("current_collection_in_progress"),
        scanned=data.get("scanned_collection"),
        status=data.get("status"),
        last_key=data.get("last_processed_key"),
        maximum_key=data.get("maximum_key"),
        where=where,
    )


class NotificationReader:
    """A group-less consumer of one notification topic, assigned at its end or at a time."""

    def __init__(self, source: SourceSettings, topic: str) -> None:
        self.topic = topic
        self._config: dict[str, Any] = client_config(
            source,
            **{
                "group.id": f"cdc-mirror-notifications-{uuid.uuid4().hex[:8]}",  # never committed: no group kept
                "enable.auto.commit": False,
                "enable.partition.eof": False,
            },
        )
        self._consumer: Any = None

    def exists(self) -> bool:
        """Whether the topic exists on the brokers."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({k: v for k, v in self._config.items() if k not in ("group.id", "enable.auto.commit")})
        topics = admin.list_topics(self.topic, timeout=METADATA_TIMEOUT_S).topics
        found = topics.get(self.topic)
        return found is not None and found.error is None and bool(found.partitions)

    def read(self, since: float | None) -> list[SnapshotNotice]:
        """Incremental snapshot notifications not read yet; the first call starts at ``since`` (epoch s) or the end."""
        if self._consumer is None:
            self._consumer = self._assign(since)
        notices: list[SnapshotNotice] = []
        timeout = POLL_S
        while True:
            messages = self._consumer.consume(BATCH, timeout)
            for msg in messages:
                if msg.error() is not None:
                    log.warning("notification topic %s: %s", self.topic, msg.error())
                    continue
                where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
                notice = decode_notice(msg.value(), where)
                if notice is not None:
                    notices.append(notice)
            if len(messages) < BATCH:
                return notices
            timeout = 0.0

    def close(self) -> None:
        """Leave the brokers (at shutdown)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _assign(self, since: float | None) -> Any:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        consumer = Consumer(self._config)
        partitions = consumer.list_topics(self.topic, timeout=METADATA_TIMEOUT_S).topics[self.topic].partitions
        if since is None:
            starts = [TopicPartition(self.topic, p, OFFSET_END) for p in partitions]
        else:
            at = int((since - REWIND_S) * 1000)
            wanted = [TopicPartition(self.topic, p, at) for p in partitions]
            starts = consumer.offsets_for_times(wanted, timeout=METADATA_TIMEOUT_S)
            # A time past the last record gives -1 (the end): the partition is read from its end then.
            starts = [tp if tp.offset >= 0 else TopicPartition(self.topic, tp.partition, OFFSET_END) for tp in starts]
        consumer.assign(starts)
        return consumer
