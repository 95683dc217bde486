"""The batch ledger's model: what the connector has published, table by table, and what a batch will publish.

The committed state (``LedgerState``) also remembers, for the last ``SOURCE_HISTORY`` batches, the source offsets
each one published (what Spark's offsets log held for it): a batch id is only "already published" when Spark's
checkpoint still gives it the same offsets (``connector.publish.source_offsets``). Its files and their format are
``ledger_format``; reading and writing them, ``ledger.BatchLedger``.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field, replace

import pyarrow as pa

from connector.config import MirrorSettings
from connector.publish.lifecycle import Lifecycle

#: Batches whose source offsets the state keeps. Spark keeps 100 offsets logs by default
#: (``spark.sql.streaming.minBatchesToRetain``) and only ever re-runs the last one.
SOURCE_HISTORY = 200
#: Data gaps the state keeps for audit (``connector.healing.data_loss_healing``); the oldest are dropped.
GAP_HISTORY = 100


@dataclass(frozen=True)
class TableState:
    """What the ledger knows of one table after the last committed batch."""

    folder: str
    next_number: int = 1
    key_columns: tuple[str, ...] = ()
    # Published without keyColumns (no key in the source nor in ``key_columns``): inserts only. Kept through a
    # rebuild (which empties ``key_columns``), whose snapshot must then be a blocking one (``publish.rebuild``).
    keyless: bool = False
    # A keyless table rebuilt: the blocking snapshot asked for has not shown a read yet (``publish.initial_load``).
    snapshot_expected: bool = False
    schema: str | None = None  # base64 Arrow IPC schema of the data columns
    incremental: bool = False  # a file with __rowMarker__ has been published
    # The initial load (``mirror.initial_load``): ended once an event other than an initial-snapshot read was
    # published (or the table was rebuilt); whether the last read published ended a snapshot pass of the table;
    # rows published in files without __rowMarker__.
    initial_load_ended: bool = False
    snapshot_pass_ended: bool = False
    marker_free_rows: int = 0
    toast_snapshot: str | None = None  # checkpoint path of the keep-last store
    topic: str | None = None  # the Kafka topic its events come from (a rebuild signals Debezium for it)
    rows_published: int = 0
    files_published: int = 0
    last_published_at: float | None = None  # epoch seconds of the last batch that published a file
    lifecycle: Lifecycle = Lifecycle()  # running, stopped, rebuilding, refreshing (``publish.lifecycle``)
    # The source's row columns at the table's last published event (``publish.schema_changes``); ``None`` until
    # one is seen (and in a ledger written before they were recorded).
    source_columns: tuple[str, ...] | None = None
    # Columns a refresh begun at DDL time (MySQL/MariaDB's schema change topic) re-reads: when the table's own events
    # show them added, they need no second refresh.
    ddl_refreshed: tuple[str, ...] = ()

    def with_stop(self, reason: str, mirror: MirrorSettings, *, rebuild: bool | None = None) -> TableState:
        """A copy stopped for ``reason``, or with its automatic rebuild begun (``Lifecycle.stop``)."""
        return replace(self, lifecycle=self.lifecycle.stop(reason, mirror, now=time.time(), rebuild=rebuild))

    def arrow_schema(self) -> pa.Schema | None:
        """The established column types, ``None`` before the first file."""
        if self.schema is None:
            return None
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.schema)))

    def with_schema(self, schema: pa.Schema) -> TableState:
        """A copy with ``schema`` established."""
        encoded = base64.b64encode(schema.serialize().to_pybytes()).decode()
        return replace(self, schema=encoded)


@dataclass(frozen=True)
class BatchSource:
    """What one committed batch read from its source: Spark's offsets log lines for it, verbatim.

    For Kafka a line is the end offsets JSON (``{"topic": {"0": 42}}``); the start is the previous
    batch's end. For the file source it is the file log offset (``{"logOffset": 3}``).
    """

    batch_id: int
    offsets: tuple[str, ...]
    # Each topic's Kafka id (KIP-516) when the batch was planned: kept once in ``LedgerState.topic_ids`` (not per
    # batch), so a topic deleted and created again is told apart even when its new log reaches past these offsets.
    topic_ids: tuple[tuple[str, str], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class DataGap:
    """Offsets of one partition Kafka no longer held, and the table rebuilt for them (invariant 12, docs/guarantees.md).

    Recorded in the same commit that begins the table's rebuild and before Spark reads past the gap, so a gap is
    never skipped without a record of it and of its table's rebuild, whatever instant the job dies at.

    Attributes:
        table: The table id the partition carries; ``None`` for a partition that carries no table (Debezium's
            heartbeats), which is read on past without a rebuild.
        topic: The topic.
        partition: The partition number.
        first: The first offset lost (the next one the mirror expected).
        last: The last offset lost (inclusive); ``None`` when the log that held them is gone.
        kind: ``retention``, ``recreated`` or ``partition-gone`` (``connector.healing.data_loss.LostRange``).
        detected_at: Epoch seconds of the start-up that found it.
    """

    table: str | None
    topic: str
    partition: int
    first: int
    last: int | None
    kind: str
    detected_at: float

    @property
    def key(self) -> tuple[str, int, int]:
        """``(topic, partition, first)``: the same gap found again after a crash is the same record."""
        return (self.topic, self.partition, self.first)

    def describe(self) -> str:
        """``topic[p]@first..last``, as the table's rebuild reason and the logs name it."""
        return f"{self.topic}[{self.partition}]@{self.first}..{'' if self.last is None else self.last}"


@dataclass(frozen=True)
class LedgerState:
    """The committed state: last batch id, every table's state, and the recent batches' source offsets."""

    last_committed_batch: int = -1
    tables: dict[str, TableState] = field(default_factory=dict)
    sources: tuple[BatchSource, ...] = ()
    # Kafka end offsets a new Spark checkpoint starts from (``run --resume-from-ledger``), until its first commit.
    resume_offsets: str | None = None
    # The Debezium source this checkpoint mirrors (``connector.publish.source_identity``): its topic prefix and
    # the source databases seen, JSON; ``None`` in a state written before it was recorded.
    source_identity: str | None = None
    # The last ``GAP_HISTORY`` gaps in the Kafka log the mirror read past, oldest first (``DataGap``).
    data_gaps: tuple[DataGap, ...] = ()
    # Each topic's Kafka id as of the last committed batch (``BatchSource.topic_ids``); empty in a state written
    # before ids were recorded, which is continued: ids are recorded from its next commit on.
    topic_ids: dict[str, str] = field(default_factory=dict)

    def source(self, batch_id: int) -> BatchSource | None:
        """The recorded source offsets of ``batch_id``, ``None`` when not recorded (or too old)."""
        return next((s for s in self.sources if s.batch_id == batch_id), None)

    def with_source(self, source: BatchSource) -> LedgerState:
        """A copy recording ``source`` (replacing an entry of the same batch id), keeping the last few."""
        kept = [s for s in self.sources if s.batch_id != source.batch_id]
        kept.append(source)
        kept.sort(key=lambda s: s.batch_id)
        return replace(self, sources=tuple(kept[-SOURCE_HISTORY:])).with_topic_ids(dict(source.topic_ids))

    def with_topic_ids(self, ids: dict[str, str]) -> LedgerState:
        """A copy recording ``ids`` over the known ones; a topic not described now keeps its recorded id."""
        if all(self.topic_ids.get(topic) == topic_id for topic, topic_id in ids.items()):
            return self
        return replace(self, topic_ids={**self.topic_ids, **ids})

    def has_gap(self, topic: str, partition: int, first: int) -> bool:
        """Whether the gap starting at ``topic[partition]@first`` is recorded already (found before a crash)."""
        return any(g.key == (topic, partition, first) for g in self.data_gaps)

    def with_gaps(self, gaps: tuple[DataGap, ...]) -> LedgerState:
        """A copy recording ``gaps`` after the known ones (one record per gap), keeping the last ``GAP_HISTORY``."""
        known = {g.key for g in self.data_gaps}
        added = tuple(g for g in gaps if g.key not in known)
        return replace(self, data_gaps=(self.data_gaps + added)[-GAP_HISTORY:])


@dataclass(frozen=True)
class PlannedFile:
    """One file of a plan: where it is staged, its final name, and what it must contain."""

    table: str
    number: int
    staged: str
    final: str
    size: int
    sha256: str
    rows: int
    marker_free: bool = False  # the file has no __rowMarker__ (an initial load's whole-file inserts)


@dataclass(frozen=True)
class BatchPlan:
    """Everything a batch will publish, written before the first rename."""

    batch_id: int
    files: tuple[PlannedFile, ...]
    state: LedgerState
    recreated: tuple[str, ...] = ()
