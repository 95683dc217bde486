"""Which Kafka records the mirror still needs are gone: the offsets to heal, found before Spark trips over them.

Spark's Kafka source (``failOnDataLoss`` on) fails the whole query when a partition no longer holds the next offset its
checkpoint reads, and names one partition in a JVM exception. To heal only the tables whose partitions lost records
(invariant 12, docs/guarantees.md), the job needs every such partition, the exact offsets lost and where reading can go
on, before the query starts. This module compares the next offset the mirror expects per partition (the end offsets of
the last committed batch) with what the brokers hold now:

* ``retention``: the partition's log start offset is past the expected offset (records aged out by
  ``retention.ms``/``retention.bytes``, or removed with ``DeleteRecords``): offsets ``[expected, log_start - 1]``
  are gone, reading goes on at ``log_start``;
* ``recreated``: the topic was deleted and created again (same name, a new log from offset 0): its end offset is
  below the expected offset, or its topic id (KIP-516, recorded in the ledger with every batch's offsets) differs
  from the one recorded, even when the new log already reaches past the expected offset. What the old log held
  after the expected offset is unknown; reading goes on at the new log's start;
* ``partition-gone``: the partition (or its whole topic) no longer exists.

A compacted topic (``cleanup.policy`` ``compact`` without ``delete``) is not data loss: compaction leaves gaps
between offsets by design (each key keeps its newest record), and Spark reads across them. Its records never age
out and the brokers refuse ``DeleteRecords`` on it, so whatever is missing before its log start was superseded by
a record still in the log: no ``retention`` range is reported for it. A re-created or vanished compacted topic is
still a different or missing log, and is reported. What offsets cannot show: a consumer further behind than the
topic's ``delete.retention.ms`` can miss a tombstone the cleaner already dropped (Kafka's own caveat).

While the query runs, every batch asks the topics' ids once on the driver (``TopicIds``) and compares them with
the recorded ones (``recreated_by_id``). At start-up the broker is asked through one function (``read_brokers``)
that returns plain data (``TopicState``); the comparison (``find_lost``) is a pure function of that data, so
every rule is tested without a broker.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import orjson
from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from connector.config import SourceSettings
from connector.errors import TransientError
from connector.kafka_client import client_config

log = logging.getLogger(__name__)

LossKind = Literal["retention", "recreated", "partition-gone"]

#: How long one admin request may take; a start-up check, so a broker that does not answer fails it.
REQUEST_TIMEOUT_S = 30.0


class Partition(NamedTuple):
    """One Kafka partition: ``(topic, partition)``."""

    topic: str
    partition: int


@dataclass(frozen=True)
class LostRange:
    """Offsets of one partition the mirror has not read and Kafka no longer holds.

    Attributes:
        topic: The topic.
        partition: The partition number.
        first: The first offset lost: the next offset the mirror expected.
        last: The last offset lost (inclusive) when known (``retention``); ``None`` when the log holding them is
            gone (``recreated``, ``partition-gone``: nobody can say how far it went).
        kind: ``retention``, ``recreated`` or ``partition-gone``.
        resume_from: The offset reading goes on at once the table is rebuilt: the current log start offset;
            ``None`` for ``partition-gone`` (nothing to read), and for a gap found while the query runs (the
            batch's own ranges say where the read goes on).
    """

    topic: str
    partition: int
    first: int
    last: int | None
    kind: LossKind
    resume_from: int | None

    def describe(self) -> str:
        """``topic[p]@first..last (retention)``: how a log line or an operator names the gap."""
        last = "" if self.last is None else str(self.last)
        return f"{self.topic}[{self.partition}]@{self.first}..{last} ({self.kind})"


@dataclass(frozen=True)
class TopicState:
    """What the brokers hold of one topic now, as plain data.

    Attributes:
        topic_id: Kafka's topic id (base64, as ``kafka-topics --describe`` prints it): a topic deleted and created
            again under the same name gets a new one.
        cleanup_policy: The topic's ``cleanup.policy`` (``delete``, ``compact``, ``compact,delete``); ``None`` when
            the brokers would not say (then the topic is treated as one whose records age out: a possible gap is
            reported, never hidden).
        partitions: Per partition number, ``(log start offset, end offset)``: the first offset still held and the
            offset the next record will get (the high watermark).
    """

    topic_id: str
    cleanup_policy: str | None
    partitions: Mapping[int, tuple[int, int]]

    @property
    def compacted(self) -> bool:
        """Compaction only: records never age out, gaps between offsets are the policy's doing."""
        policies = {p.strip() for p in (self.cleanup_policy or "delete").split(",")}
        return "compact" in policies and "delete" not in policies


@dataclass(frozen=True)
class DataLossCheck:
    """The outcome of ``check_offsets``.

    Attributes:
        lost: Every gap found, ordered by topic and partition.
        topic_ids: The current topic id of every checked topic that exists, for the caller to record with the
            offsets, so a topic re-created with as many records as before is still recognised next time.
    """

    lost: tuple[LostRange, ...]
    topic_ids: Mapping[str, str] = field(default_factory=dict)


class OffsetsUnknown(TransientError):  # noqa: N818 - the name says what the caller lacks
    """The brokers did not say where the partitions start and end; whether records were lost is unknown."""


def find_lost(
    expected: Mapping[Partition, int],
    topics: Mapping[str, TopicState],
    recorded_ids: Mapping[str, str] | None = None,
) -> list[LostRange]:
    """The gaps between what the mirror expects to read next and what the brokers hold.

    Args:
        expected: The next offset the mirror reads, per partition: the end offsets of the last committed batch
            (a partition Spark discovers later starts at 0). Negative values (Spark's ``-1``/``-2`` for
            latest/earliest in ``startingOffsets``) name no position and are skipped.
        topics: The brokers' view of the topics ``expected`` names (``read_brokers``); a topic missing here no
            longer exists.
        recorded_ids: Topic ids recorded with ``expected``, when the caller kept them; a differing id means the
            topic was re-created even when its new log already reaches past the expected offset.

    Returns:
        One ``LostRange`` per partition that lost records, ordered by topic and partition.
    """
    recorded = recorded_ids or {}
    lost: list[LostRange] = []
    for (topic, partition), offset in sorted(expected.items()):
        if offset < 0:
            continue
        state = topics.get(topic)
        bounds = state.partitions.get(partition) if state is not None else None
        if state is None or bounds is None:
            lost.append(LostRange(topic, partition, offset, None, "partition-gone", None))
            continue
        log_start, end = bounds
        was = recorded.get(topic)
        if (was is not None and was != state.topic_id) or end < offset:
            lost.append(LostRange(topic, partition, offset, None, "recreated", log_start))
        elif log_start > offset and not state.compacted:
            lost.append(LostRange(topic, partition, offset, log_start - 1, "retention", log_start))
    return lost


def with_new_partitions(
    expected: Mapping[Partition, int], topics: Mapping[str, TopicState], subscribed: Collection[str]
) -> dict[Partition, int]:
    """``expected`` plus offset 0 for each partition of ``subscribed`` it does not name.

    Spark reads a partition its checkpoint does not know (a topic Debezium created while the connector was
    down, a partition added) from offset 0, and fails with "Added partition ... starts from N instead of 0" when
    retention already removed its first records: the same loss, for a table never mirrored.
    """
    out = dict(expected)
    for topic in subscribed:
        state = topics.get(topic)
        for partition in state.partitions if state is not None else ():
            out.setdefault(Partition(topic, partition), 0)
    return out


def expected_from_json(lines: Iterable[str]) -> dict[Partition, int] | None:
    """The expected map from Kafka offsets JSON lines: ``{"topic": {"0": 42}}`` each.

    Spark's offsets log entry (the lines after its version and metadata lines), the ledger's recorded source
    offsets and ``--resume-from-ledger``'s offsets all have this shape. ``None`` when a line is not Kafka offsets
    (the file source logs ``{"logOffset": 3}``): there is nothing to check.
    """
    out: dict[Partition, int] = {}
    for line in lines:
        if not line.strip():
            continue
        try:
            parsed = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        kafka = expected_from_map(parsed) if isinstance(parsed, dict) else None
        if kafka is None:
            return None
        out.update(kafka)
    return out


def expected_from_map(ends: Mapping[str, object]) -> dict[Partition, int] | None:
    """The expected map from ``{"topic": {"0": 42}}`` already parsed (``SparkCheckpoint.newest_committed_offsets``).

    ``None`` when it is not that shape.
    """
    out: dict[Partition, int] = {}
    for topic, partitions in ends.items():
        if not isinstance(partitions, dict):
            return None
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or isinstance(offset, bool) or not isinstance(offset, int):
                return None
            out[Partition(topic, int(partition))] = offset
    return out


def read_offsets_log(text: str) -> dict[Partition, int] | None:
    """The expected map from one file of Spark's offsets log (``<checkpoint>/spark/offsets/<batch id>``).

    The file is a version line (``v1``), a metadata line, then one offsets line per source; ``None`` when it is
    not that, or not a Kafka source's.
    """
    lines = text.split("\n")
    if len(lines) < 3 or not lines[0].startswith("v"):
        return None
    return expected_from_json(lines[2:])


def read_brokers(
    admin: AdminClient, topics: Collection[str], timeout_s: float = REQUEST_TIMEOUT_S
) -> dict[str, TopicState]:
    """Ask the brokers for each topic's id, partitions, their log start and end offsets, and ``cleanup.policy``.

    Three admin requests (describe topics, list offsets twice, describe configs) however many topics. A topic
    that does not exist is left out of the result.

    Raises:
        OffsetsUnknown: the brokers did not answer in ``timeout_s`` or refused a request other than the
            topic configuration (whose absence is treated as ``delete``, see ``TopicState``).
    """
    described = _describe(admin, topics, timeout_s)
    if not described:
        return {}
    partitions = [TopicPartition(name, p) for name, (_, ids) in described.items() for p in ids]
    starts = _list_offsets(admin, partitions, OffsetSpec.earliest(), timeout_s)
    ends = _list_offsets(admin, partitions, OffsetSpec.latest(), timeout_s)
    policies = _cleanup_policies(admin, list(described), timeout_s)
    return {
        name: TopicState(
            topic_id=topic_id,
            cleanup_policy=policies.get(name),
            partitions={p: (starts[Partition(name, p)], ends[Partition(name, p)]) for p in ids},
        )
        for name, (topic_id, ids) in described.items()
    }


def _describe(admin: AdminClient, topics: Collection[str], timeout_s: float) -> dict[str, tuple[str, list[int]]]:
    """One DescribeTopics request: each existing topic's id and partition numbers."""
    names = sorted(set(topics))
    if not names:
        return {}
    described: dict[str, tuple[str, list[int]]] = {}
    for name, future in admin.describe_topics(TopicCollection(names), request_timeout=timeout_s).items():
        try:
            description = future.result(timeout=timeout_s)
        except (KafkaException, TimeoutError) as exc:
            if _code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            msg = f"cannot describe Kafka topic {name}: {_reason(exc)}"
            raise OffsetsUnknown(msg) from None
        described[name] = (str(description.topic_id), [p.id for p in description.partitions])
    return described


def recreated_by_id(
    recorded: Mapping[str, str], current: Mapping[str, str], published: Mapping[Partition, int]
) -> list[LostRange]:
    """A ``recreated`` gap for each partition the mirror read of a topic whose id changed, whatever its offsets.

    Args:
        recorded: The ids the ledger recorded with its last batch (a topic it has no id for is not judged).
        current: The ids the brokers give now (a topic missing here is not read now, and not judged).
        published: The next offset per partition after the last committed batch: where each gap starts.
    """
    changed = {topic for topic, topic_id in current.items() if recorded.get(topic, topic_id) != topic_id}
    return [
        LostRange(p.topic, p.partition, max(offset, 0), None, "recreated", None)
        for p, offset in sorted(published.items())
        if p.topic in changed
    ]


class TopicIds:
    """Each topic's Kafka id, asked of the brokers once per micro-batch on the driver (one DescribeTopics request).

    A batch retried after a transient failure, or collected again, asks nothing more.
    """

    def __init__(self, source: SourceSettings, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._source = source
        self._timeout_s = timeout_s
        self._admin: AdminClient | None = None
        self._asked: tuple[int, frozenset[str]] | None = None
        self._ids: dict[str, str] = {}

    def of_batch(self, batch_id: int, topics: Collection[str]) -> dict[str, str]:
        """The ids of ``topics`` (those that exist) as the brokers gave them for batch ``batch_id``.

        Raises:
            OffsetsUnknown: the brokers did not answer (a transient failure: the batch is retried).
        """
        asked = (batch_id, frozenset(topics))
        if asked != self._asked:
            if self._admin is None:
                self._admin = AdminClient(client_config(self._source))
            described = _describe(self._admin, topics, self._timeout_s)
            self._ids = {name: topic_id for name, (topic_id, _) in described.items()}
            self._asked = asked
        return self._ids


def check_offsets(
    source: SourceSettings,
    expected: Mapping[Partition, int],
    *,
    recorded_ids: Mapping[str, str] | None = None,
    subscribed: Collection[str] = (),
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> DataLossCheck:
    """Find the records ``expected`` still needs that the brokers of ``source`` no longer hold.

    Args:
        source: The Kafka source settings (brokers and ``kafka_options``, whose security settings the admin client
            takes as every driver-side client does).
        expected: The next offset per partition (``expected_from_json``/``expected_from_map``).
        recorded_ids: Topic ids recorded with those offsets (``DataLossCheck.topic_ids`` of an earlier check).
        subscribed: Topics the query reads now; their partitions ``expected`` does not name are expected from
            offset 0, as Spark reads them. Leave empty on a first start (nothing is expected yet).
        timeout_s: The longest each admin request may wait.

    Raises:
        OffsetsUnknown: the brokers did not answer (see ``read_brokers``).
    """
    admin = AdminClient(client_config(source))
    names = {p.topic for p in expected} | set(subscribed)
    topics = read_brokers(admin, names, timeout_s)
    wanted = with_new_partitions(expected, topics, subscribed) if subscribed else dict(expected)
    lost = find_lost(wanted, topics, recorded_ids)
    for gap in lost:
        log.warning("Kafka no longer holds records the mirror needs: %s", gap.describe())
    return DataLossCheck(tuple(lost), {name: state.topic_id for name, state in topics.items()})


def _list_offsets(
    admin: AdminClient, partitions: list[TopicPartition], spec: OffsetSpec, timeout_s: float
) -> dict[Partition, int]:
    """One ListOffsets request: per partition, the offset ``spec`` names (earliest: log start, latest: end)."""
    futures = admin.list_offsets(dict.fromkeys(partitions, spec), request_timeout=timeout_s)
    out: dict[Partition, int] = {}
    for tp, future in futures.items():
        try:
            out[Partition(tp.topic, tp.partition)] = int(future.result(timeout=timeout_s).offset)
        except (KafkaException, TimeoutError) as exc:
            msg = f"cannot list the offsets of Kafka partition {tp.topic}[{tp.partition}]: {_reason(exc)}"
            raise OffsetsUnknown(msg) from None
    return out


def _cleanup_policies(admin: AdminClient, names: list[str], timeout_s: float) -> dict[str, str]:
    """Each topic's ``cleanup.policy``; a topic whose configuration the brokers refuse is left out (``delete``)."""
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    out: dict[str, str] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
        try:
            entries = future.result(timeout=timeout_s)
        except (KafkaException, TimeoutError) as exc:
            log.warning(
                "cannot read the configuration of Kafka topic %s (%s): treating it as cleanup.policy=delete, "
                "so a gap in it is reported as lost records",
                resource.name,
                _reason(exc),
            )
            continue
        entry = entries.get("cleanup.policy")
        if entry is not None and entry.value is not None:
            out[resource.name] = str(entry.value)
    return out


def _code(exc: Exception) -> object:
    error = exc.args[0] if exc.args else None
    return error.code() if isinstance(error, KafkaError) else None


def _reason(exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    error = exc.args[0] if exc.args else None
    return str(error.str()) if isinstance(error, KafkaError) else str(exc)
