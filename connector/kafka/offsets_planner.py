"""The partitions the topics pattern takes and where their logs start and end, asked of Kafka with librdkafka.

One metadata request lists the topics; one ``ListOffsets`` request per broker (librdkafka batches them) gives every
partition's earliest or latest offset: a thousand topics of two partitions each are planned in one round trip
rather than two thousand watermark queries. The latest offset is the high watermark (records not yet committed by
a transaction included), as Spark's Kafka source reads by default.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from connector.errors import TransientError
from connector.kafka.admission import Offsets, sorted_offsets
from connector.kafka_token import token_failure, with_token_callback

log = logging.getLogger(__name__)

#: Kafka's own topics: Spark's consumer leaves them out of a pattern subscription (``exclude.internal.topics``).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
#: Pauses between attempts after a client error: about two minutes in all, so a broker restart or a leader election
#: passes without ending the query (Spark's Kafka source waited through them as well, each of its three attempts
#: bounded by the consumer's 60 s API timeout), while /readyz says the brokers are unreachable (``BrokerCheck``). A
#: longer outage ends the query with one line, and Kubernetes restarts the job.
_PAUSES_S = (1.0, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0, 15.0, 15.0, 15.0, 15.0)
#: The partition's topic went away between the listing and the offsets: it is simply no longer planned.
_GONE = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION})

Partition = tuple[str, int]
T = TypeVar("T")


class OffsetsPlanner:
    """Lists the matching partitions and their offsets; one admin client for the query's life."""

    def __init__(self, client_options: Mapping[str, Any], pattern: str, timeout_s: float = 30.0) -> None:
        # Strings only travel to Spark's planner process; an Entra identity's token callback is made here.
        self._options = with_token_callback(client_options)
        self._admin = AdminClient(self._options)
        self._pattern = re.compile(pattern)
        self._timeout_s = timeout_s

    def partitions(self) -> list[Partition]:
        """Every partition of the topics whose whole name the pattern matches, Kafka's internal topics aside."""
        return self._retried(self._list_partitions, "listing Kafka's topics")

    def _list_partitions(self) -> list[Partition]:
        metadata = self._admin.list_topics(timeout=self._timeout_s)
        return sorted(
            (name, partition)
            for name, topic in metadata.topics.items()
            if topic.error is None and name not in INTERNAL_TOPICS and self._pattern.fullmatch(name)
            for partition in topic.partitions
        )

    def earliest(self, partitions: Iterable[Partition]) -> Offsets:
        """The first offset each partition's log holds."""
        return self._offsets(OffsetSpec.earliest(), partitions)

    def latest(self, partitions: Iterable[Partition]) -> Offsets:
        """The offset after each partition's last record."""
        return self._offsets(OffsetSpec.latest(), partitions)

    def _offsets(self, spec: Any, partitions: Iterable[Partition]) -> Offsets:
        wanted = list(partitions)
        return self._retried(
            lambda: self._list_offsets(spec, wanted), f"listing the offsets of {len(wanted)} partitions"
        )

    def _list_offsets(self, spec: Any, partitions: list[Partition]) -> Offsets:
        if not partitions:
            return {}
        request = {TopicPartition(topic, partition): spec for topic, partition in partitions}
        futures = self._admin.list_offsets(
            request, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=self._timeout_s
        )
        offsets: Offsets = {}
        for key, future in futures.items():
            try:
                offset = future.result().offset
            except KafkaException as exc:
                if exc.args[0].code() in _GONE:
                    continue
                raise
            offsets.setdefault(key.topic, {})[str(key.partition)] = offset
        return sorted_offsets(offsets)

    def _retried(self, call: Callable[[], T], what: str) -> T:
        """``call``, tried again after a client error after each of ``_PAUSES_S``.

        The last failure names the brokers. An Entra identity that got no token fails at once, with Entra's reason
        (librdkafka only says its token is not set): retrying cannot mend a refused identity, a person must.
        """
        attempt = 0
        while True:
            attempt += 1
            try:
                return call()
            except KafkaException as exc:
                refused = token_failure(self._options)
                if refused is None and attempt <= len(_PAUSES_S):
                    log.warning("%s failed (%s); trying again", what, exc)
                    time.sleep(_PAUSES_S[attempt - 1])
                    continue
                tries = "once" if attempt == 1 else f"{attempt} times"
                msg = f"{what} from {self._options.get('bootstrap.servers')} failed {tries}: {refused or exc}"
                raise TransientError(msg) from None
