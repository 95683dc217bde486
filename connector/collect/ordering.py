"""Kafka order, the one order rows are applied in: per partition by offset, a batch's tables by position.

A table's rows of a batch must reach the landing zone in the order Debezium wrote them: for one key that is
one partition, by offset. A slice normally holds each partition's records in offset order; these functions
check that, and restore it where the input interleaved (a kcat dump that was concatenated out of order).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Where a record sits in Kafka: (topic, partition, offset).
Position = tuple[str, int, int]


def offsets_ascending(partitions: np.ndarray, offsets: np.ndarray) -> bool:
    """Whether every partition's offsets increase in input order."""
    order = np.argsort(partitions, kind="stable")
    by_partition, by_offset = partitions[order], offsets[order]
    same = by_partition[1:] == by_partition[:-1]
    return bool(np.all(by_offset[1:][same] > by_offset[:-1][same]))


def position_order(positions: Sequence[Position]) -> list[int]:
    """The indexes of ``positions`` in Kafka order (stable: equal positions keep their input order)."""
    return sorted(range(len(positions)), key=positions.__getitem__)
