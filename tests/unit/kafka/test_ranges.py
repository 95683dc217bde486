"""A micro-batch's Kafka ranges from Spark's checkpoint, their tasks, and when the executors read Kafka themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.collect.kafka_spec import KafkaRange
from connector.config import ConnectorSettings, MirrorSettings, SourceSettings, SparkSettings
from connector.errors import LandingZoneCorrupt
from connector.kafka.ranges import RangeSplit, batch_ranges, initial_offsets
from connector.kafka.spark_checkpoint import SparkCheckpoint
from connector.spark.source import C1_ONLY, SERIAL_GC, jvm_options, kafka_read_spec


def _offsets_log(folder: Path, batch_id: int, offsets: str) -> None:
    (folder / "offsets").mkdir(parents=True, exist_ok=True)
    (folder / "offsets" / str(batch_id)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{offsets}', encoding="utf-8")


def _initial(folder: Path, offsets: str) -> None:
    (folder / "sources" / "0").mkdir(parents=True)
    (folder / "sources" / "0" / "0").write_bytes(b"\0v1\n" + offsets.encode())


def test_a_batch_reads_from_the_previous_batch_end_to_its_own(tmp_path: Path) -> None:
    _initial(tmp_path, '{"a":{"0":0,"1":5}}')
    _offsets_log(tmp_path, 0, '{"a":{"0":10,"1":5}}')
    _offsets_log(tmp_path, 1, '{"a":{"0":25,"1":7},"b":{"0":3}}')
    checkpoint = SparkCheckpoint(tmp_path)
    assert batch_ranges(checkpoint, 0) == [KafkaRange("a", 0, 0, 10)]  # a-1 holds nothing new: no task
    # b appeared since: from its first offset (a log that starts later has lost records, which the read reports)
    assert batch_ranges(checkpoint, 1) == [
        KafkaRange("a", 0, 10, 25),
        KafkaRange("a", 1, 5, 7),
        KafkaRange("b", 0, 0, 3),
    ]


def test_partitions_sort_by_number_and_the_initial_offsets_are_spark_s(tmp_path: Path) -> None:
    _initial(tmp_path, '{"a":{"10":4,"2":1}}')
    assert initial_offsets(tmp_path) == {"a": {"10": 4, "2": 1}}
    _offsets_log(tmp_path, 0, '{"a":{"10":6,"2":3}}')
    assert [r.partition for r in batch_ranges(SparkCheckpoint(tmp_path), 0)] == [2, 10]
    assert initial_offsets(tmp_path / "none") == {}


def test_damaged_offsets_are_refused_with_the_path(tmp_path: Path) -> None:
    (tmp_path / "sources" / "0").mkdir(parents=True)
    (tmp_path / "sources" / "0" / "0").write_bytes(b'\0v1\n{"logOffset":3}')
    with pytest.raises(LandingZoneCorrupt, match="sources/0/0"):
        initial_offsets(tmp_path)
    _offsets_log(tmp_path, 0, '{"logOffset":3}')
    with pytest.raises(LandingZoneCorrupt, match="offsets/0"):
        batch_ranges(SparkCheckpoint(tmp_path), 0)


def test_whole_partitions_are_packed_into_balanced_tasks() -> None:
    ranges = [KafkaRange("t", p, 0, size) for p, size in enumerate([100, 90, 40, 30, 20, 10, 5, 5])]
    groups = RangeSplit().groups(ranges, 3)
    assert len(groups) == 3
    assert sorted(r for g in groups for r in g) == sorted(ranges)  # each range once, whole
    loads = [sum(r.end - r.start for r in g) for g in groups]
    assert max(loads) - min(loads) <= 10
    assert RangeSplit().groups(ranges[:2], 8) == [[ranges[0]], [ranges[1]]]  # no empty task
    for group in groups:
        assert len({(r.topic, r.partition) for r in group}) == len(group)


def test_split_settings_cut_ranges_into_consecutive_pieces_each_a_task() -> None:
    ranges = [KafkaRange("t", 0, 10, 35), KafkaRange("t", 1, 0, 5)]
    pieces = RangeSplit(max_records=10).groups(ranges, 8)
    assert pieces == [
        [KafkaRange("t", 0, 10, 19)],
        [KafkaRange("t", 0, 19, 28)],
        [KafkaRange("t", 0, 28, 35)],
        [KafkaRange("t", 1, 0, 5)],
    ]
    spread = [g[0] for g in RangeSplit(min_pieces=6).groups(ranges, 8)]
    assert len(spread) >= 6
    for partition in (0, 1):
        mine = [r for r in spread if r.partition == partition]
        assert mine[0].start == ranges[partition].start and mine[-1].end == ranges[partition].end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))


def test_a_topic_that_must_be_read_whole_is_never_cut() -> None:
    """A keyless table awaiting its blocking snapshot: one task must see its partition from the batch's start."""
    ranges = [KafkaRange("keyless", 0, 10, 35), KafkaRange("t", 0, 0, 30)]
    for split in (RangeSplit(max_records=10), RangeSplit(min_pieces=6)):
        pieces = [g[0] for g in split.groups(ranges, 8, whole={"keyless"})]
        assert [r for r in pieces if r.topic == "keyless"] == [ranges[0]]
        assert len([r for r in pieces if r.topic == "t"]) >= 3


def _kafka(**source: object) -> ConnectorSettings:
    return ConnectorSettings(
        source=SourceSettings.model_validate({"kind": "kafka", "bootstrap_servers": "b:9092", **source})
    )


def test_the_executors_read_kafka_themselves_unless_spark_s_source_must() -> None:
    spec, _ = kafka_read_spec(_kafka())
    assert spec is not None
    options = dict(spec.options)
    assert options["bootstrap.servers"] == "b:9092"
    assert options["isolation.level"] == "read_uncommitted"  # as Spark's Java consumer reads
    assert options["auto.offset.reset"] == "error"  # lost offsets are never skipped
    assert (spec.headers, spec.timestamps) == ("none", False)
    sasl = _kafka(
        kafka_options={
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": 'x required username="u" password="p";',
        }
    )
    assert dict(kafka_read_spec(sasl)[0].options)["sasl.username"] == "u"  # type: ignore[union-attr]
    jks = _kafka(kafka_options={"kafka.ssl.truststore.location": "/t.jks"})
    assert kafka_read_spec(jks) == (None, "source.kafka_options kafka.ssl.truststore.location have no librdkafka form")
    assert kafka_read_spec(_kafka(reader="spark"))[0] is None
    assert kafka_read_spec(ConnectorSettings())[0] is None  # files
    driver = _kafka().model_copy(update={"spark": SparkSettings(decode_on="driver")})
    assert kafka_read_spec(driver)[0] is None


def test_dead_letters_read_every_header_and_the_timestamp() -> None:
    settings = _kafka().model_copy(update={"mirror": MirrorSettings(poison_policy="dead-letter")})
    spec = kafka_read_spec(settings)[0]
    assert spec is not None and (spec.headers, spec.timestamps) == ("all", True)


def test_c1_only_jit_and_a_serial_driver_gc_when_the_executors_read_kafka_unless_spark_conf_says() -> None:
    assert jvm_options(_kafka()) == {
        "spark.driver.extraJavaOptions": f"{C1_ONLY} {SERIAL_GC}",
        "spark.executor.extraJavaOptions": C1_ONLY,
    }
    assert jvm_options(_kafka(reader="spark")) == {}
    mine = _kafka().model_copy(update={"spark": SparkSettings(conf={"spark.driver.extraJavaOptions": "-Xss4m"})})
    assert jvm_options(mine) == {"spark.executor.extraJavaOptions": C1_ONLY}


def test_the_catching_up_rate_counts_the_offsets_a_batch_covered() -> None:
    """Spark's processedRowsPerSecond is 0 when its frame is left unread: the rate comes from the offsets."""
    from connector.stream.progress import records_per_second

    progress = {
        "sources": [{"startOffset": {"a": {"0": 10}}, "endOffset": '{"a":{"0":110,"1":50}}'}],
        "durationMs": {"triggerExecution": 500},
        "processedRowsPerSecond": 0.0,
    }
    assert records_per_second(progress) == 300.0  # (100 + 50) offsets in 0.5 s
    assert records_per_second({"sources": []}) == 0.0
