"""Collecting one slice: the one function ``run`` (on the driver or the executors) and ``convert`` call.

A slice is a set of Kafka records as Arrow columns (one Spark partition, one micro-batch, one ``convert``
batch). The columnar lane takes the topics it can decode in bulk; the record-by-record path
(``SliceCollector``) takes the rest; both give their pieces, skips, stops and dead letters in one
``Collected``.
"""

from __future__ import annotations

import pyarrow as pa

from connector.collect.lane import collect_in_lane
from connector.collect.pieces import CollectContext, Collected
from connector.collect.record_path import SliceCollector
from connector.collect.toast_store import ToastStores
from connector.kcat import kcat_records_table
from connector.record_columns import records_from_arrow


def collect_slice(
    context: CollectContext, table: pa.Table, *, columnar: bool = True, toast_stores: ToastStores | None = None
) -> Collected:
    """Decode and mark one slice's records (``toast_stores``: the driver's keep-last stores, when collected there).

    ``table`` holds Kafka record columns, or a file source's ``line`` column of kcat lines, which are read into
    record columns first so that the lane takes them too.
    """
    if "line" in table.column_names:
        lines = [line.encode() for line in table.column("line").to_pylist() if line and line.strip()]
        records_table = kcat_records_table(lines)
        if records_table is not None:
            table = records_table
    lane = collect_in_lane(context, table, enabled=columnar)
    records, problems = records_from_arrow(lane.rest)
    collected = SliceCollector(context, toast_stores).collect(records) if records else Collected()
    collected.problems.extend(problems)
    return collected.absorb(lane.collected)
