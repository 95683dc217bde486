"""The lag gate on MySQL/MariaDB: a mark written to Debezium's signalling table, seen back in Kafka.

The audit needs two things of a source (``mirror_compare.RangedSource``): a position (every change committed
before it is below it), and whether Debezium has put every change below that position into Kafka. On Postgres
the position is a logical-decoding message and the slot's ``confirmed_flush_lsn`` says it is in Kafka. MySQL and
MariaDB have no slot; the candidates were:

- the binlog coordinates or GTID set now (``SHOW MASTER STATUS``, MariaDB's ``@@gtid_binlog_pos``) against
  Debezium's committed source offset (Kafka Connect's ``GET /connectors/<name>/offsets``). Exact (Connect commits
  an offset only once every record before it is acknowledged), but it needs the Connect REST URL from the user,
  waits for ``offset.flush.interval.ms`` (60 s by default), and on a quiet source the offset never passes the last
  transaction (its restart position is the transaction's start) until another event and a heartbeat come;
- a write Debezium sees come through: chosen. ``current_position`` inserts a row into Debezium's signalling table
  (``signal.data.collection``, which every MySQL/MariaDB connector that takes incremental snapshots, and so the
  audit's repairs, already has) in a transaction of its own: type ``log``, a signal Debezium only logs. The row is
  a binlog event after every change committed before it, and Debezium reads the binlog in order and publishes the
  signalling table's changes to ``<topic.prefix>.<signal table>``. ``captured_through`` reads that topic from
  where it ended before the write and is true once the mark's row is there: Debezium has read the binlog past the
  position, and its producer had sent every earlier change before it. A quiet source opens the gate too (the mark
  is the change), within a second, with no Connect URL, no heartbeat and no offset flush; the user names the
  signalling table (``mirror.audit.signal_table``) and lets the audit's user insert into it.

What it relies on: Kafka Connect's producer sends a task's records in order with ``max.in.flight.requests=1``
and retries without end, so records to partitions led by one broker are acknowledged in order. Across brokers an
earlier record may be acknowledged just after the mark; the audit's last look (``audit.compare``) takes a second
mark before it confirms a difference, so such a record would have to stay unacknowledged through both.

The position string is ``<GTID of the mark>|<mark id>`` (``@@last_gtid`` on MariaDB; the binlog file and
position on MySQL), so a report can name where the source was.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from connector.errors import ConnectorError

log = logging.getLogger(__name__)

MARK_PREFIX = "cdc-mirror-pos-"
"""The start of a mark's id (the signalling table's ``id`` is ``varchar(42)`` in Debezium's layout)."""
MARK_TYPE = "log"
"""A signal Debezium only logs (``data.message``)."""
POLL_S = 0.5


def new_mark() -> str:
    """A fresh mark id, 35 characters."""
    return MARK_PREFIX + uuid.uuid4().hex[:20]


def position_text(coordinates: str, mark: str) -> str:
    """The position as ``current_position`` returns it."""
    return f"{coordinates}|{mark}"


def mark_of(position: str) -> str:
    """The mark id of a position string (``position_text``)."""
    _coordinates, sep, mark = position.rpartition("|")
    if not sep or not mark.startswith(MARK_PREFIX):
        msg = f"not a MySQL/MariaDB audit position: {position!r}"
        raise ValueError(msg)
    return mark


def signal_table_topic(prefix: str, signal_table: str) -> str:
    """The topic Debezium publishes the signalling table's changes to: ``<topic.prefix>.<db>.<table>``."""
    return f"{prefix}.{signal_table}"


def carries_mark(value: bytes | None, mark: str) -> bool:
    """Whether a record's value holds ``mark`` (a JSON or Avro value holds the id's UTF-8 bytes as they are)."""
    return value is not None and mark.encode() in value


def mark_insert(signal_table: str) -> str:
    """The INSERT of a mark row into ``db.table`` (Debezium's layout: ``id``, ``type``, ``data``)."""
    database, _, table = signal_table.partition(".")
    if not database or not table:
        msg = f"mirror.audit.signal_table must be database.table, got {signal_table!r}"
        raise ConnectorError(msg)
    return f"INSERT INTO {_quote(database)}.{_quote(table)} (id, type, data) VALUES (%s, %s, %s)"  # noqa: S608


def mark_delete(signal_table: str, marks: int) -> str:
    """The DELETE of ``marks`` mark rows (``mark_insert``'s table), their ids the parameters."""
    database, _, table = signal_table.partition(".")
    ids = ", ".join(["%s"] * marks)
    return f"DELETE FROM {_quote(database)}.{_quote(table)} WHERE id IN ({ids})"  # noqa: S608 - quoted identifiers


def _quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


@dataclass
class MarkWatcher:
    """Reads the signalling table's topic for marks, from where it ended before each mark was written.

    ``consumer`` is made on first use (``confluent_kafka.Consumer`` with the source's settings), closed by ``close``.
    """

    topic: str
    make_consumer: Callable[[], Any]
    _consumer: Any = None
    _next: dict[int, int] = field(default_factory=dict)
    """Per partition, the next offset to read."""
    _seen: set[str] = field(default_factory=set)

    def before_mark(self) -> None:
        """Where the topic ends now: a mark written after this is read from here (kept if already reading)."""
        for partition, high in self._ends().items():
            self._next.setdefault(partition, high)

    def seen(self, mark: str, wait_s: float = POLL_S) -> bool:
        """Whether ``mark`` is in the topic (reads what arrived since the last call, for up to ``wait_s``)."""
        if mark in self._seen:
            return True
        consumer = self._client()
        from confluent_kafka import TopicPartition

        deadline = time.monotonic() + wait_s
        ends = self._ends()
        for partition in ends:
            self._next.setdefault(partition, 0)
        pending = [TopicPartition(self.topic, p, o) for p, o in self._next.items() if o < ends.get(p, 0)]
        if not pending:
            return False
        consumer.assign(pending)
        try:
            while any(self._next[tp.partition] < ends[tp.partition] for tp in pending):
                message = consumer.poll(max(0.0, deadline - time.monotonic()))
                if message is None:
                    if time.monotonic() >= deadline:
                        break
                    continue
                if message.error() is not None:
                    log.warning("audit: reading %s: %s", self.topic, message.error())
                    break
                self._next[message.partition()] = message.offset() + 1
                value = message.value()
                if value is not None and MARK_PREFIX.encode() in value:
                    self._seen.update(m for m in _marks_in(value))
        finally:
            consumer.unassign()
        return mark in self._seen

    def close(self) -> None:
        """Close the consumer."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _client(self) -> Any:
        if self._consumer is None:
            self._consumer = self.make_consumer()
        return self._consumer

    def _ends(self) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        consumer = self._client()
        metadata = consumer.list_topics(self.topic, timeout=10)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            return {}
        ends = {}
        for partition in topic.partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=10)
            ends[partition] = int(high)
        return ends


def _marks_in(value: bytes) -> list[str]:
    """The mark ids a record value holds (each is ``MARK_PREFIX`` and 20 hex digits)."""
    marks = []
    needle = MARK_PREFIX.encode()
    start = value.find(needle)
    while start >= 0:
        candidate = value[start : start + len(needle) + 20]
        if len(candidate) == len(needle) + 20:
            marks.append(candidate.decode("ascii", errors="replace"))
        start = value.find(needle, start + 1)
    return marks
