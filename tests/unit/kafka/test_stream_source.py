"""The data source's planning, against a stand-in for the brokers: initial offsets kept, limits, available-now."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from connector.collect.kafka_spec import KafkaRange, KafkaReadSpec
from connector.config import SourceSettings
from connector.errors import ConfigError
from connector.healing.query_failure import BatchFailed, explain_query_failure
from connector.kafka.admission import Offsets
from connector.kafka.initial_offsets import initial_offsets_path
from connector.kafka.stream_source import (
    SOURCE_NAME,
    KafkaRanges,
    KafkaStreamReader,
    PlanOptions,
    configured_source,
    split_ranges,
)
from connector.spark.source import plans_with_python


class Brokers:
    """What ``OffsetsPlanner`` would find: the logs' ends, changed by the test."""

    def __init__(self, earliest: Offsets, latest: Offsets) -> None:
        self.earliest_offsets = earliest
        self.latest_offsets = latest
        self.asked = 0

    def partitions(self) -> list[tuple[str, int]]:
        return sorted((t, int(p)) for t, parts in self.latest_offsets.items() for p in parts)

    def earliest(self, partitions: list[tuple[str, int]]) -> Offsets:
        return self.earliest_offsets

    def latest(self, partitions: list[tuple[str, int]]) -> Offsets:
        self.asked += 1
        return self.latest_offsets


def _reader(tmp_path: Path, brokers: Brokers, **options: str) -> KafkaStreamReader:
    plan = PlanOptions.of({"checkpoint": str(tmp_path), "subscribePattern": "^(?:t.*)$", **options})
    return KafkaStreamReader(plan, {"bootstrap.servers": "b:9092"}, None, planner=brokers)  # type: ignore[arg-type]


def test_initial_offsets_are_resolved_once_and_kept_for_a_restart(tmp_path: Path) -> None:
    brokers = Brokers({"t": {"0": 3, "1": 0}}, {"t": {"0": 10, "1": 4}})
    assert _reader(tmp_path, brokers).initialOffset() == {"t": {"0": 3, "1": 0}}
    assert initial_offsets_path(tmp_path).read_bytes() == b'\0v1\n{"t":{"0":3,"1":0}}'
    # Restarted before batch 0 committed, with other offsets in the logs and another setting: the same start.
    later = Brokers({"t": {"0": 8, "1": 2}}, {"t": {"0": 20, "1": 9}})
    assert _reader(tmp_path, later, startingOffsets="latest").initialOffset() == {"t": {"0": 3, "1": 0}}


def test_starting_at_latest(tmp_path: Path) -> None:
    brokers = Brokers({"t": {"0": 3}}, {"t": {"0": 10}})
    assert _reader(tmp_path, brokers, startingOffsets="latest").initialOffset() == {"t": {"0": 10}}


def test_the_default_limit_is_max_offsets_per_trigger_split_across_partitions(tmp_path: Path) -> None:
    brokers = Brokers({}, {"t": {"0": 300, "1": 100}, "t2": {"0": 100}})
    reader = _reader(tmp_path, brokers, maxOffsetsPerTrigger="100")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(100)
    # t2 is new since the start: it starts at its first record.
    assert reader.reportLatestOffset() is None  # nothing planned yet
    assert reader.latestOffset({"t": {"0": 0, "1": 0}}, limit) == {"t": {"0": 60, "1": 20}, "t2": {"0": 20}}
    assert reader.reportLatestOffset() == brokers.latest_offsets  # the lag behind the logs' ends
    # A trigger that reads everything (the engine's choice) is not capped.
    assert reader.latestOffset({"t": {"0": 0, "1": 0}}, ReadAllAvailable()) == brokers.latest_offsets
    assert _reader(tmp_path, brokers).getDefaultReadLimit() == ReadAllAvailable()


def test_min_offsets_per_trigger_holds_the_batch_at_its_start(tmp_path: Path) -> None:
    brokers = Brokers({}, {"t": {"0": 10}})
    reader = _reader(tmp_path, brokers, minOffsetsPerTrigger="50", maxTriggerDelay="1h")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(50)
    assert reader.latestOffset({"t": {"0": 0}}, limit) == {"t": {"0": 10}}  # the first batch never waits
    assert reader.latestOffset({"t": {"0": 10}}, limit) == {"t": {"0": 10}}
    brokers.latest_offsets = {"t": {"0": 40}}
    assert reader.latestOffset({"t": {"0": 10}}, limit) == {"t": {"0": 10}}  # 30 records wait: held
    brokers.latest_offsets = {"t": {"0": 60}}
    assert reader.latestOffset({"t": {"0": 10}}, limit) == {"t": {"0": 60}}


def test_available_now_ends_at_the_offsets_latest_when_the_query_started(tmp_path: Path) -> None:
    brokers = Brokers({}, {"t": {"0": 150}})
    reader = _reader(tmp_path, brokers, maxOffsetsPerTrigger="100", minOffsetsPerTrigger="1000")
    reader.prepareForTriggerAvailableNow()
    brokers.latest_offsets = {"t": {"0": 900}, "t2": {"0": 5}}  # written after the start: not this run's
    limit = reader.getDefaultReadLimit()
    first = reader.latestOffset({"t": {"0": 0}}, limit)
    assert first == {"t": {"0": 100}}
    second = reader.latestOffset(first, limit)
    assert second == {"t": {"0": 150}}
    assert reader.latestOffset(second, limit) == second  # the same offsets: the query ends


def test_partitions_are_the_non_empty_ranges_new_partitions_from_zero(tmp_path: Path) -> None:
    reader = _reader(tmp_path, Brokers({}, {}))
    planned = reader.partitions({"t": {"0": 5, "1": 7}}, {"t": {"0": 9, "1": 7, "2": 3}})
    assert [p.ranges for p in planned if isinstance(p, KafkaRanges)] == [
        (KafkaRange("t", 0, 5, 9),),
        (KafkaRange("t", 2, 0, 3),),
    ]


def test_ranges_are_cut_as_max_records_per_partition_and_min_partitions_say(tmp_path: Path) -> None:
    ranges = [KafkaRange("t", 0, 0, 10), KafkaRange("t", 1, 100, 102)]
    plan = PlanOptions.of({"checkpoint": str(tmp_path), "subscribePattern": "t", "maxRecordsPerPartition": "4"})
    assert [(r.partition, r.start, r.end) for r in split_ranges(ranges, plan)] == [
        (0, 0, 4),
        (0, 4, 8),
        (0, 8, 10),
        (1, 100, 102),
    ]
    plan = PlanOptions.of({"checkpoint": str(tmp_path), "subscribePattern": "t", "minPartitions": "6"})
    assert len(split_ranges(ranges, plan)) >= 6
    # A start at the log's start (-2, from an old checkpoint) is no offset to cut at.
    assert split_ranges([KafkaRange("t", 0, -2, 50)], plan) == [KafkaRange("t", 0, -2, 50)]


def test_the_client_options_travel_in_the_class_not_in_the_reader_s_options(tmp_path: Path) -> None:
    secret: dict[str, Any] = {"bootstrap.servers": "b:9092", "sasl.password": "s3cret"}
    spec = KafkaReadSpec((("bootstrap.servers", "b:9092"),), headers="all", timestamps=True)
    source_class = configured_source(secret, spec)
    assert source_class.name() == SOURCE_NAME
    options = {"checkpoint": str(tmp_path), "subscribePattern": "t", "headers": "all"}
    source = source_class(options)
    assert source.schema().endswith("headers array<struct<key: string, value: binary>>, timestamp_ms long")
    reader = source.streamReader(None)  # type: ignore[arg-type]
    assert isinstance(reader, KafkaStreamReader)
    assert "s3cret" not in repr(options)
    # The executors' copy of the reader carries no admin client.
    assert pickle.loads(pickle.dumps(reader))._planner is None


def test_settings_spark_s_planner_would_refuse_are_refused_by_name(tmp_path: Path) -> None:
    base = {"checkpoint": str(tmp_path), "subscribePattern": "t"}
    with pytest.raises(ConfigError, match="source.starting_offsets"):
        PlanOptions.of({**base, "startingOffsets": "oldest"})
    with pytest.raises(ConfigError, match="source.max_trigger_delay"):
        PlanOptions.of({**base, "maxTriggerDelay": "a while"})
    assert PlanOptions.of({**base, "startingOffsets": '{"t": {"0": -2}}'}).starting_offsets == '{"t": {"0": -2}}'


@pytest.mark.parametrize(
    ("settings", "python"),
    [
        ({}, True),
        ({"planner": "spark"}, False),
        ({"kind": "files", "bootstrap_servers": None}, False),
        # An option librdkafka has no form of: Spark's Java source plans (and reads) then, its jars loaded.
        ({"kafka_options": {"kafka.ssl.truststore.location": "/t.jks"}}, False),
    ],
)
def test_which_source_plans(settings: dict[str, Any], python: bool) -> None:
    source = SourceSettings(**{"kind": "kafka", "bootstrap_servers": "b:9092", **settings})
    assert plans_with_python(source) is python


#: How Spark 4.2 ends a query whose Python source failed to plan (captured from a real query; paths shortened).
_PLANNING_FAILURE = (
    "[STREAM_FAILED] Query [id = 08cf8009, runId = 89d10c08] terminated with exception: "
    "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform latestOffset: "
    "Traceback (most recent call last):\n"
    '  File "/spark/pyspark.zip/pyspark/sql/streaming/python_streaming_source_runner.py", line 269, in main\n'
    '  File "/app/connector/kafka/stream_source.py", line 190, in latestOffset\n'
    "connector.errors.TransientError: listing Kafka's topics from b:9092 failed 13 times: KafkaError{code=_TRANSPORT}\n"
    " SQLSTATE: 38000 SQLSTATE: XXKST\n=== Streaming Query ===\nCurrent State: ACTIVE\n"
)


def test_a_failure_while_planning_says_planning_and_one_in_a_batch_says_batch() -> None:
    planning = explain_query_failure(_PLANNING_FAILURE)
    assert isinstance(planning, BatchFailed)
    assert str(planning) == (
        "listing Kafka's topics from b:9092 failed 13 times: KafkaError{code=_TRANSPORT} "
        "(TransientError while planning a micro-batch)"
    )
    created = "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback ...\n"
    assert "while planning" in str(explain_query_failure(created + "connector.errors.ConfigError: bad\n"))
    in_batch = (
        "py4j.Py4JException: An exception was raised by the Python Proxy. Return Message: Traceback (most "
        'recent call last):\n  File "/x/sink.py", line 10, in publish\n'
        "connector.storage.errors.StorageError: cannot write /lz/t/_tmp_1.part (create): No space left on device\n"
    )
    assert str(explain_query_failure(in_batch)).endswith("(StorageError in a micro-batch)")
