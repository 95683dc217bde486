"""A checkpoint of either planner is one the other, and every tool that reads Spark's checkpoint, takes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connector.collect.kafka_spec import KafkaRange
from connector.config import SourceSettings
from connector.errors import ConfigError
from connector.kafka.initial_offsets import write_initial_offsets
from connector.kafka.ranges import batch_ranges
from connector.kafka.spark_checkpoint import SparkCheckpoint

_METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'


def _log(folder: Path, batch_id: int, offsets_line: str, *, committed: bool = True) -> None:
    (folder / "offsets").mkdir(parents=True, exist_ok=True)
    (folder / "offsets" / str(batch_id)).write_text(f"v1\n{_METADATA}\n{offsets_line}")
    if committed:
        (folder / "commits").mkdir(exist_ok=True)
        (folder / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def _source(topics: str = "db\\..*") -> SourceSettings:
    return SourceSettings(kind="kafka", bootstrap_servers="b:9092", topics=topics)


@pytest.mark.parametrize("first", ["python", "spark"])
def test_batches_planned_by_one_source_then_the_other_read_alike(tmp_path: Path, first: str) -> None:
    python_lines = [json.dumps({"db.a": {"0": 4, "1": 2}}), json.dumps({"db.a": {"0": 9, "1": 2}, "db.b": {"0": 3}})]
    spark_lines = ['{"db.a":{"0":4,"1":2}}', '{"db.a":{"0":9,"1":2},"db.b":{"0":3}}']  # Spark's: compact
    lines = [python_lines[0], spark_lines[1]] if first == "python" else [spark_lines[0], python_lines[1]]
    write_initial_offsets(tmp_path, {"db.a": {"0": 1, "1": 0}})
    _log(tmp_path, 0, lines[0])
    _log(tmp_path, 1, lines[1], committed=False)
    checkpoint = SparkCheckpoint(tmp_path)
    checkpoint.verify_source(_source())
    assert checkpoint.newest_committed_offsets() is not None
    assert batch_ranges(checkpoint, 0)[0] == KafkaRange("db.a", 0, 1, 4)
    assert KafkaRange("db.a", 1, 0, 2) in batch_ranges(checkpoint, 0)
    # The next batch starts where the other source's ended; db.b, new, from its first record.
    assert batch_ranges(checkpoint, 1) == [KafkaRange("db.a", 0, 4, 9), KafkaRange("db.b", 0, 0, 3)]


def test_the_python_planner_s_checkpoint_is_still_checked_against_the_pattern(tmp_path: Path) -> None:
    _log(tmp_path, 0, json.dumps({"db.a": {"0": 4}}))
    with pytest.raises(ConfigError, match="db.a"):
        SparkCheckpoint(tmp_path).verify_source(_source("other\\..*"))
