"""Poison records: the raw record kept with why it was rejected, and which topics send them to dead letters.

Collecting (on the executors or the driver) makes a ``DeadLetter`` of a record it cannot decode when the
topic's poison policy is ``dead-letter``; the driver hands them to a writer (``connector.deadletter.writer``)
before it publishes the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from connector.config import MirrorSettings
from connector.events import KafkaRecord


@dataclass(frozen=True)
class DeadLetter:
    """One poison record, raw, with its origin and the reason it was rejected.

    Attributes:
        topic: Source topic.
        partition: Source partition.
        offset: Source offset.
        key: The record's key bytes, as Kafka held them.
        value: The record's value bytes, as Kafka held them.
        headers: The record's headers.
        table: The landing-zone table the record belongs to (from its topic).
        error: Why it was rejected (a ``DecodeError`` message; never a secret).
        timestamp_ms: The record's Kafka timestamp, when known.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    table: str
    error: str
    timestamp_ms: int | None = None

    @classmethod
    def from_record(cls, record: KafkaRecord, table: str, error: str | BaseException) -> DeadLetter:
        """The dead letter of ``record``."""
        return cls(
            record.topic,
            record.partition,
            record.offset,
            record.key,
            record.value,
            tuple(record.headers),
            table,
            str(error),
            record.timestamp_ms,
        )

    @property
    def position(self) -> str:
        """``topic[partition]@offset``."""
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def sort_key(self) -> tuple[str, int, int]:
        """Kafka order."""
        return self.topic, self.partition, self.offset


def poison_policy(mirror: MirrorSettings, topic: str) -> Literal["stop", "dead-letter"]:
    """The poison policy of ``topic``: its ``mirror.tables`` override, else ``mirror.poison_policy``."""
    return mirror.table_settings(topic).poison_policy or mirror.poison_policy


def dead_letter_in_use(mirror: MirrorSettings) -> bool:
    """Whether any topic can send records to the dead-letter output."""
    return mirror.poison_policy == "dead-letter" or any(
        t.poison_policy == "dead-letter" for t in mirror.tables.values()
    )
