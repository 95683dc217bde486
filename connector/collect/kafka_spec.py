"""What a task reads of Kafka: its offset ranges and the read's settings, as plain data (no Arrow, no librdkafka).

The connector's own Kafka source (``connector.kafka.stream_source``) plans ranges and carries the read's settings
in the data source Spark pickles: each Python process Spark starts to plan a batch unpickles them, so they live
here, apart from the reader (``connector.collect.kafka_read``, which imports pyarrow, numpy and librdkafka), and
such a process imports only this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

HeaderChoice = Literal["none", "debezium", "all"]
#: ``debezium`` headers: Debezium's own, except its per-record context (``connector.spark.source`` filters alike).
DEBEZIUM_HEADERS = "__debezium."
DEBEZIUM_CONTEXT_HEADERS = "__debezium.context."


class KafkaRange(NamedTuple):
    """Offsets ``[start, end)`` of one topic-partition in one micro-batch (``start`` -2: the log's start)."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class KafkaReadSpec:
    """How every task of the job reads its ranges: librdkafka's options and which columns the records need."""

    options: tuple[tuple[str, str], ...]  # librdkafka settings, bootstrap servers and security included
    headers: HeaderChoice = "none"
    timestamps: bool = False
    stall_timeout_s: float = 120.0  # no record and no end of partition for this long fails the task
