"""Spark's micro-batches of Kafka records planned by our own source: PySpark's Python streaming data source.

Spark's Java Kafka source was there only to plan the batches (the executors read the ranges with librdkafka): its
jars, its JVM consumer and its offsets reader cost a start-up and a class path for a few offset requests. This
source plans with ``connector.kafka.offsets_planner`` and keeps exactly the Java source's offsets (the offsets log's
``{"topic": {"partition": offset}}``, the initial offsets in ``sources/0/0``), so a checkpoint passes from one
source to the other in either direction and every tool that reads or rewrites the checkpoint is unchanged.

The planner runs in a Python process Spark starts for it; ``read`` (only when the frame is read:
``spark.decode_on: driver``) runs in the executors' workers. The Kafka client options, secrets included, travel in
the data source class itself (``configured_source``), never in the reader's options, which Spark may show.

Spark starts a Python process for each step of planning (creating the source, planning the read, the long-lived
planner), one after another before the first batch, and each one imports this module: it imports only plain data
at its top (``connector.collect.kafka_spec``), librdkafka where offsets are asked for and the Arrow reader only in
``read``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from connector.collect.kafka_spec import KafkaRange, KafkaReadSpec
from connector.kafka.admission import (
    Offsets,
    TriggerDelay,
    duration_ms,
    parse_starting,
    rate_limit,
    sorted_offsets,
    starting_offsets,
)
from connector.kafka.initial_offsets import read_initial_offsets, write_initial_offsets

if TYPE_CHECKING:
    from connector.kafka.offsets_planner import OffsetsPlanner

#: The name ``spark.readStream.format`` takes.
SOURCE_NAME = "connector_kafka"
_BASE_COLUMNS = "topic string, partition int, offset long, key binary, value binary"
_COLUMNS = {
    "none": _BASE_COLUMNS,
    "debezium": f"{_BASE_COLUMNS}, headers array<struct<key: string, value: binary>>",
    "all": f"{_BASE_COLUMNS}, headers array<struct<key: string, value: binary>>, timestamp_ms long",
}


@dataclass(frozen=True)
class PlanOptions:
    """The reader's options (strings, as Spark passes them): what to plan, and where the checkpoint is."""

    checkpoint: Path
    pattern: str
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: float = 15 * 60_000.0
    min_partitions: int | None = None
    max_records_per_partition: int | None = None

    @classmethod
    def of(cls, options: Mapping[str, str]) -> PlanOptions:
        """The options ``connector.spark.source`` gives the reader (Spark's Kafka source's names).

        Raises:
            ConfigError: ``source.starting_offsets`` or ``source.max_trigger_delay`` is not what Spark takes.
        """

        def number(name: str) -> int | None:
            value = options.get(name)
            return int(value) if value else None

        delay = options.get("maxTriggerDelay")
        start = options.get("startingOffsets") or "earliest"
        if start not in ("earliest", "latest"):
            parse_starting(start)  # refused here, in the driver, rather than in Spark's planner process
        return cls(
            checkpoint=Path(options["checkpoint"]),
            pattern=options["subscribePattern"],
            starting_offsets=start,
            max_offsets_per_trigger=number("maxOffsetsPerTrigger"),
            min_offsets_per_trigger=number("minOffsetsPerTrigger"),
            max_trigger_delay_ms=duration_ms(delay, "source.max_trigger_delay") if delay else 15 * 60_000.0,
            min_partitions=number("minPartitions"),
            max_records_per_partition=number("maxRecordsPerPartition"),
        )


class KafkaRanges(InputPartition):
    """One task's offset ranges."""

    def __init__(self, ranges: tuple[KafkaRange, ...]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


class KafkaSource(DataSource):
    """Kafka records of the topics ``subscribePattern`` matches; the columns follow the ``headers`` option."""

    #: librdkafka options of the planner's admin client (bootstrap servers and security), set by ``configured_source``.
    admin_options: ClassVar[dict[str, Any]] = {}
    #: How ``read`` reads a task's ranges, set by ``configured_source``.
    read_spec: ClassVar[KafkaReadSpec | None] = None

    @classmethod
    def name(cls) -> str:
        """The name ``spark.readStream.format`` takes."""
        return SOURCE_NAME

    def schema(self) -> str:
        """The columns of Spark's Kafka source that ``connector.spark.source.stream`` selects."""
        return _COLUMNS[self.options.get("headers") or "none"]

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The reader that plans the micro-batches (in Spark's planner process) and reads them (in its workers)."""
        return KafkaStreamReader(PlanOptions.of(self.options), self.admin_options, self.read_spec)


def configured_source(admin_options: Mapping[str, Any], read_spec: KafkaReadSpec) -> type[KafkaSource]:
    """``KafkaSource`` carrying the client options: Spark keeps the class pickled and hands it to its Python workers."""
    attributes = {"admin_options": dict(admin_options), "read_spec": read_spec, "__module__": __name__}
    return type("ConfiguredKafkaSource", (KafkaSource,), attributes)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches as Spark's Kafka source does; reads a task's ranges with librdkafka."""

    def __init__(
        self,
        plan: PlanOptions,
        admin_options: Mapping[str, Any],
        read_spec: KafkaReadSpec | None,
        planner: OffsetsPlanner | None = None,
    ) -> None:
        self._plan = plan
        self._admin_options = dict(admin_options)
        self._read_spec = read_spec
        self._planner = planner  # made when first needed: the executors' copies (``read``) need none
        #: ``Trigger.AvailableNow``: the latest offsets when the query started, never planned past.
        self._available_now: Offsets | None = None
        self._latest_seen: Offsets | None = None
        self._delay = (
            TriggerDelay(plan.min_offsets_per_trigger, plan.max_trigger_delay_ms, _now_ms)
            if plan.min_offsets_per_trigger
            else None
        )

    def __getstate__(self) -> dict[str, Any]:
        # Sent to the executors for ``read``: an admin client is neither picklable nor needed there.
        return {**self.__dict__, "_planner": None}

    def _offsets_planner(self) -> OffsetsPlanner:
        if self._planner is None:
            # librdkafka only in the process that plans: Spark's processes that create the source and plan the
            # read import this module too, and need no client.
            from connector.kafka.offsets_planner import OffsetsPlanner

            self._planner = OffsetsPlanner(self._admin_options, self._plan.pattern)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        """The offsets kept in the checkpoint, else ``source.starting_offsets`` resolved now and kept there."""
        kept = read_initial_offsets(self._plan.checkpoint)
        if kept is not None:
            return dict(kept)
        planner = self._offsets_planner()
        partitions = planner.partitions()
        earliest = planner.earliest(partitions)
        latest = earliest if self._plan.starting_offsets == "earliest" else planner.latest(partitions)
        offsets = starting_offsets(self._plan.starting_offsets, earliest, latest)
        write_initial_offsets(self._plan.checkpoint, offsets)
        return dict(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``max_offsets_per_trigger`` (``min_offsets_per_trigger`` is kept by ``latestOffset`` itself)."""
        if self._plan.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._plan.max_offsets_per_trigger)
        if self._plan.min_offsets_per_trigger is not None:
            return ReadMinRows(self._plan.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Available-now: the query ends at the offsets latest now, whatever is written after."""
        planner = self._offsets_planner()
        self._available_now = planner.latest(planner.partitions())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Where the next batch ends: the latest offsets, held back or capped as ``limit`` and the settings say."""
        begin: Offsets = {t: {str(p): int(o) for p, o in parts.items()} for t, parts in start.items()}
        latest = self._available_now
        if latest is None:
            planner = self._offsets_planner()
            latest = planner.latest(planner.partitions())
        self._latest_seen = latest
        if isinstance(limit, ReadAllAvailable):
            return dict(latest)
        if self._delay is not None and self._available_now is None and self._delay.hold(begin, latest):
            return dict(sorted_offsets(begin))
        if isinstance(limit, ReadMaxRows):
            return dict(rate_limit(limit.max_rows, begin, latest))
        return dict(latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The logs' ends when the last batch was planned: the progress's ``latestOffset`` (the lag metric)."""
        return dict(self._latest_seen) if self._latest_seen is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """One task per non-empty range, cut as ``max_records_per_partition`` and ``min_partitions`` say."""
        ranges = [
            KafkaRange(topic, int(partition), start.get(topic, {}).get(partition, 0), int(stop))
            for topic, parts in sorted(end.items())
            for partition, stop in sorted(parts.items(), key=lambda item: int(item[0]))
        ]
        ranges = [r for r in ranges if r.end > r.start]
        return [KafkaRanges((piece,)) for piece in split_ranges(ranges, self._plan)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The task's records as Arrow batches, in the columns of the schema."""
        if self._read_spec is None or not isinstance(partition, KafkaRanges):
            msg = "the Kafka source was not configured to read records (configured_source)"
            raise RuntimeError(msg)
        # Arrow and librdkafka's consumer only here, in the executors' workers: not in Spark's planning processes.
        from connector.collect.kafka_read import read_ranges

        yield from read_ranges(self._read_spec, partition.ranges).to_batches()


def split_ranges(ranges: list[KafkaRange], plan: PlanOptions) -> list[KafkaRange]:
    """Each range cut into consecutive pieces of at most ``max_records_per_partition``, ``min_partitions`` at least."""
    total = sum(r.end - r.start for r in ranges)
    pieces: list[KafkaRange] = []
    for kafka_range in ranges:
        size = kafka_range.end - kafka_range.start
        count = 1
        if kafka_range.start < 0:  # the log's start (-2), not an offset: one piece
            pieces.append(kafka_range)
            continue
        if plan.max_records_per_partition:
            count = -(-size // plan.max_records_per_partition)
        if plan.min_partitions and len(ranges) < plan.min_partitions and total:
            count = max(count, -(-size * plan.min_partitions // total))
        step = -(-size // count)
        pieces.extend(
            kafka_range._replace(start=first, end=min(first + step, kafka_range.end))
            for first in range(kafka_range.start, kafka_range.end, step)
        )
    return pieces


def _now_ms() -> float:
    return time.monotonic() * 1000
