"""Which Kafka offsets one micro-batch reads, from Spark's checkpoint, split into the tasks that read them.

Spark's Kafka source plans a batch as ``[end of the previous batch, end of this batch)`` per partition and logs
both before ``foreachBatch`` runs: ``offsets/<id>`` holds where batch ``<id>`` ends, ``offsets/<id - 1>`` (or, for
a query's first batch, its initial offsets in ``sources/0/0``) where it starts. A partition that appeared since
starts at offset 0 (Spark reads it from its first record; one whose log no longer starts there has lost records,
which the read reports). Empty ranges are no task.

Tasks: without a split setting, whole partitions are packed into at most ``tasks`` groups of about equal record
counts (one consumer reads a group: a thousand tables' few records each are a few tasks, not two thousand);
``source.max_records_per_partition`` and ``source.min_partitions`` split a partition's range into consecutive
pieces, each its own task, as Spark's own source does.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from connector.collect.kafka_spec import KafkaRange
from connector.errors import LandingZoneCorrupt
from connector.kafka.spark_checkpoint import GARBLED_RECOVERY, SparkCheckpoint
from connector.publish.source_offsets import kafka_offsets

Offsets = dict[str, dict[str, int]]


def batch_ranges(checkpoint: SparkCheckpoint, batch_id: int) -> list[KafkaRange]:
    """The non-empty offset ranges Spark planned for ``batch_id``, by topic and partition."""
    ends = _kafka_offsets(checkpoint, batch_id)
    if ends is None:
        where = checkpoint.folder / "offsets" / str(batch_id)
        msg = f"Spark's offsets log {where} names no Kafka offsets. {GARBLED_RECOVERY}"
        raise LandingZoneCorrupt(msg)
    starts = _kafka_offsets(checkpoint, batch_id - 1) if batch_id > 0 else None
    if starts is None:
        starts = initial_offsets(checkpoint.folder)
    ranges = []
    for topic in sorted(ends):
        for partition, end in sorted(ends[topic].items(), key=lambda item: int(item[0])):
            start = starts.get(topic, {}).get(partition, 0)
            if end > start:
                ranges.append(KafkaRange(topic, int(partition), start, end))
    return ranges


def _kafka_offsets(checkpoint: SparkCheckpoint, batch_id: int) -> Offsets | None:
    lines = checkpoint.offsets(batch_id)
    return kafka_offsets(lines) if lines is not None else None


def initial_offsets(folder: Path) -> Offsets:
    """The offsets a query's first batch starts at (Spark's ``sources/0/0``: a NUL, ``v1`` and the JSON)."""
    path = folder / "sources" / "0" / "0"
    try:
        lines = path.read_bytes().lstrip(b"\0").decode().split("\n")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"Spark's initial offsets {path} are unreadable ({exc}). {GARBLED_RECOVERY}"
        raise LandingZoneCorrupt(msg) from None
    offsets = kafka_offsets(tuple(line for line in lines[1:] if line))
    if not lines[0].startswith("v") or offsets is None:
        msg = f"Spark's initial offsets {path} are not the Kafka source's. {GARBLED_RECOVERY}"
        raise LandingZoneCorrupt(msg)
    return offsets


@dataclass(frozen=True)
class RangeSplit:
    """How a batch's ranges become tasks: ``source.max_records_per_partition`` and ``source.min_partitions``."""

    max_records: int | None = None
    min_pieces: int | None = None

    def groups(
        self, ranges: list[KafkaRange], tasks: int, whole: Collection[str] = frozenset()
    ) -> list[list[KafkaRange]]:
        """``ranges`` as the tasks that read them; each task's ranges are distinct partitions.

        A range of a topic in ``whole`` is never cut: one task must see it in order from its start.
        """
        if self.max_records is not None or self.min_pieces is not None:
            return [[piece] for piece in self.pieces(ranges, whole)]
        groups: list[list[KafkaRange]] = [[] for _ in range(min(tasks, len(ranges)))]
        loads = [(0, index) for index in range(len(groups))]
        for kafka_range in sorted(ranges, key=lambda r: r.end - r.start, reverse=True):
            load, index = heapq.heappop(loads)
            groups[index].append(kafka_range)
            heapq.heappush(loads, (load + kafka_range.end - kafka_range.start, index))
        return groups

    def pieces(self, ranges: list[KafkaRange], whole: Collection[str] = frozenset()) -> list[KafkaRange]:
        """Each range cut into consecutive pieces: of at most ``max_records``, ``min_pieces`` in all at least.

        Ranges of the topics in ``whole`` stay one piece each.
        """
        total = sum(r.end - r.start for r in ranges)
        pieces = []
        for kafka_range in ranges:
            size = kafka_range.end - kafka_range.start
            count = 1
            if kafka_range.start < 0 or kafka_range.topic in whole:  # the log's start, not an offset: one piece
                pieces.append(kafka_range)
                continue
            if self.max_records is not None:
                count = math.ceil(size / self.max_records)
            if self.min_pieces is not None and len(ranges) < self.min_pieces and total:
                count = max(count, math.ceil(size * self.min_pieces / total))
            step = math.ceil(size / count)
            for start in range(kafka_range.start, kafka_range.end, step):
                pieces.append(kafka_range._replace(start=start, end=min(start + step, kafka_range.end)))
        return pieces
