"""The planner's Kafka requests: the pattern's partitions, one batched offsets request, retries, topics gone."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import Future
from typing import Any
from unittest import mock

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from connector.errors import TransientError
from connector.kafka import offsets_planner
from connector.kafka.offsets_planner import OffsetsPlanner


class _Topic:
    def __init__(self, partitions: int, error: Any = None) -> None:
        self.partitions = dict.fromkeys(range(partitions))
        self.error = error


class _Admin:
    """AdminClient's two calls: a metadata listing and ListOffsets, answered from ``ends``."""

    def __init__(self, ends: dict[tuple[str, int], int | KafkaError]) -> None:
        self.ends = ends
        self.requests: list[dict[TopicPartition, Any]] = []
        self.failures = 0

    def list_topics(self, timeout: float) -> Any:
        if self.failures:
            self.failures -= 1
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        counts = Counter(topic for topic, _ in self.ends)
        topics = {topic: _Topic(count) for topic, count in counts.items()}
        topics["broken"] = _Topic(1, error=KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
        return mock.Mock(topics=topics)

    def list_offsets(self, request: dict[TopicPartition, Any], **kwargs: Any) -> dict[TopicPartition, Future[Any]]:
        self.requests.append(request)
        out: dict[TopicPartition, Future[Any]] = {}
        for key in request:
            future: Future[Any] = Future()
            end = self.ends[(key.topic, key.partition)]
            if isinstance(end, KafkaError):
                future.set_exception(KafkaException(end))
            else:
                future.set_result(mock.Mock(offset=end))
            out[key] = future
        return out


def _planner(admin: _Admin, pattern: str = r"^(?:db\..*)$") -> OffsetsPlanner:
    with mock.patch.object(offsets_planner, "AdminClient", return_value=admin):
        return OffsetsPlanner({"bootstrap.servers": "b:9092"}, pattern)


def test_whole_names_only_and_never_kafka_s_own_topics() -> None:
    admin = _Admin({("db.a", 0): 3, ("db.a", 1): 4, ("xdb.a", 0): 1, ("__consumer_offsets", 0): 9})
    assert _planner(admin).partitions() == [("db.a", 0), ("db.a", 1)]
    assert _planner(admin, r"^(?:.*)$").partitions() == [("db.a", 0), ("db.a", 1), ("xdb.a", 0)]


def test_every_partition_s_offset_in_one_request() -> None:
    ends: dict[tuple[str, int], int | KafkaError] = {(f"db.t{i}", p): i + p for i in range(1000) for p in range(2)}
    admin = _Admin(ends)
    planner = _planner(admin)
    latest = planner.latest(planner.partitions())
    assert len(admin.requests) == 1
    assert len(admin.requests[0]) == 2000
    assert latest["db.t7"] == {"0": 7, "1": 8}


def test_a_topic_deleted_since_the_listing_is_left_out_and_other_errors_are_retried() -> None:
    admin = _Admin({("db.a", 0): 3, ("db.gone", 0): KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)})
    planner = _planner(admin)
    assert planner.latest(planner.partitions()) == {"db.a": {"0": 3}}
    admin.failures = 2
    with mock.patch.object(offsets_planner.time, "sleep") as slept:
        assert planner.partitions() == [("db.a", 0), ("db.gone", 0)]
        # A broker restart or a leader election passes: about two minutes of pauses before the query ends.
        attempts = len(offsets_planner._PAUSES_S) + 1
        admin.failures = attempts - 1
        slept.reset_mock()
        assert planner.partitions() == [("db.a", 0), ("db.gone", 0)]
        assert 100 <= sum(call.args[0] for call in slept.call_args_list) <= 180
        admin.failures = attempts
        with pytest.raises(TransientError, match=f"{attempts} times"):
            planner.partitions()


def test_an_identity_entra_refused_fails_the_listing_at_once_naming_it_and_the_brokers() -> None:
    """Retrying cannot mend a refused identity: no 3 × 30 s of waiting, and Entra's reason instead of librdkafka's
    "token not set"."""
    admin = _Admin({("db.a", 0): 3})
    admin.failures = 3
    planner = _planner(admin)
    refusal = "Microsoft Entra ID gave no token to managed identity (client id mi-x) for https://ns/.default: no"
    with (
        mock.patch.object(offsets_planner, "token_failure", return_value=refusal),
        mock.patch.object(offsets_planner.time, "sleep") as slept,
        pytest.raises(TransientError) as failure,
    ):
        planner.partitions()
    assert str(failure.value) == f"listing Kafka's topics from b:9092 failed once: {refusal}"
    assert admin.failures == 2 and not slept.called
