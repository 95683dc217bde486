"""A table's events in one slice, gathered as they are decoded and told as the piece's facts (``PieceFacts``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pyarrow as pa

from connector.collect.ordering import Position
from connector.collect.pieces import INCREMENTAL_SNAPSHOT, PieceFacts, SourceShape, initial_load, piece_facts
from connector.debezium.envelope import ChangeEvent
from connector.debezium.types import ColumnType
from connector.events import KafkaRecord, Op

# Compared with once an event: bound once (see ``Op``).
_READ = Op.READ


class TableEvents:
    """A table's events in the slice, as columns for ``piece_facts``: op, source time and connector of each."""

    def __init__(self) -> None:
        self.ops: list[str] = []
        self.ts_ms: list[int | None] = []
        self.connectors: list[str | None] = []
        # Every read's source.snapshot by record position (``initial_load`` tells the initial-snapshot ones), and
        # whether every event so far was an initial-snapshot read.
        self.reads: dict[Position, str] = {}
        self.initial_open = True
        # The last event's schema, or its row when schemaless: the piece's ``SourceShape``, made once at the end.
        self._columns: Mapping[str, ColumnType] | None = None
        self._row: Mapping[str, Any] | None = None

    def add(self, event: ChangeEvent) -> None:
        """Count ``event`` in."""
        if event.columns is not None:
            self._columns, self._row = event.columns, None
        elif event.after:  # a schemaless delete's ``before`` may hold the key columns only
            self._columns, self._row = None, event.after
        self.ops.append(event.op)
        self.ts_ms.append(event.ts_ms)
        connector = event.source.get("connector")
        self.connectors.append(str(connector) if connector else None)
        text = ""
        if event.op == _READ:
            snapshot = event.source.get("snapshot")
            # Debezium 1.x wrote a boolean; 2.x and later one of true/first/.../last/incremental/false.
            text = "" if snapshot is None else "true" if snapshot is True else str(snapshot).lower()
            record = event.record
            self.reads[(record.topic, record.partition, record.offset)] = text
        if event.op != _READ or text == INCREMENTAL_SNAPSHOT:
            self.initial_open = False

    def facts(self, records: list[KafkaRecord] | None) -> PieceFacts:
        """The facts, with the initial-load part of the rows made from ``records`` (one per row, in file order)."""
        initial = None
        if records and self.reads:
            snapshots = [self.reads.get((r.topic, r.partition, r.offset)) for r in records]
            ops = [_READ if s is not None else "" for s in snapshots]
            initial = initial_load(pa.array(ops, pa.string()), pa.array(snapshots, pa.string()))
            initial = replace(initial, complete=self.initial_open and initial.complete)
        shape = None
        if self._columns is not None:
            shape = SourceShape.of_schema(self._columns)
        elif self._row is not None:
            shape = SourceShape.of_row(self._row)
        return piece_facts(
            pa.array(self.ops, pa.string()),
            pa.array(self.ts_ms, pa.int64()),
            pa.array(self.connectors, pa.string()),
            initial,
            shape,
        )
