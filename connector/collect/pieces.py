"""What collecting a slice gives, whichever path collected it: marked pieces per table, and their facts.

``CollectContext`` is what a slice may read of the ledger; ``TablePiece`` one table's marked rows of the
slice; ``Collected`` a slice's pieces, skips, stops and dead letters. ``piece_facts`` is the one
definition of a piece's facts (events per op, snapshot-only, newest source time, connector), computed
from Arrow columns by the columnar lane and by the record path alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from connector.collect.ordering import Position
from connector.collect.poison import DeadLetter
from connector.config import MirrorSettings, SourceSettings
from connector.events import KafkaRecord, Op, SkipCounts
from connector.landing_zone import TableRef


@dataclass(frozen=True)
class PieceFacts:
    """What the driver needs to know of a piece besides its rows."""

    events: dict[str, int] = field(default_factory=dict)  # change events per op
    snapshot_only: bool = True  # every event is a snapshot read (the row marker may be omitted)
    max_source_ts_ms: int | None = None  # the newest source time, for the lag metric
    connector: str | None = None  # the first ``source.connector`` named, for ``_partnerEvents.json``


Column: TypeAlias = pa.Array | pa.ChunkedArray  # noqa: UP040 - pyarrow has no type stubs


def piece_facts(ops: Column, ts_ms: Column, connectors: Column) -> PieceFacts:
    """A piece's facts from its events' ``op``, ``ts_ms`` and ``source.connector`` (one value per event)."""
    events = {str(item["values"]): int(item["counts"]) for item in pc.value_counts(ops).to_pylist()}
    max_ts = pc.max(ts_ms).as_py() if len(ts_ms) else None
    named = pc.drop_null(connectors)
    named = named.filter(pc.not_equal(named, ""))
    return PieceFacts(
        events=events,
        snapshot_only=set(events) == {Op.READ},
        max_source_ts_ms=max_ts if isinstance(max_ts, int) else None,
        connector=str(named[0].as_py()) if len(named) else None,
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
    # Once staged (``connector.publish.staging``): the files holding the rows, and their column types; the rows
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
    def snapshot_only(self) -> bool:
        """Whether every event is a snapshot read."""
        return self.facts.snapshot_only

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
    deferred: list[KafkaRecord] = field(default_factory=list)
    poison: list[DeadLetter] = field(default_factory=list)  # under poison_policy dead-letter
    problems: list[str] = field(default_factory=list)
    records: int = 0

    def absorb(self, other: Collected) -> Collected:
        """Add ``other``'s outcome (of tables this one does not hold: the lane's and the record path's) to this."""
        self.pieces.update(other.pieces)
        self.records += other.records
        for kind, count in other.skipped.by_kind.items():
            self.skipped.add(kind, count)
        self.stopped.update(other.stopped)
        self.stopped_refs.update(other.stopped_refs)
        self.stopped_topics.update(other.stopped_topics)
        self.deferred.extend(other.deferred)
        self.poison.extend(other.poison)
        self.problems.extend(other.problems)
        return self
