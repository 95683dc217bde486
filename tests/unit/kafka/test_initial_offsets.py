"""The initial offsets file is Spark's Kafka source's, byte for byte, read and written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from connector.errors import LandingZoneCorrupt
from connector.kafka.initial_offsets import initial_offsets_path, read_initial_offsets, write_initial_offsets
from connector.kafka.ranges import initial_offsets

SPARK_WRITTEN = Path(__file__).resolve().parents[2] / "data" / "checkpoint_spark401" / "cp" / "spark"


def test_spark_s_own_file_is_read_and_written_back_byte_for_byte(tmp_path: Path) -> None:
    original = initial_offsets_path(SPARK_WRITTEN).read_bytes()
    offsets = read_initial_offsets(SPARK_WRITTEN)
    assert offsets is not None
    assert offsets["upgrade401.public.customers"] == {"0": 0, "1": 0, "2": 0}
    write_initial_offsets(tmp_path, offsets)
    assert initial_offsets_path(tmp_path).read_bytes() == original


def test_what_is_written_is_what_the_batch_planner_reads(tmp_path: Path) -> None:
    offsets = {"t": {"10": 4, "2": 9}, "a.b": {"0": 0}}
    write_initial_offsets(tmp_path, offsets)
    assert initial_offsets_path(tmp_path).read_bytes() == b'\0v1\n{"a.b":{"0":0},"t":{"2":9,"10":4}}'
    assert initial_offsets(tmp_path) == offsets
    assert read_initial_offsets(tmp_path) == offsets
    assert [p.name for p in initial_offsets_path(tmp_path).parent.iterdir()] == ["0"]  # no temporary file left


def test_no_file_is_none_and_a_garbled_one_is_refused(tmp_path: Path) -> None:
    assert read_initial_offsets(tmp_path) is None
    shutil.copytree(SPARK_WRITTEN / "sources", tmp_path / "sources")
    initial_offsets_path(tmp_path).write_bytes(b'\0v1\n{"logOffset":3}')
    with pytest.raises(LandingZoneCorrupt, match="sources/0/0"):
        read_initial_offsets(tmp_path)
