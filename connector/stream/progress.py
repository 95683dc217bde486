"""What a streaming query's progress says.

Kafka offsets behind per partition, records per second, and the newest progress report not seen yet (``run`` feeds
/readyz, the metrics and the batch log line from it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery


log = logging.getLogger(__name__)

log = logging.getLogger(__name__)


def offsets_behind(progress: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(topic, partition, offsets behind) from a Kafka source's progress: latestOffset − endOffset."""
    out = []
    for source in progress.get("sources", []):
        latest = _offsets(source.get("latestOffset"))
        end = _offsets(source.get("endOffset"))
        for topic, partitions in latest.items():
            for partition, offset in partitions.items():
                done = end.get(topic, {}).get(partition, 0)
                out.append((topic, int(partition), max(0, int(offset) - int(done))))
    return out


def records_per_second(progress: dict[str, Any]) -> float:
    """Kafka offsets a batch covered per second of its trigger: Spark's own row count is 0 when the executors read.

    (``source.reader: direct`` leaves Spark's micro-batch frame unread, so ``processedRowsPerSecond`` counts nothing.)
    """
    covered = 0
    for source in progress.get("sources", []):
        start, end = _offsets(source.get("startOffset")), _offsets(source.get("endOffset"))
        for topic, partitions in end.items():
            covered += sum(max(0, int(o) - int(start.get(topic, {}).get(p, 0))) for p, o in partitions.items())
    seconds = (progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000
    return covered / seconds if seconds else 0.0


def _offsets(raw: Any) -> dict[str, dict[str, int]]:
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {}
    return raw if isinstance(raw, dict) and all(isinstance(v, dict) for v in raw.values()) else {}


def new_progress(query: StreamingQuery, last_batch: int) -> dict[str, Any] | None:
    """The query's last progress when it is of a batch after ``last_batch``; ``None`` (one py4j call) otherwise.

    Read through the JVM's object: PySpark's ``lastProgress`` converts the whole progress each time (with a thousand
    topics, every partition's offsets three times over), and this loop asks every second, mostly for a batch seen.
    """
    progress = query._jsq.lastProgress()
    if progress is None or progress.batchId() == last_batch:
        return None
    parsed: dict[str, Any] = orjson.loads(progress.json())
    return parsed
