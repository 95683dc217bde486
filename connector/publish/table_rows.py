"""Joining a batch's slices per table: each table's pieces in Kafka order, and the checks between them.

Slices (one per Spark partition, collected and staged on the executors or here) each hold a piece per table;
a table's files of the batch are its pieces' files in (topic, partition, offset) order. A key lives in one
Kafka partition, so per-key order holds across files. Pieces that disagree on key columns or on a column's
type (beyond a widening Arrow can promote) stop the table: open mirroring cannot change either.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from connector.collect.ordering import Position, position_order
from connector.collect.pieces import Collected, SourceShape, StagedFile, TablePiece
from connector.debezium.types import type_name
from connector.errors import SchemaChanged, TableReset, TableStopped, rebuild_hint
from connector.landing_zone.layout import TableRef
from connector.publish.batch_result import BatchResult

log = logging.getLogger(__name__)


@dataclass
class TableFiles:
    """One table's pieces of a whole batch, in (topic, partition, offset) order, with their joint facts."""

    ref: TableRef
    key_columns: tuple[str, ...]
    pieces: list[TablePiece]
    schema: pa.Schema | None  # the data columns of every piece, unified (``None`` when no piece has rows)
    max_source_ts_ms: int | None
    connector: str | None
    first: Position = ("", 0, 0)  # the batch's first record of the table, for messages
    shape: SourceShape | None = None  # the source's columns at the table's last event of the batch

    def __len__(self) -> int:
        return sum(p.rows for p in self.pieces)

    @property
    def staged(self) -> list[StagedFile]:
        """Every staged file of the table, in order."""
        return [f for p in self.pieces for f in p.files]


@dataclass(frozen=True)
class MergedBatch:
    """A batch's tables after joining its slices."""

    tables: dict[str, TableFiles]
    recreate: set[str]  # tables a truncate (policy recreate) restarts in this batch
    refs: dict[str, TableRef]
    topics: dict[str, str]  # each table's Kafka topic
    unused: list[StagedFile] = field(default_factory=list)  # staged files no table publishes (voided, stopped)
    schema_stops: dict[str, str] = field(default_factory=dict)  # tables a schema change stopped: its kind
    ddl: dict[str, SourceShape] = field(default_factory=dict)  # tables a DDL altered: their columns after the last
    resets: dict[str, TableReset] = field(default_factory=dict)  # tables the source reset (a truncate): rebuilt


def merge_slices(slices: Sequence[Collected], result: BatchResult) -> MergedBatch:
    """Join the slices' pieces per table, in (topic, partition, offset) order; also each table's topic."""
    pieces: dict[str, list[TablePiece]] = {}
    refs: dict[str, TableRef] = {}
    topics: dict[str, str] = {}
    schema_stops: dict[str, str] = {}
    resets: dict[str, TableReset] = {}
    for part in slices:
        _count(part, result)
        _stops(part, result, refs, schema_stops, resets)
        topics.update(part.stopped_topics)
        for tid, piece in part.pieces.items():
            pieces.setdefault(tid, []).append(piece)
            topics.setdefault(tid, piece.first[0])
    tables: dict[str, TableFiles] = {}
    recreate: set[str] = set()
    unused: list[StagedFile] = []
    for tid, found in pieces.items():
        found = [found[i] for i in position_order([p.first for p in found])]
        counts = result.table(tid).events
        for piece in found:
            for op, count in piece.events.items():
                counts[op] = counts.get(op, 0) + count
        restart = max((i for i, p in enumerate(found) if p.recreate), default=None)
        if restart is not None:
            recreate.add(tid)
            unused.extend(f for p in found[:restart] for f in p.files)
            found = found[restart:]
        refs[tid] = found[0].ref
        try:
            tables[tid] = join_pieces(tid, found)
        except TableStopped as exc:
            result.stopped.setdefault(tid, exc.reason)
            if isinstance(exc, SchemaChanged):
                schema_stops.setdefault(tid, exc.kind)
            unused.extend(f for p in found for f in p.files)
            log.error("%s", exc)
            continue
        ts_ms = tables[tid].max_source_ts_ms
        if ts_ms is not None:
            result.max_source_ts_ms = max(result.max_source_ts_ms or 0, ts_ms)
    return MergedBatch(tables, recreate, refs, topics, unused, schema_stops, _last_ddl(slices), resets)


def _stops(
    part: Collected,
    result: BatchResult,
    refs: dict[str, TableRef],
    schema_stops: dict[str, str],
    resets: dict[str, TableReset],
) -> None:
    """The tables a slice stopped: stopped in ``result``, or (reset by the source) to be rebuilt."""
    for tid, reason in part.stopped.items():
        refs[tid] = part.stopped_refs[tid]
        if tid in part.resets:  # not stopped: its rebuild begins (``BatchPlanner``)
            resets.setdefault(tid, TableReset(tid, reason, part.resets[tid]))
            continue
        result.stopped.setdefault(tid, reason)
        if tid in part.schema_stops:
            schema_stops.setdefault(tid, part.schema_stops[tid])


def _last_ddl(slices: Sequence[Collected]) -> dict[str, SourceShape]:
    """Each altered table's columns after its last DDL of the batch (the schema change topic's order)."""
    ddl: dict[str, tuple[SourceShape, Position]] = {}
    for part in slices:
        for tid, (shape, where) in part.ddl.items():
            if tid not in ddl or ddl[tid][1] < where:
                ddl[tid] = (shape, where)
    return {tid: shape for tid, (shape, _) in ddl.items()}


def _count(part: Collected, result: BatchResult) -> None:
    result.records += part.records
    for kind, count in part.skipped.by_kind.items():
        result.skipped.add(kind, count)
    for problem in part.problems:
        log.error("malformed input: %s", problem)
    if part.problems:
        result.skipped.add("malformed", len(part.problems))


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
            raise SchemaChanged(
                tid,
                f"{where}column {new.name!r} changed type from {type_name(old.type)} to {type_name(new.type)}; "
                f"open mirroring stops a table on a type change: {rebuild_hint(tid)}",
                "type_changed",
            )
    return pa.schema(fields)


def join_pieces(tid: str, pieces: list[TablePiece]) -> TableFiles:
    """One table of the batch from its pieces (already in order); pieces disagreeing on keys or types stop it."""
    # A piece with a file counts even without rows: an empty table's zero-row file (``publish.empty_tables``).
    keys = {p.key_columns for p in pieces if p.rows or p.files}
    if len(keys) > 1:
        raise SchemaChanged(
            tid,
            f"key columns differ within the batch ({sorted(list(k) for k in keys)}); keyColumns can never change: "
            f"{rebuild_hint(tid)}",
            "key_changed",
        )
    with_rows = [p for p in pieces if p.rows or p.files]
    schemas = [p.schema for p in with_rows if p.schema is not None]
    schema: pa.Schema | None = schemas[0] if schemas else None
    if len(schemas) > 1:
        try:
            schema = pa.unify_schemas(schemas, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            where = ", ".join(f"{t}[{p}]@{o}" for t, p, o in (piece.first for piece in pieces))
            msg = f"column types differ between partitions ({where}): {exc}"
            raise SchemaChanged(tid, msg, "type_changed") from exc
    return TableFiles(
        first=pieces[0].first,
        ref=pieces[0].ref,
        key_columns=next(iter(keys)) if keys else pieces[0].key_columns,
        pieces=pieces,
        schema=schema,
        max_source_ts_ms=max((p.max_source_ts_ms for p in pieces if p.max_source_ts_ms is not None), default=None),
        connector=next((p.connector for p in pieces if p.connector), None),
        shape=next((p.facts.shape for p in reversed(pieces) if p.facts.shape is not None), None),
    )
