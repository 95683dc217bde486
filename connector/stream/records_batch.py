"""One batch of Kafka records as Arrow columns → the sink; shared by ``run`` (driver decoding) and ``convert``.

Collecting is ``connector.landing.collect_slice``, the same function the executors run. Kcat
lines (the file source, and ``convert``'s dumps) are first read into the same record columns Spark's Kafka
source gives, so they reach the lane too.
"""

from __future__ import annotations

import pyarrow as pa

from connector.kcat import kcat_records_table
from connector.landing.batch_result import BatchResult
from connector.landing.sink import MirrorSink


def publish_records_table(sink: MirrorSink, batch_id: int, table: pa.Table, *, columnar: bool = True) -> BatchResult:
    """Publish batch ``batch_id`` of ``table`` (Kafka record columns, or a file source's ``line`` column)."""
    if sink.is_committed(batch_id):
        # Spark replays the last batch after a crash between our commit and its own: nothing to collect.
        return sink.process_collected(batch_id, [])
    if "line" in table.column_names:
        lines = [line.encode() for line in table.column("line").to_pylist() if line and line.strip()]
        records = kcat_records_table(lines)
        if records is not None:
            table = records
    return sink.process_table(batch_id, table, columnar=columnar)
