"""Where a micro-batch ends: Spark's Kafka source's admission rules, over plain offset maps.

Offsets are Spark's Kafka source's JSON shape, ``{"topic": {"partition": offset}}``. A partition the start does not
name (a new topic or partition) starts at offset 0, as ``connector.kafka.ranges`` plans it: a log that no
longer starts there has lost records, which the read and the data-loss check report.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from connector.errors import ConfigError

Offsets = dict[str, dict[str, int]]
#: Spark's values for a partition's earliest and latest offset in ``startingOffsets`` JSON.
EARLIEST = -2
LATEST = -1
_DURATION = re.compile(r"\s*([0-9]+)\s*(us|ms|s|m|min|h|d)?\s*", re.IGNORECASE)
_MS_PER_UNIT = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def sorted_offsets(offsets: Offsets) -> Offsets:
    """Topics by name, partitions by number: the same offsets always serialise to the same JSON."""
    return {t: dict(sorted(offsets[t].items(), key=lambda item: int(item[0]))) for t in sorted(offsets) if offsets[t]}


def starting_offsets(setting: str, earliest: Offsets, latest: Offsets) -> Offsets:
    """``source.starting_offsets`` (``earliest``, ``latest`` or JSON per partition) resolved against the logs.

    In JSON, -2 is a partition's earliest offset and -1 its latest (Spark's values); a partition the JSON leaves
    out starts at its earliest, as one created later would.

    Raises:
        ConfigError: not one of the three forms, or the JSON names a partition the pattern does not take.
    """
    if setting == "earliest":
        return sorted_offsets(earliest)
    if setting == "latest":
        return sorted_offsets(latest)
    named = parse_starting(setting)
    unknown = sorted(f"{t}-{p}" for t, parts in named.items() for p in parts if p not in earliest.get(t, {}))
    if unknown:
        msg = f"source.starting_offsets names partitions the topics pattern does not take: {', '.join(unknown)}"
        raise ConfigError(msg)
    start = {t: dict(parts) for t, parts in earliest.items()}
    for topic, parts in named.items():
        for partition, offset in parts.items():
            start[topic][partition] = latest[topic][partition] if offset == LATEST else offset
            if offset == EARLIEST:
                start[topic][partition] = earliest[topic][partition]
    return sorted_offsets(start)


def parse_starting(setting: str) -> Offsets:
    """``source.starting_offsets`` JSON as offsets.

    Raises:
        ConfigError: not JSON of offsets per topic and partition.
    """
    try:
        parsed = json.loads(setting)
        return {str(t): {str(int(p)): int(o) for p, o in parts.items()} for t, parts in parsed.items()}
    except (ValueError, TypeError, AttributeError):
        msg = (
            "source.starting_offsets must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 42}}}} (-2: earliest, -1: latest), got {setting!r}'
        )
        raise ConfigError(msg) from None


def new_records(start: Offsets, latest: Offsets) -> int:
    """Records between ``start`` and ``latest`` (a partition ``start`` does not name counts from offset 0)."""
    return sum(max(0, end - start.get(t, {}).get(p, 0)) for t, parts in latest.items() for p, end in parts.items())


def rate_limit(limit: int, start: Offsets, latest: Offsets) -> Offsets:
    """End offsets reading at most about ``limit`` records, split across partitions by what each has waiting.

    Spark's Kafka source's ``rateLimit``: each partition gets ``limit * its share``, rounded down, but at least one
    record (a partition with little waiting is never starved), and never past its latest offset.
    """
    sizes = {
        (t, p): end - start.get(t, {}).get(p, 0)
        for t, parts in latest.items()
        for p, end in parts.items()
        if end - start.get(t, {}).get(p, 0) > 0
    }
    total = float(sum(sizes.values()))
    if total < 1:
        return sorted_offsets(latest)
    ends: Offsets = {}
    for topic, parts in latest.items():
        for partition, end in parts.items():
            size = sizes.get((topic, partition))
            if size is not None:
                prorate = limit * (size / total)
                end = min(end, start.get(topic, {}).get(partition, 0) + _at_least_one(prorate))
            ends.setdefault(topic, {})[partition] = end
    return sorted_offsets(ends)


def _at_least_one(prorate: float) -> int:
    return math.ceil(prorate) if prorate < 1 else math.floor(prorate)


def duration_ms(text: str, setting: str) -> float:
    """A Spark duration (``15m``, ``30s``, ``500ms``; a bare number is milliseconds) in milliseconds.

    Raises:
        ConfigError: not such a duration; the message names ``setting``.
    """
    match = _DURATION.fullmatch(text)
    if match is None:
        msg = f"{setting} must be a duration like '15m', '30s' or '500ms', got {text!r}"
        raise ConfigError(msg)
    return int(match[1]) * _MS_PER_UNIT[(match[2] or "ms").lower()]


@dataclass
class TriggerDelay:
    """``source.min_offsets_per_trigger`` and ``max_trigger_delay``: hold a batch back until enough records wait.

    As Spark's Kafka source: a batch runs once ``min_records`` wait or ``max_delay_ms`` passed since the last batch
    that ran (15 minutes by default); a query's first batch never waits.
    """

    min_records: int
    max_delay_ms: float = 15 * 60_000.0
    clock_ms: Callable[[], float] = field(default=lambda: 0.0)
    last_trigger_ms: float | None = None

    def hold(self, start: Offsets, latest: Offsets) -> bool:
        """Whether the batch from ``start`` to ``latest`` waits for more records (counting a batch that runs)."""
        now = self.clock_ms()
        recent = self.last_trigger_ms is not None and now - self.last_trigger_ms < self.max_delay_ms
        if recent and new_records(start, latest) < self.min_records:
            return True
        self.last_trigger_ms = now
        return False
