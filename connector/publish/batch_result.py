"""What one batch did, per table: for logs, metrics, the CLI's summary and ``convert``'s totals."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from connector.events import SkipCounts


@dataclass
class TableResult:
    """What one batch did for one table."""

    rows: int = 0
    marker_free_rows: int = 0  # of ``rows``, those in files without __rowMarker__ (an initial load)
    files: int = 0
    bytes: int = 0
    events: dict[str, int] = field(default_factory=dict)


@dataclass
class BatchResult:
    """What one batch did, for logs, metrics and the CLI's summary."""

    batch_id: int
    tables: dict[str, TableResult] = field(default_factory=dict)
    skipped: SkipCounts = field(default_factory=SkipCounts)
    stopped: dict[str, str] = field(default_factory=dict)
    max_source_ts_ms: int | None = None
    already_committed: bool = False
    records: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)
    # Schema changes seen, per table: (kind, action), for ``cdc_mirror_schema_changes_total`` and the logs.
    schema_changes: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Tables whose rebuild a reset of the source began (a TRUNCATE, a new Debezium snapshot): the cause.
    resets: dict[str, str] = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def rows(self) -> int:
        """Rows published by the batch."""
        return sum(t.rows for t in self.tables.values())

    @property
    def files(self) -> int:
        """Files published by the batch."""
        return sum(t.files for t in self.tables.values())

    def table(self, table_id: str) -> TableResult:
        """The result entry for ``table_id``, created on first use."""
        return self.tables.setdefault(table_id, TableResult())

    def event_line(self, **timings: float) -> str:
        """The batch's one log line, a JSON object (``"event": "batch"``), as ``run`` and ``convert`` write it.

        ``timings``: seconds of the batch's steps the caller measured (e.g. ``collect_s``), rounded to ms.
        """
        event = {
            "event": "batch",
            "batch_id": self.batch_id,
            "records": self.records,
            "tables": len(self.tables),
            "rows": self.rows,
            "files": self.files,
            "skipped": self.skipped.total(),
            "already_committed": self.already_committed,
            "sink_s": round(self.duration_s, 3),
            **{name: round(value, 3) for name, value in timings.items()},
        }
        return orjson.dumps(event).decode()
