"""Reading one task's Kafka offset ranges straight into Arrow record columns, in Spark's Python worker.

Spark's Kafka source turns every record into a JVM row and then into Arrow for the Python worker that decodes
it: most of a micro-batch's executor CPU (the JIT compiling that path, the rows, the transfer) went there, on
top of the decode. Here the worker reads the ranges Spark planned for the batch itself, with librdkafka (the
plain consumer's CPU: about 1 CPU-s per 1M records), one consumer for all of a task's partitions, kept for the
worker's life. The columns are the ones ``connector.spark.source.stream`` selects from Spark's source, so the
slice is collected by the same code either way.

The rules are Spark's own with ``failOnDataLoss``: a range whose first offset is no longer in the log (aged
out, deleted, the topic re-created) or whose end lies past the log's end stops the batch with an error that
names the topic, partition and offsets (``KAFKA_DATA_LOSS``, read by ``connector.healing.query_failure``).
``read_ranges_past_gaps`` instead reads on past such a gap and returns it (``ReadGap``), for the driver to record
it and rebuild the table it carried while every other table goes on (``mirror.on_data_lost: rebuild``).
Offsets the log skips inside a range (compaction, transaction markers) are not loss: a range ends at its end
offset or at the log's end past it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from connector.collect.kafka_spec import (
    DEBEZIUM_CONTEXT_HEADERS,
    DEBEZIUM_HEADERS,
    HeaderChoice,
    KafkaRange,
    KafkaReadSpec,
)
from connector.errors import ConnectorError, TransientError
from connector.kafka_token import with_token_callback

log = logging.getLogger(__name__)

#: Records asked of librdkafka's queue at a time (it prefetches in the background).
_CONSUME_BATCH = 20_000
_POLL_S = 0.5
_LIST_TIMEOUT_S = 10.0
#: Client errors no retry mends: the read fails at once (Spark's consumer fails on these too).
_REFUSED = frozenset(
    {
        KafkaError._SSL,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
    }
)
#: librdkafka's "Local: Authentication failure" also reports a re-authentication the broker turned down for a moment
#: (a SASL OAUTHBEARER handshake "not valid in current SASL state" under load), after which librdkafka connects and
#: authenticates again by itself: the read fails on it only when it lasts this long with nothing read in between.
_AUTHENTICATION_GRACE_S = 30.0
_HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


class ReadGap(NamedTuple):
    """Offsets of a range the log no longer held, read past (``read_ranges_past_gaps``).

    ``retention``: the log now starts after ``first`` (aged out, deleted records); offsets ``[first, last]`` are
    gone and the read went on at ``last + 1``. ``recreated``: the log ends before the range does (the topic was
    created again, or truncated): nothing of the range from ``first`` on can be trusted, ``last`` is ``None``.
    """

    topic: str
    partition: int
    first: int
    last: int | None
    kind: Literal["retention", "recreated"]


class KafkaRecordsLost(ConnectorError):
    """A micro-batch's range holds offsets Kafka no longer has (``failOnDataLoss``: never skipped silently)."""


def read_ranges(spec: KafkaReadSpec, ranges: Sequence[KafkaRange]) -> pa.Table:
    """Every record of ``ranges`` as Arrow record columns, each partition in offset order.

    Raises:
        KafkaRecordsLost: a range holds offsets the log no longer has.
    """
    return _read(_RangeRead(spec, ranges))


def read_ranges_past_gaps(spec: KafkaReadSpec, ranges: Sequence[KafkaRange]) -> tuple[pa.Table, tuple[ReadGap, ...]]:
    """What ``read_ranges`` reads, reading on past offsets the log no longer has; those gaps, named."""
    reading = _RangeRead(spec, ranges, read_on=True)
    return _read(reading), tuple(reading.gaps)


def _read(reading: _RangeRead) -> pa.Table:
    consumer = _consumer(reading.spec.options)
    _know_topics(consumer, {topic for topic, _ in reading.ranges})
    consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in reading.ranges.values() if r.end > r.start])
    try:
        reading.run(consumer)
    finally:
        consumer.unassign()
    return reading.table()


class _RangeRead:
    """One task's read: the record tables so far and the partitions not yet at their end offset."""

    def __init__(self, spec: KafkaReadSpec, ranges: Sequence[KafkaRange], *, read_on: bool = False) -> None:
        self.spec = spec
        self.read_on = read_on
        self.gaps: list[ReadGap] = []
        self.ranges = {(r.topic, r.partition): r for r in ranges}
        self.open = {key: r.end for key, r in self.ranges.items() if r.end > r.start}
        self.next = {key: max(r.start, 0) for key, r in self.ranges.items()}
        self.schema = _SCHEMA_FOR[(spec.headers != "none", spec.timestamps)]
        self.parts: list[pa.Table] = []
        #: When librdkafka's authentication began failing, with nothing read since (``_authentication_failed``).
        self.authentication_failing_since: float | None = None

    def run(self, consumer: Consumer) -> None:
        last_progress = time.monotonic()
        while self.open:
            messages = consumer.consume(self._wanted(), _POLL_S)
            if messages and self._take(consumer, messages):
                last_progress = time.monotonic()
                self.authentication_failing_since = None
            elif time.monotonic() - last_progress > self.spec.stall_timeout_s:
                waiting = ", ".join(f"{t}-{p} (up to offset {end})" for (t, p), end in sorted(self.open.items()))
                msg = f"reading Kafka stalled for {self.spec.stall_timeout_s:g} s; still waiting on {waiting}"
                raise TransientError(msg)

    def _wanted(self) -> int:
        """At most what the open ranges still hold (and their end events): librdkafka waits for a count it is asked."""
        left = sum(end - self.next[key] for key, end in self.open.items()) + len(self.open)
        return max(1, min(_CONSUME_BATCH, left))

    def _take(self, consumer: Consumer, messages: list[Any]) -> bool:
        """Keep the messages inside their ranges, as columns (librdkafka hands them over in runs per partition).

        Whether the read progressed: records, or a partition's end (a partition's error events alone, such as an
        unknown topic while metadata settles, are no progress).
        """
        events = [m for m in messages if m.error() is not None]
        if events:
            messages = [m for m in messages if m.error() is None]
        if messages:
            self._keep_in_range(self._columns(messages))
        # After the records: a partition's end event follows its last records in the same batch.
        for event in events:
            self._event(consumer, event, event.error())
        return bool(messages) or any(e.error().code() == KafkaError._PARTITION_EOF for e in events)

    def _keep_in_range(self, batch: pa.Table) -> None:
        topics, partitions = batch.column("topic"), batch.column("partition")
        offsets = batch.column("offset").to_numpy()
        changes = pc.or_(pc.not_equal(topics[1:], topics[:-1]), pc.not_equal(partitions[1:], partitions[:-1]))
        starts = [0, *(np.flatnonzero(changes.to_numpy(zero_copy_only=False)) + 1).tolist()]
        for first, after in zip(starts, [*starts[1:], len(offsets)], strict=True):
            key = (topics[first].as_py(), partitions[first].as_py())
            end = self.open.get(key)
            if end is None:  # prefetched past a finished range
                continue
            run = offsets[first:after]
            # Before the next offset wanted: delivered already, or left from the worker's previous assignment.
            skipped = int(np.searchsorted(run, self.next[key]))
            kept = int(np.searchsorted(run, end))
            if kept > skipped:
                self.parts.append(batch.slice(first + skipped, kept - skipped))
                self.next[key] = int(run[kept - 1]) + 1
            if kept < len(run) or run[-1] == end - 1:
                del self.open[key]

    def _columns(self, messages: list[Any]) -> pa.Table:
        columns = {
            "topic": [m.topic() for m in messages],
            "partition": [m.partition() for m in messages],
            "offset": [m.offset() for m in messages],
            "key": [m.key() for m in messages],
            "value": [m.value() for m in messages],
        }
        if self.spec.headers != "none":
            choice = self.spec.headers
            columns["headers"] = [_headers(m.headers(), choice) for m in messages]
        if self.spec.timestamps:
            columns["timestamp_ms"] = [m.timestamp()[1] for m in messages]
        return pa.Table.from_pydict(columns, schema=self.schema)

    def _event(self, consumer: Consumer, message: Any, error: KafkaError) -> None:
        """End of a partition (done when past its range's end), lost offsets, or a client error."""
        key = (message.topic(), message.partition())
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            end = self.open.get(key)
            if end is not None and message.offset() >= end:
                del self.open[key]  # the range's last offsets were markers or compacted away
            elif end is not None:
                self._lost(consumer, key, message.offset())
            return
        if code == KafkaError._AUTO_OFFSET_RESET and key in self.open:
            self._lost(consumer, key, None)
            return
        if code == KafkaError._AUTHENTICATION and not error.fatal():
            self._authentication_failed(error)
            return
        if error.fatal() or code in _REFUSED:
            raise KafkaException(error)
        # A broker going away or a leader moving: librdkafka reconnects by itself; the stall timeout ends it.
        log.warning("reading %s-%s: %s", key[0], key[1], error.str())

    def _authentication_failed(self, error: KafkaError) -> None:
        """A warning while librdkafka authenticates again; the read fails once it has failed for the grace period."""
        now = time.monotonic()
        if self.authentication_failing_since is None:
            self.authentication_failing_since = now
        if now - self.authentication_failing_since >= _AUTHENTICATION_GRACE_S:
            raise KafkaException(error)
        log.warning(
            "reading Kafka: %s (authenticating again; the read fails if it lasts %g s)",
            error.str(),
            _AUTHENTICATION_GRACE_S,
        )

    def _lost(self, consumer: Consumer, key: tuple[str, int], log_end: int | None) -> None:
        wanted = self.ranges[key]
        low, high = consumer.get_watermark_offsets(TopicPartition(*key), timeout=30, cached=False)
        topic, partition = key
        if self.read_on:
            self._read_past(consumer, key, low, high if log_end is None else log_end)
            return
        msg = (
            f"KAFKA_DATA_LOSS: Could not read records in offset [{wanted.start}, {wanted.end}) for topic partition "
            f"{topic}-{partition}: the log holds offsets [{low}, {high if log_end is None else log_end}) now "
            "(aged out by retention, deleted, or the topic was re-created). Some data may have been lost."
        )
        raise KafkaRecordsLost(msg)

    def _read_past(self, consumer: Consumer, key: tuple[str, int], low: int, high: int) -> None:
        """Record the gap at the partition's next offset and read on after it (or end the range)."""
        topic, partition = key
        wanted, after, end = self.next[key], low, self.open[key]
        if high >= wanted and after > wanted:
            # Records aged out or deleted: the log starts past the offset wanted.
            self.gaps.append(ReadGap(topic, partition, wanted, after - 1, "retention"))
            log.warning("Kafka no longer holds %s[%d]@%d..%d: reading on at %d", topic, partition, wanted, low - 1, low)
            if after >= end:
                del self.open[key]
            else:
                self.next[key] = after
                # A partition stopped by the offset error takes no seek: the open ranges are assigned again, each
                # from its next offset (what was fetched already is dropped by ``_keep_in_range``).
                consumer.assign([TopicPartition(t, p, self.next[(t, p)]) for t, p in self.open])
            return
        # The log ends before the offset wanted: another log (the topic created again) or a truncated one. What
        # this range read of it cannot be told from the old log's records, so the whole range is the gap.
        first = max(self.ranges[key].start, 0)
        self.gaps.append(ReadGap(topic, partition, first, None, "recreated"))
        log.warning("Kafka's log of %s[%d] ends at %d, before offset %d: re-created or truncated", *key, high, wanted)
        del self.open[key]

    def table(self) -> pa.Table:
        return pa.concat_tables(self.parts) if self.parts else self.schema.empty_table()


_BASE_FIELDS = [
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
]
_SCHEMA_FOR = {
    (headers, timestamps): pa.schema(
        _BASE_FIELDS
        + ([pa.field("headers", _HEADER_TYPE)] if headers else [])
        + ([pa.field("timestamp_ms", pa.int64())] if timestamps else [])
    )
    for headers in (False, True)
    for timestamps in (False, True)
}


def _headers(headers: Iterable[tuple[str, bytes | None]] | None, choice: HeaderChoice) -> list[dict[str, Any]]:
    """A record's headers as Spark's source gives them; ``debezium``: only ``__debezium.*`` outside its context."""
    if not headers:
        return []
    if choice == "all":
        return [{"key": k, "value": v} for k, v in headers]
    return [
        {"key": k, "value": v}
        for k, v in headers
        if k.startswith(DEBEZIUM_HEADERS) and not k.startswith(DEBEZIUM_CONTEXT_HEADERS)
    ]


_consumers: dict[tuple[tuple[str, str], ...], Consumer] = {}
#: Per consumer: the topics its client's metadata cache was filled with, and when (``_know_topics``).
_listed: dict[int, tuple[float, frozenset[str]]] = {}
#: librdkafka keeps cached metadata for ``metadata.max.age.ms`` (15 min by default): listed again well before.
_LISTING_MAX_AGE_S = 240.0


def _know_topics(consumer: Consumer, topics: set[str]) -> None:
    """Fill the client's metadata cache with every topic before a range of a topic new to it is assigned.

    librdkafka looks up the leader of a topic it does not know yet only on its once-a-second scan of unknown
    topics, so each reused consumer waited about a second whenever its task held a table it had not read before:
    with a thousand tables and a different few hundred changed in each batch, every task of every batch did (a
    fixed ~4 s of a trickle batch's collect). A topic found in the cache at assignment starts fetching at once.
    One cluster-wide metadata request per worker (about 10 ms with 1,000 topics), again only for a topic it did
    not list or once the listing ages.
    """
    now = time.monotonic()
    listed_at, listed = _listed.get(id(consumer), (0.0, frozenset()))
    if topics <= listed and now - listed_at < _LISTING_MAX_AGE_S:
        return
    try:
        names = consumer.list_topics(timeout=_LIST_TIMEOUT_S).topics
    except KafkaException as exc:  # the assignment still works, a second slower: the read decides about the broker
        log.warning("listing Kafka's topics before a read failed (%s); reading on", exc)
        return
    # Topics not in the cluster are remembered too: asking again would not find them (the read reports them).
    _listed[id(consumer)] = (now, frozenset(names) | topics)


def _consumer(options: tuple[tuple[str, str], ...]) -> Consumer:
    """One consumer per worker process and settings (Spark reuses its Python workers across tasks and batches)."""
    consumer = _consumers.get(options)
    if consumer is None:
        # An Entra identity travels as its description; its token callback is made in this worker.
        consumer = _consumers[options] = Consumer(with_token_callback(dict(options)))
    return consumer


def warm_consumer(spec: KafkaReadSpec) -> None:
    """Create this worker's consumer for ``spec`` and fill its metadata cache, before any range is read."""
    _know_topics(_consumer(spec.options), set())


def close_consumers() -> None:
    """Close this process's consumers (a worker's end, or a test's broker going away)."""
    _listed.clear()
    while _consumers:
        _consumers.popitem()[1].close()
