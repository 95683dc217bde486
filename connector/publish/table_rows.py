"""Joining a batch's slices into one Arrow table per table, and the schema checks between them.

Slices (one per Kafka partition range, collected on the driver or the executors) each hold a piece per
table; a table's rows of the batch are its pieces in (topic, partition, offset) order. Pieces that disagree
on key columns or column types, and a batch whose column types differ from the table's established ones,
stop the table: open mirroring cannot change either.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from connector.collect.ordering import Position, position_order
from connector.collect.pieces import Collected, TablePiece
from connector.debezium.types import type_name
from connector.errors import TableStopped, rebuild_hint
from connector.events import ROW_MARKER_COLUMN
from connector.landing_zone import TableRef
from connector.publish.batch_result import BatchResult

log = logging.getLogger(__name__)


@dataclass
class TableRows:
    """One table's rows of a whole batch: the slices' pieces joined in (topic, partition, offset) order."""

    ref: TableRef
    key_columns: tuple[str, ...]
    table: pa.Table | None
    snapshot_only: bool
    max_source_ts_ms: int | None
    connector: str | None
    first: Position = ("", 0, 0)  # the batch's first record of the table, for messages

    def __len__(self) -> int:
        return 0 if self.table is None else self.table.num_rows


@dataclass(frozen=True)
class MergedBatch:
    """A batch's tables after joining its slices."""

    tables: dict[str, TableRows]
    recreate: set[str]  # tables a truncate (policy recreate) restarts in this batch
    refs: dict[str, TableRef]
    topics: dict[str, str]  # each table's Kafka topic


def merge_slices(slices: Sequence[Collected], result: BatchResult) -> MergedBatch:
    """Join the slices' pieces per table, in (topic, partition, offset) order; also each table's topic."""
    pieces: dict[str, list[TablePiece]] = {}
    refs: dict[str, TableRef] = {}
    topics: dict[str, str] = {}
    for part in slices:
        result.records += part.records
        for kind, count in part.skipped.by_kind.items():
            result.skipped.add(kind, count)
        for problem in part.problems:
            log.error("malformed input: %s", problem)
        if part.problems:
            result.skipped.add("malformed", len(part.problems))
        for tid, reason in part.stopped.items():
            result.stopped.setdefault(tid, reason)
            refs[tid] = part.stopped_refs[tid]
        topics.update(part.stopped_topics)
        for tid, piece in part.pieces.items():
            pieces.setdefault(tid, []).append(piece)
            topics.setdefault(tid, piece.first[0])
    tables: dict[str, TableRows] = {}
    recreate: set[str] = set()
    for tid, found in pieces.items():
        found = [found[i] for i in position_order([p.first for p in found])]
        counts = result.table(tid).events
        for piece in found:
            for op, count in piece.events.items():
                counts[op] = counts.get(op, 0) + count
        restart = max((i for i, p in enumerate(found) if p.recreate), default=None)
        if restart is not None:
            recreate.add(tid)
            found = found[restart:]
        refs[tid] = found[0].ref
        try:
            tables[tid] = join_pieces(tid, found)
        except TableStopped as exc:
            result.stopped.setdefault(tid, exc.reason)
            log.error("%s", exc)
            continue
        ts_ms = tables[tid].max_source_ts_ms
        if ts_ms is not None:
            result.max_source_ts_ms = max(result.max_source_ts_ms or 0, ts_ms)
    return MergedBatch(tables, recreate, refs, topics)


def merge_schema(tid: str, established: pa.Schema | None, batch: pa.Schema, where: str = "") -> pa.Schema:
    """Union of columns; a column whose type changed stops the table (mirroring would stop it too)."""
    if established is None:
        return batch
    fields = list(established)
    known = {f.name: f for f in established}
    for new in batch:
        old = known.get(new.name)
        if old is None:
            fields.append(new)
        elif old.type != new.type:
            raise TableStopped(
                tid,
                f"{where}column {new.name!r} changed type from {type_name(old.type)} to {type_name(new.type)}; "
                f"open mirroring stops a table on a type change: {rebuild_hint(tid)}",
            )
    return pa.schema(fields)


def join_pieces(tid: str, pieces: list[TablePiece]) -> TableRows:
    """One table of the batch from its pieces (already in order); pieces disagreeing on keys or types stop it."""
    keys = {p.key_columns for p in pieces if p.rows}
    if len(keys) > 1:
        raise TableStopped(
            tid,
            f"key columns differ within the batch ({sorted(list(k) for k in keys)}); keyColumns can never change: "
            f"{rebuild_hint(tid)}",
        )
    arrows = [p.table for p in pieces if p.table is not None and p.table.num_rows]
    table: pa.Table | None = arrows[0] if arrows else None
    if len(arrows) > 1:
        try:
            table = pa.concat_tables(arrows, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            where = ", ".join(f"{t}[{p}]@{o}" for t, p, o in (piece.first for piece in pieces))
            raise TableStopped(tid, f"column types differ between partitions ({where}): {exc}") from exc
        if table.column_names[-1] != ROW_MARKER_COLUMN:
            # Columns only later pieces have were appended after the marker; it must stay last.
            order = [n for n in table.column_names if n != ROW_MARKER_COLUMN] + [ROW_MARKER_COLUMN]
            table = table.select(order)
    with_rows = [p for p in pieces if p.rows]
    return TableRows(
        first=pieces[0].first,
        ref=pieces[0].ref,
        key_columns=next(iter(keys)) if keys else pieces[0].key_columns,
        table=table,
        snapshot_only=all(p.snapshot_only for p in with_rows),
        max_source_ts_ms=max((p.max_source_ts_ms for p in pieces if p.max_source_ts_ms is not None), default=None),
        connector=next((p.connector for p in pieces if p.connector), None),
    )
