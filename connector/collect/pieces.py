"""What collecting a slice gives, whichever path collected it: marked pieces per table, and their facts.

``CollectContext`` is what a slice may read of the ledger; ``TablePiece`` one table's marked rows of the
slice; ``Collected`` a slice's pieces, skips, stops and dead letters. ``piece_facts`` is the one
definition of a piece's facts (events per op, its initial-load part, newest source time, connector),
computed from Arrow columns by the columnar lane and by the record path alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from connector.collect.ordering import Position
from connector.collect.poison import DeadLetter
from connector.config import MirrorSettings, SourceSettings
from connector.debezium.types import ColumnType
from connector.errors import SchemaChanged, TableReset, TableStopped
from connector.events import KafkaRecord, Op, SkipCounts
from connector.landing_zone.layout import TableRef

#: Debezium's ``source.snapshot`` on the first read of a snapshot pass: of the whole snapshot, of one table.
PASS_FIRST = ("first", "first_in_data_collection")
#: ``source.snapshot`` on a pass's last read of a table (a one-row table's only read has one of these).
PASS_LAST = ("last", "last_in_data_collection")
#: ``source.snapshot`` of an incremental snapshot's reads, which interleave with live changes.
INCREMENTAL_SNAPSHOT = "incremental"
#: ``source.snapshot`` of an initial or blocking snapshot's reads (Debezium 1.x wrote ``true``/``last`` too).
SNAPSHOT_READS = ("true", *PASS_FIRST, *PASS_LAST)


@dataclass(frozen=True)
class InitialLoad:
    """The part of a piece that belongs to its table's initial load: its leading initial-snapshot reads.

    A read of Debezium's initial snapshot (``op`` r, ``source.snapshot`` anything but ``incremental``) is the
    row's whole state before any change; the first other event (c/u/d, a truncate, an incremental-snapshot
    read) ends the initial load, so only a piece's leading reads count. ``pass_starts`` are the rows (all
    below ``rows``) where a snapshot pass of the table begins: a read marked ``first`` or
    ``first_in_data_collection``, or any read after one marked ``last``/``last_in_data_collection``. A pass
    beginning after rows of an earlier pass means Debezium started its snapshot again.

    Past the table's initial load the driver needs every pass that begins in the piece (``SnapshotPasses``).
    """

    rows: int = 0
    pass_starts: tuple[int, ...] = ()
    ends_pass: bool = False  # the last of those rows is the last read of a pass (``last``/``last_in_...``)
    complete: bool = False  # every event of the piece is an initial-snapshot read (its initial load goes on)
    passes: SnapshotPasses = field(default_factory=lambda: SnapshotPasses())


@dataclass(frozen=True)
class SnapshotPasses:
    """Where snapshot passes begin in a piece, for a table past its initial load (Debezium snapshotted it again).

    Only reads whose ``source.snapshot`` names an initial or blocking snapshot count (``first``, ``true``,
    ``last``, ...): a read that says nothing may be an incremental snapshot's, which the mirror asks for itself.
    Such a snapshot's reads of one table are contiguous in its partition, so a read after another row begins a
    pass, as does a read marked ``first...`` or one after a ``last...`` read.
    """

    begins: bool = False  # a pass begins at a row after the first (or at the first, marked ``first...``)
    opens: bool = False  # the first row is such a read: it begins a pass unless one was open before the piece
    ends_open: bool = False  # the last row is such a read, not its pass's last: a pass is open after the piece
    after_load: bool = False  # such a read follows the piece's leading initial-snapshot reads (``rows``)


def initial_load(ops: Column, snapshots: Column) -> InitialLoad:
    """The initial-load part of rows whose events have ``ops`` and ``source.snapshot`` values ``snapshots``."""
    if not len(ops):
        return InitialLoad()
    snapshots = pc.utf8_lower(pc.cast(snapshots, pa.string()))
    initial = pc.and_kleene(pc.equal(ops, Op.READ), pc.fill_null(pc.not_equal(snapshots, INCREMENTAL_SNAPSHOT), True))
    initial = pc.fill_null(initial, False)
    if pc.all(initial).as_py():
        rows = len(ops)
    else:
        rows = int(pc.index(initial, False).as_py())
    passes = snapshot_passes(ops, snapshots, rows)
    if not rows:
        return InitialLoad(passes=passes)
    head = snapshots.slice(0, rows)
    first = pc.fill_null(pc.is_in(head, pa.array(PASS_FIRST)), False)
    last = pc.fill_null(pc.is_in(head, pa.array(PASS_LAST)), False)
    after_last = pa.concat_arrays([pa.array([False]), _combined(last).slice(0, rows - 1)])
    starts = pc.indices_nonzero(pc.or_(_combined(first), after_last)).to_pylist()
    return InitialLoad(
        rows=rows,
        pass_starts=tuple(int(i) for i in starts),
        ends_pass=bool(last[rows - 1].as_py()),
        complete=rows == len(ops),
        passes=passes,
    )


def snapshot_passes(ops: Column, snapshots: Column, leading: int) -> SnapshotPasses:
    """Where passes begin among rows of ``ops`` and (lower-case) ``snapshots``; ``leading`` initial-load rows."""
    named = pc.fill_null(pc.and_(pc.equal(ops, Op.READ), pc.is_in(snapshots, pa.array(SNAPSHOT_READS))), False)
    read = _combined(named).to_numpy(zero_copy_only=False)
    if not read.any():
        return SnapshotPasses()
    first = _combined(pc.fill_null(pc.is_in(snapshots, pa.array(PASS_FIRST)), False)).to_numpy(zero_copy_only=False)
    last = _combined(pc.fill_null(pc.is_in(snapshots, pa.array(PASS_LAST)), False)).to_numpy(zero_copy_only=False)
    first, last = first & read, last & read
    # A read after a row that is no such read, or after a pass's last read, begins a pass.
    after_other = read[1:] & (~read[:-1] | last[:-1])
    return SnapshotPasses(
        begins=bool(first.any() or after_other.any()),
        opens=bool(read[0]),
        ends_open=bool(read[-1] and not last[-1]),
        after_load=bool(read[leading:].any()),
    )


def _combined(column: Column) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


@dataclass(frozen=True)
class SourceShape:
    """The row columns of a table's latest event in the source, as its encoding tells them.

    The driver compares it with the columns the ledger saw last (``connector.publish.schema_changes``): a column
    gone or added there is a schema change, whatever the files hold (a file may lack a column for other reasons).
    """

    columns: tuple[str, ...]
    # Columns the encoding says are nullable with no default: added, their existing rows are NULL in the source
    # too. Schemaless JSON says nothing, so it names none.
    unfilled: frozenset[str] = frozenset()

    @classmethod
    def of_schema(cls, columns: Mapping[str, ColumnType]) -> SourceShape:
        """The shape an event's schema gives (JSON with schemas, Avro)."""
        return cls(tuple(columns), frozenset(name for name, ctype in columns.items() if ctype.filled is False))

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> SourceShape:
        """The shape a schemaless event's row gives: its field names only."""
        return cls(tuple(row))


@dataclass(frozen=True)
class PieceFacts:
    """What the driver needs to know of a piece besides its rows."""

    events: dict[str, int] = field(default_factory=dict)  # change events per op
    initial: InitialLoad = field(default_factory=InitialLoad)  # the leading initial-snapshot reads
    max_source_ts_ms: int | None = None  # the newest source time, for the lag metric
    connector: str | None = None  # the first ``source.connector`` named, for ``_partnerEvents.json``
    shape: SourceShape | None = None  # the columns of the piece's last event that had a row or a schema


Column: TypeAlias = pa.Array | pa.ChunkedArray  # noqa: UP040 - pyarrow has no type stubs


def piece_facts(
    ops: Column,
    ts_ms: Column,
    connectors: Column,
    initial: InitialLoad | None = None,
    shape: SourceShape | None = None,
) -> PieceFacts:
    """A piece's facts from its events' ``op``, ``ts_ms`` and ``source.connector`` (one value per event)."""
    events = {str(item["values"]): int(item["counts"]) for item in pc.value_counts(ops).to_pylist()}
    max_ts = pc.max(ts_ms).as_py() if len(ts_ms) else None
    named = pc.drop_null(connectors)
    named = named.filter(pc.not_equal(named, ""))
    return PieceFacts(
        events=events,
        initial=initial or InitialLoad(),
        max_source_ts_ms=max_ts if isinstance(max_ts, int) else None,
        connector=str(named[0].as_py()) if len(named) else None,
        shape=shape,
    )


@dataclass(frozen=True)
class CollectContext:
    """What a slice needs to know of the ledger: read-only, pickled to Spark's Python workers."""

    mirror: MirrorSettings
    source: SourceSettings = field(default_factory=SourceSettings)
    established: dict[str, pa.Schema] = field(default_factory=dict)
    key_columns: dict[str, tuple[str, ...]] = field(default_factory=dict)
    stopped: frozenset[str] = frozenset()
    # Tables being re-read by an incremental snapshot: its reads may follow a streamed change of the same row,
    # so creates and reads are upserts there whatever replay_safe_inserts says.
    upsert_tables: frozenset[str] = frozenset()
    defer_keep_last: bool = False
    # Tables whose folder holds a file with ``__rowMarker__``: their files never go back to marker-free.
    incremental: frozenset[str] = frozenset()
    # Keyless tables whose rebuild asked Debezium for a blocking snapshot that has shown no read yet, with when it
    # was asked (epoch ms): their events before its first read that Debezium processed before then were streamed
    # before it paused for the snapshot, so the snapshot holds what they did.
    awaiting_snapshot: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StagedFile:
    """One encoded file of a piece, written under its staged name in the table's folder, not yet numbered."""

    path: str
    rows: int
    size: int
    sha256: str
    has_marker: bool  # whether the file has the ``__rowMarker__`` column


@dataclass
class TablePiece:
    """One table's marked rows from one slice, in Kafka order, with what the driver needs to publish them."""

    ref: TableRef
    key_columns: tuple[str, ...]
    table: pa.Table | None
    first: Position
    facts: PieceFacts = field(default_factory=PieceFacts)
    recreate: bool = False  # a truncate (policy recreate) came first: earlier rows of the table are void
    # Once staged (``connector.collect.staging``): the files holding the rows, and their column types; the rows
    # themselves (``table``) are dropped, so only this metadata travels to the driver.
    files: tuple[StagedFile, ...] = ()
    schema: pa.Schema | None = None

    @property
    def rows(self) -> int:
        """Marked rows in the piece (in its staged files, once staged)."""
        return sum(f.rows for f in self.files) if self.table is None else self.table.num_rows

    @property
    def events(self) -> dict[str, int]:
        """Change events per op."""
        return self.facts.events

    @property
    def initial(self) -> InitialLoad:
        """The piece's leading initial-snapshot reads."""
        return self.facts.initial

    @property
    def max_source_ts_ms(self) -> int | None:
        """The newest source time of the piece's events."""
        return self.facts.max_source_ts_ms

    @property
    def connector(self) -> str | None:
        """The first ``source.connector`` the events name."""
        return self.facts.connector


@dataclass
class Collected:
    """The outcome of collecting one slice."""

    pieces: dict[str, TablePiece] = field(default_factory=dict)
    skipped: SkipCounts = field(default_factory=SkipCounts)
    stopped: dict[str, str] = field(default_factory=dict)
    stopped_refs: dict[str, TableRef] = field(default_factory=dict)
    stopped_topics: dict[str, str] = field(default_factory=dict)  # a rebuild signals Debezium by topic
    schema_stops: dict[str, str] = field(default_factory=dict)  # of ``stopped``, a schema change's kind
    resets: dict[str, str] = field(default_factory=dict)  # of ``stopped``, those the source reset: the cause
    # Tables a DDL in the schema change topic (MySQL/MariaDB) altered: their columns after it, and where it was.
    ddl: dict[str, tuple[SourceShape, Position]] = field(default_factory=dict)
    deferred: list[KafkaRecord] = field(default_factory=list)
    poison: list[DeadLetter] = field(default_factory=list)  # under poison_policy dead-letter
    problems: list[str] = field(default_factory=list)
    records: int = 0
    #: Collected by a retried attempt of its Spark task: an earlier attempt may have staged files (under names of
    #: its own) in these tables' folders, which no plan will name; the driver removes them once the batch commits.
    retried: bool = False

    def stop(self, tid: str, exc: TableStopped, ref: TableRef) -> None:
        """Record that ``tid`` stopped, and what kind of schema change (or reset) stopped it, if one did."""
        self.stopped[tid] = exc.reason
        self.stopped_refs[tid] = ref
        if isinstance(exc, SchemaChanged):
            self.schema_stops[tid] = exc.kind
        if isinstance(exc, TableReset):
            self.resets[tid] = exc.cause

    def staged_folders(self) -> set[str]:
        """The folders this slice's pieces were staged in."""
        return {piece.ref.folder for piece in self.pieces.values()}

    def absorb(self, other: Collected) -> Collected:
        """Add ``other``'s outcome (of tables this one does not hold: the lane's and the record path's) to this."""
        self.pieces.update(other.pieces)
        self.records += other.records
        for kind, count in other.skipped.by_kind.items():
            self.skipped.add(kind, count)
        self.stopped.update(other.stopped)
        self.stopped_refs.update(other.stopped_refs)
        self.stopped_topics.update(other.stopped_topics)
        self.schema_stops.update(other.schema_stops)
        self.resets.update(other.resets)
        self.ddl.update(other.ddl)
        self.deferred.extend(other.deferred)
        self.poison.extend(other.poison)
        self.problems.extend(other.problems)
        self.retried = self.retried or other.retried
        return self


def key_columns_for(
    table_id: str, key_fields: tuple[str, ...] | None, configured: list[str] | None, context: CollectContext
) -> tuple[str, ...] | None:
    """The one key-column rule of both paths; ``None`` when a table has none.

    The table's configured ``key_columns``, else the event's key fields, else the keys the ledger already holds
    for the table. Without any, the table is keyless: mirrored without keyColumns, inserts only.
    """
    if configured:
        return tuple(configured)
    return key_fields or context.key_columns.get(table_id) or None
