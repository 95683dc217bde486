"""The executor half of ``foreachBatch``: each Spark partition of a micro-batch is collected where it is.

Spark's Kafka source makes one partition per Kafka partition (per offset range), so decoding and marking
run in Spark's Python workers, in parallel over the executors' cores, and only the marked Arrow tables
(far smaller than the JSON they came from) travel to the driver. The driver then numbers, encodes,
publishes and commits (``MirrorSink.process_collected``). On a cluster this scales with the number of
Kafka partitions and executors; on one machine it uses every core.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

from connector.collect.pieces import CollectContext, Collected
from connector.collect.slice import collect_slice

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_SLICE_COLUMN = "slice"
_SLICE_SCHEMA = pa.schema([pa.field(_SLICE_COLUMN, pa.binary())])


def collect_slices(frame: DataFrame, context: CollectContext, *, columnar: bool = True) -> list[Collected]:
    """Collect every Spark partition of ``frame`` on the executors; the slices come back to the driver."""
    task = partial(collect_partition, context, columnar)
    table = frame.mapInArrow(task, f"{_SLICE_COLUMN} binary").toArrow()
    # Pickle only ever crosses between this job's own Python processes (worker → driver).
    return [pickle.loads(data) for data in table.column(_SLICE_COLUMN).to_pylist()]  # noqa: S301


def collect_partition(
    context: CollectContext, columnar: bool, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: one partition's records → one pickled ``Collected`` slice."""
    arrow_batches = list(batches)
    if not arrow_batches:
        return
    collected = collect_slice(context, pa.Table.from_batches(arrow_batches), columnar=columnar)
    data = pickle.dumps(collected, protocol=pickle.HIGHEST_PROTOCOL)
    yield pa.RecordBatch.from_arrays([pa.array([data], type=pa.binary())], schema=_SLICE_SCHEMA)
