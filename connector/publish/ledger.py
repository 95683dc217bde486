"""The batch ledger: the connector's checkpointed file counter.

For each batch the sink stages its files, then writes a *plan* (which staged file becomes which
numbered file, and what the batch changes in the state), then renames the files into place, then
*commits* (writes what changed and a new head, and removes the plan). A crash anywhere leaves either no
plan (the batch is redone from scratch; staged files are orphans and are removed) or a plan (which is
completed exactly as written, whatever the replayed batch computes). So a file number is used once, files
of a table are continuous, and a replayed batch id never publishes a second copy.

The committed state also remembers, for the last ``SOURCE_HISTORY`` batches, the source offsets each
one published (what Spark's offsets log held for it): a batch id is only "already published" when
Spark's checkpoint still gives it the same offsets (``connector.publish.source_offsets``).

On disk (format 3), under ``ledger/``, a batch costs what it changed, not what the ledger holds:

- ``state.json``, the *head*: the last committed batch, which batches' source offsets are kept, the data gaps,
  the source identity, and the *segments* holding the rest, oldest first. Replacing it is the commit.
- ``segments/<generation>.json``: what one commit changed: its changed and removed tables, the source offsets of
  its batch, changed topic ids. Written under a new name before the head that lists it and never rewritten, so
  the head stays the one atomic write of a commit (``commit_state`` too) and a reader beside the job (``tables``)
  never sees half a commit. When the segments after the first listed (the *base*) would hold more than it, or
  ``MAX_SEGMENTS`` are listed, a commit writes the whole state as a new base instead and deletes the unlisted
  segments: the whole state is rewritten once per ``MAX_SEGMENTS`` commits, or sooner when the batches since
  changed as much as it holds, and loading reads at most that many files, about twice the state's size.
- ``plans/<batch>.json``: a batch's files, its head and its changes against the committed state.

Not a file per table: each is one durable write (two fsyncs, 0.5-0.7 ms on a local disk), so a batch of 100
changed tables would cost what rewriting all 1,000 did; replaced in place, they would also need a journal to
keep ``commit_state`` atomic. The source offsets go in segments too: with 1,000 topics each batch's are 45 kB,
and ``SOURCE_HISTORY`` of them in the head would be rewritten every batch. Formats 1 and 2 (the whole state in
``state.json``, whole-state plans) are read; the next commit writes a base.
"""

from __future__ import annotations

import base64
import errno
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson
import pyarrow as pa

from connector.config import MirrorSettings
from connector.errors import LandingZoneCorrupt, exception_line
from connector.publish.lifecycle import V1_FIELDS, Lifecycle
from connector.storage.base import Storage

STATE_FILE = "ledger/state.json"
SEGMENTS_FOLDER = "ledger/segments"
PLANS_FOLDER = "ledger/plans"
TOAST_FOLDER = "ledger/toast"
#: Format 3 is the head and its segments. Format 2 kept the whole state in ``state.json``, still its JSON form
#: (``LedgerState.to_json``); format 1 (flat ``stopped`` / ``rebuild*`` fields, not a ``lifecycle``) is still read.
_VERSION = 3
_WHOLE_VERSION = 2
#: Segments a head lists at most, the base included, before a commit writes a new base.
MAX_SEGMENTS = 64
#: Reads of the head a reader makes when a commit beside it removed the segments it was reading.
_LOAD_ATTEMPTS = 3
#: Batches whose source offsets the state keeps. Spark keeps 100 offsets logs by default
#: (``spark.sql.streaming.minBatchesToRetain``) and only ever re-runs the last one.
SOURCE_HISTORY = 200
#: Data gaps the state keeps for audit (``connector.healing.data_loss_healing``); the oldest are dropped.
GAP_HISTORY = 100
#: Format of the ``data_gaps`` entry, versioned on its own so gap records can grow without a new ledger format.
_GAPS_VERSION = 1


@dataclass(frozen=True)
class TableState:
    """What the ledger knows of one table after the last committed batch."""

    folder: str
    next_number: int = 1
    key_columns: tuple[str, ...] = ()
    # Published without keyColumns (no key in the source nor in ``key_columns``): inserts only. Kept through a
    # rebuild (which empties ``key_columns``), whose snapshot must then be a blocking one (``operate.rebuild``).
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
    """Offsets of one partition Kafka no longer held, and the table rebuilt for them (design invariant 12).

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

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "version": _WHOLE_VERSION,
            "last_committed_batch": self.last_committed_batch,
            "tables": {name: asdict(t) for name, t in sorted(self.tables.items())},
            "sources": [_source_to_json(s) for s in self.sources],
            **({"resume_offsets": self.resume_offsets} if self.resume_offsets is not None else {}),
            **({"source_identity": self.source_identity} if self.source_identity is not None else {}),
            **({"data_gaps": _gaps_to_json(self.data_gaps)} if self.data_gaps else {}),
            **({"topic_ids": dict(sorted(self.topic_ids.items()))} if self.topic_ids else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LedgerState:
        """Parse the JSON form (this version's, or an older one).

        Raises:
            ValueError: a newer release wrote it (its lifecycle or fields may mean what this one cannot know).
        """
        version = int(data.get("version", 1))
        if version > _WHOLE_VERSION:
            msg = (
                f"ledger format {version} was written by a newer release of the connector "
                f"(this one reads {_WHOLE_VERSION})"
            )
            raise ValueError(msg)
        tables = {}
        for name, raw in data.get("tables", {}).items():
            tables[name] = _table_from_json(raw)
        sources = tuple(_source_from_json(s) for s in data.get("sources", ()))
        resume = data.get("resume_offsets")
        identity = data.get("source_identity")
        return cls(
            int(data["last_committed_batch"]),
            tables,
            sources,
            None if resume is None else str(resume),
            source_identity=None if identity is None else str(identity),
            data_gaps=_gaps_from_json(data.get("data_gaps")),
            topic_ids={str(t): str(i) for t, i in (data.get("topic_ids") or {}).items()},
        )


@dataclass(frozen=True)
class StateChanges:
    """What one commit (or a plan) changes in the state: a segment's content.

    Tables, source offsets and topic ids are written only when they differ from the state before, and applied
    over it in order; which batches' offsets the state keeps is the head's (``StateHead.source_batches``).
    """

    tables: dict[str, TableState] = field(default_factory=dict)
    removed_tables: tuple[str, ...] = ()
    sources: tuple[BatchSource, ...] = ()  # offsets of batches new to the state, or recorded again
    topic_ids: dict[str, str] = field(default_factory=dict)
    removed_topic_ids: tuple[str, ...] = ()

    @classmethod
    def between(cls, before: LedgerState, after: LedgerState) -> StateChanges:
        """What changed from ``before`` to ``after``; unchanged tables are mostly the same objects (cheap to tell)."""
        recorded = {s.batch_id: s for s in before.sources}
        return cls(
            tables={tid: t for tid, t in after.tables.items() if not _same(before.tables.get(tid), t)},
            removed_tables=tuple(sorted(before.tables.keys() - after.tables.keys())),
            sources=tuple(s for s in after.sources if recorded.get(s.batch_id) != s),
            topic_ids={t: i for t, i in after.topic_ids.items() if before.topic_ids.get(t) != i},
            removed_topic_ids=tuple(sorted(before.topic_ids.keys() - after.topic_ids.keys())),
        )

    @classmethod
    def whole(cls, state: LedgerState) -> StateChanges:
        """All of ``state``: a base segment."""
        return cls.between(LedgerState(), state)

    def __bool__(self) -> bool:
        return bool(self.tables or self.removed_tables or self.sources or self.topic_ids or self.removed_topic_ids)

    def apply_to(self, parts: StateParts) -> None:
        """Apply over ``parts``, in place."""
        for tid in self.removed_tables:
            parts.tables.pop(tid, None)
        parts.tables.update(self.tables)
        parts.sources.update((s.batch_id, s) for s in self.sources)
        for topic in self.removed_topic_ids:
            parts.topic_ids.pop(topic, None)
        parts.topic_ids.update(self.topic_ids)

    def to_json(self) -> dict[str, Any]:
        """JSON form, without what is empty."""
        return {
            **({"tables": {tid: asdict(t) for tid, t in sorted(self.tables.items())}} if self.tables else {}),
            **({"removed_tables": list(self.removed_tables)} if self.removed_tables else {}),
            **({"sources": [_source_to_json(s) for s in self.sources]} if self.sources else {}),
            **({"topic_ids": dict(sorted(self.topic_ids.items()))} if self.topic_ids else {}),
            **({"removed_topic_ids": list(self.removed_topic_ids)} if self.removed_topic_ids else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StateChanges:
        """Parse the JSON form."""
        return cls(
            tables={str(tid): _table_from_json(raw) for tid, raw in data.get("tables", {}).items()},
            removed_tables=tuple(str(tid) for tid in data.get("removed_tables", ())),
            sources=tuple(_source_from_json(s) for s in data.get("sources", ())),
            topic_ids={str(t): str(i) for t, i in data.get("topic_ids", {}).items()},
            removed_topic_ids=tuple(str(t) for t in data.get("removed_topic_ids", ())),
        )


@dataclass
class StateParts:
    """The state's tables, recorded source offsets (by batch id) and topic ids, as segments are applied."""

    tables: dict[str, TableState] = field(default_factory=dict)
    sources: dict[int, BatchSource] = field(default_factory=dict)
    topic_ids: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, state: LedgerState) -> StateParts:
        """The parts of ``state``, copied."""
        return cls(dict(state.tables), {s.batch_id: s for s in state.sources}, dict(state.topic_ids))


@dataclass(frozen=True)
class StateHead:
    """The small part of the state, written whole with every commit (in ``state.json``) and plan."""

    last_committed_batch: int = -1
    source_batches: tuple[int, ...] = ()  # the batches whose offsets the state keeps, oldest first
    resume_offsets: str | None = None
    source_identity: str | None = None
    data_gaps: tuple[DataGap, ...] = ()

    @classmethod
    def of(cls, state: LedgerState) -> StateHead:
        """The head of ``state``."""
        batches = tuple(s.batch_id for s in state.sources)
        return cls(state.last_committed_batch, batches, state.resume_offsets, state.source_identity, state.data_gaps)

    def state(self, parts: StateParts) -> LedgerState:
        """The whole state: this head over ``parts``, tables and topic ids in name order as format 2 read back.

        Raises:
            KeyError: a batch whose offsets the head keeps is in no segment.
        """
        return LedgerState(
            self.last_committed_batch,
            dict(sorted(parts.tables.items())),
            tuple(parts.sources[batch] for batch in self.source_batches),
            self.resume_offsets,
            source_identity=self.source_identity,
            data_gaps=self.data_gaps,
            topic_ids=dict(sorted(parts.topic_ids.items())),
        )

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "last_committed_batch": self.last_committed_batch,
            "source_batches": list(self.source_batches),
            **({"resume_offsets": self.resume_offsets} if self.resume_offsets is not None else {}),
            **({"source_identity": self.source_identity} if self.source_identity is not None else {}),
            **({"data_gaps": _gaps_to_json(self.data_gaps)} if self.data_gaps else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StateHead:
        """Parse the JSON form."""
        resume = data.get("resume_offsets")
        identity = data.get("source_identity")
        return cls(
            int(data["last_committed_batch"]),
            tuple(int(batch) for batch in data["source_batches"]),
            None if resume is None else str(resume),
            None if identity is None else str(identity),
            _gaps_from_json(data.get("data_gaps")),
        )


@dataclass(frozen=True)
class Segment:
    """A segment file the head lists, and its size (which tells when a new base is due)."""

    file: str
    size: int

    @property
    def path(self) -> str:
        """Its path in the checkpoint storage."""
        return f"{SEGMENTS_FOLDER}/{self.file}"


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

    def to_json(self, committed: LedgerState) -> dict[str, Any]:
        """JSON form: the state as its head and its changes from ``committed``, the state it was planned on."""
        return {
            "version": _VERSION,
            "batch_id": self.batch_id,
            "files": [asdict(f) for f in self.files],
            "head": StateHead.of(self.state).to_json(),
            "changes": StateChanges.between(committed, self.state).to_json(),
            "recreated": list(self.recreated),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], committed: LedgerState) -> BatchPlan:
        """Parse the JSON form, its changes applied over ``committed`` (a format 2 plan holds the whole state).

        Raises:
            ValueError: a newer release wrote it.
        """
        version = int(data.get("version", _WHOLE_VERSION))
        if version > _VERSION:
            msg = f"plan format {version} was written by a newer release of the connector (this one reads {_VERSION})"
            raise ValueError(msg)
        if version <= _WHOLE_VERSION:
            state = LedgerState.from_json(data["state"])
        else:
            parts = StateParts.of(committed)
            StateChanges.from_json(data["changes"]).apply_to(parts)
            state = StateHead.from_json(data["head"]).state(parts)
        return cls(
            int(data["batch_id"]),
            tuple(PlannedFile(**f) for f in data["files"]),
            state,
            tuple(data.get("recreated", ())),
        )


#: What a damaged ledger file raises when parsed.
_UNREADABLE = (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError)


class BatchLedger:
    """Reads and writes the ledger in the checkpoint storage."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.has_state = False
        self._generation = 0  # of the newest segment the head lists (segments are named by it)
        self._segments: tuple[Segment, ...] | None = ()  # ``None``: a format 1 or 2 state, whole in ``state.json``
        self.state = self._load_state()

    def _load_state(self) -> LedgerState:
        for _ in range(_LOAD_ATTEMPTS):
            try:
                raw = self.storage.read_bytes(STATE_FILE)
            except FileNotFoundError:
                return LedgerState()
            self.has_state = True
            try:
                data = orjson.loads(raw)
                version = int(data.get("version", 1))
                if version <= _WHOLE_VERSION:
                    self._segments = None
                    return LedgerState.from_json(data)
                if version > _VERSION:
                    msg = (
                        f"ledger format {version} was written by a newer release of the connector "
                        f"(this one reads {_VERSION})"
                    )
                    raise ValueError(msg)
                head = StateHead.from_json(data)
                generation = int(data["generation"])
                segments = tuple(Segment(str(s["file"]), int(s["size"])) for s in data["segments"])
            except _UNREADABLE as exc:
                raise self._corrupt(STATE_FILE, exc) from None
            try:
                parts = StateParts()
                for segment in segments:
                    self._read_segment(segment).apply_to(parts)
            except FileNotFoundError as exc:
                if self._head_unchanged(raw):
                    msg = (
                        f"{self.storage.url}/{exc.filename or 'a segment'}, which {STATE_FILE} lists, is missing: "
                        "restore the ledger folder from a backup of the checkpoint, or start over with a new "
                        "checkpoint and an emptied landing zone"
                    )
                    raise LandingZoneCorrupt(msg) from None
                continue  # a commit beside this reader wrote a new base and removed them: read its head
            try:
                state = head.state(parts)
            except KeyError as exc:
                raise self._corrupt(STATE_FILE, exc) from None
            self._generation, self._segments = generation, segments
            return state
        msg = f"{self.storage.url}/{STATE_FILE} changed under each of {_LOAD_ATTEMPTS} reads of the ledger; try again"
        raise LandingZoneCorrupt(msg)

    def _head_unchanged(self, raw: bytes) -> bool:
        try:
            return self.storage.read_bytes(STATE_FILE) == raw
        except FileNotFoundError:
            return False

    def _read_segment(self, segment: Segment) -> StateChanges:
        """Its changes; ``FileNotFoundError`` (naming it) when it is gone."""
        try:
            raw = self.storage.read_bytes(segment.path)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "segment not found", segment.path) from None
        try:
            return StateChanges.from_json(orjson.loads(raw))
        except _UNREADABLE as exc:
            raise self._corrupt(segment.path, exc) from None

    def _corrupt(self, path: str, exc: Exception) -> LandingZoneCorrupt:
        msg = (
            f"{self.storage.url}/{path} is unreadable ({exception_line(exc, with_type=True)}); restore the ledger "
            "folder from a backup of the checkpoint, or start over with a new checkpoint and an emptied landing zone"
        )
        return LandingZoneCorrupt(msg)

    def pending_plans(self) -> list[BatchPlan]:
        """Plans written but not committed, oldest first (at most one in normal operation).

        A plan holds its changes from the state it was planned on: the committed state, as no commit comes
        between a plan and its own.
        """
        plans = []
        for info in self.storage.list_dir(PLANS_FOLDER):
            if info.is_dir or not info.path.endswith(".json"):
                continue
            plan = self._read_plan(info.path, self.state)
            if plan.batch_id <= self.state.last_committed_batch:
                self.storage.delete(info.path)  # committed; the crash came before its plan was removed
                continue
            plans.append(plan)
        return sorted(plans, key=lambda p: p.batch_id)

    def _read_plan(self, path: str, committed: LedgerState) -> BatchPlan:
        try:
            return BatchPlan.from_json(orjson.loads(self.storage.read_bytes(path)), committed)
        except _UNREADABLE as exc:
            # A plan is replaced atomically, so a damaged one was changed outside the connector: which of its
            # files reached their numbered names is unknown, and guessing could leave a gap or a duplicate.
            msg = (
                f"{self.storage.url}/{path} (the plan of an interrupted batch) is unreadable "
                f"({exception_line(exc, with_type=True)}); restore it from a backup of the checkpoint, or start over "
                "with a new checkpoint and an emptied landing zone"
            )
            raise LandingZoneCorrupt(msg) from None

    def write_plan(self, plan: BatchPlan) -> None:
        """Persist ``plan`` (planned on the committed state) before anything of it is published."""
        self.storage.replace(_plan_path(plan.batch_id), orjson.dumps(plan.to_json(self.state)))

    def commit(self, plan: BatchPlan) -> None:
        """Make the plan's state the committed state, then drop the plan and stale TOAST snapshots."""
        self.commit_state(plan.state)
        self.storage.delete(_plan_path(plan.batch_id))

    def commit_state(self, state: LedgerState) -> None:
        """Make ``state`` the committed state atomically: a segment of what changed, then the head.

        A crash before the head is written leaves the previous state (the segment, listed by no head, is written
        again by the next commit); after it, the new one.
        """
        previous = self.state
        changes = StateChanges.between(previous, state)
        segments, generation, based = self._segments, self._generation, False
        if changes or segments is None:
            encoded = orjson.dumps(changes.to_json())
            if segments is None or _base_due(segments, len(encoded)):
                encoded, segments, based = orjson.dumps(StateChanges.whole(state).to_json()), (), True
            generation += 1
            segment = Segment(f"{generation:020d}.json", len(encoded))
            self.storage.replace(segment.path, encoded)
            segments = (*segments, segment)
        head = {"version": _VERSION, **StateHead.of(state).to_json(), "generation": generation}
        head["segments"] = [asdict(s) for s in segments]
        self.storage.replace(STATE_FILE, orjson.dumps(head, option=orjson.OPT_INDENT_2))
        self.state, self._segments, self._generation = state, segments, generation
        if based:
            self._remove_unlisted_segments()
        self._remove_stale_toast_snapshots(previous, changes)

    def _remove_unlisted_segments(self) -> None:
        """After a new base: the segments it replaced, and any a crash left unlisted."""
        listed = {s.path for s in self._segments or ()}
        for info in self.storage.list_dir(SEGMENTS_FOLDER):
            if not info.is_dir and info.path.endswith(".json") and info.path not in listed:
                self.storage.delete(info.path)

    def _remove_stale_toast_snapshots(self, previous: LedgerState, changes: StateChanges) -> None:
        """Delete the TOAST snapshots of the previous state no table refers to any more (only changed tables')."""
        stale = set()
        for tid in (*changes.tables, *changes.removed_tables):
            table = previous.tables.get(tid)
            if table is not None and table.toast_snapshot:
                stale.add(table.toast_snapshot)
        if stale:
            live = {t.toast_snapshot for t in self.state.tables.values() if t.toast_snapshot}
            for path in sorted(stale - live):
                self.storage.delete(path)

    def write_toast_snapshot(self, table_id: str, batch_id: int, data: bytes) -> str:
        """Store a keep-last TOAST store for ``table_id`` as of ``batch_id``; returns its path."""
        path = f"{TOAST_FOLDER}/{table_id}/{batch_id}.json"
        live = {t.toast_snapshot for t in self.state.tables.values()}
        # Batch ids restart after ``run --resume-from-ledger``: never overwrite the committed snapshot.
        retry = 0
        while path in live:
            retry += 1
            path = f"{TOAST_FOLDER}/{table_id}/{batch_id}-{retry}.json"
        self.storage.replace(path, data)
        return path

    def read_toast_snapshot(self, path: str) -> bytes:
        """Read a TOAST store snapshot written by ``write_toast_snapshot``."""
        return self.storage.read_bytes(path)


def _base_due(segments: tuple[Segment, ...], size: int) -> bool:
    """Whether a commit of ``size`` bytes writes a new base instead.

    So it does when there is none yet, when ``MAX_SEGMENTS`` are listed, or when the segments after the base would
    hold more than it: loading reads at most about twice the state.
    """
    if not segments or len(segments) >= MAX_SEGMENTS:
        return True
    return sum(s.size for s in segments[1:]) + size > segments[0].size


def _same(before: TableState | None, after: TableState) -> bool:
    """Whether a table is unchanged: most are the very object the state before held."""
    return before is after or before == after


def _table_from_json(raw: dict[str, Any]) -> TableState:
    fields = {k: v for k, v in raw.items() if k not in V1_FIELDS}
    fields["key_columns"] = tuple(raw.get("key_columns", ()))
    if raw.get("source_columns") is not None:
        fields["source_columns"] = tuple(raw["source_columns"])
    fields["ddl_refreshed"] = tuple(raw.get("ddl_refreshed", ()))
    if "lifecycle" in raw:
        fields["lifecycle"] = Lifecycle.from_json(raw["lifecycle"])
    else:
        fields["lifecycle"] = Lifecycle.from_v1_fields(raw)
    return TableState(**fields)


def _source_to_json(source: BatchSource) -> dict[str, Any]:
    return {"batch_id": source.batch_id, "offsets": list(source.offsets)}


def _source_from_json(raw: dict[str, Any]) -> BatchSource:
    return BatchSource(int(raw["batch_id"]), tuple(str(line) for line in raw["offsets"]))


def _gaps_to_json(gaps: tuple[DataGap, ...]) -> dict[str, Any]:
    return {"version": _GAPS_VERSION, "gaps": [asdict(g) for g in gaps]}


def _gaps_from_json(raw: dict[str, Any] | None) -> tuple[DataGap, ...]:
    """The recorded gaps; a newer gap format is refused rather than dropped (they are an audit record)."""
    if raw is None:
        return ()
    version = int(raw.get("version", 1))
    if version > _GAPS_VERSION:
        msg = f"data gap records format {version} were written by a newer release (this one reads {_GAPS_VERSION})"
        raise ValueError(msg)
    return tuple(
        DataGap(
            table=None if g.get("table") is None else str(g["table"]),
            topic=str(g["topic"]),
            partition=int(g["partition"]),
            first=int(g["first"]),
            last=None if g.get("last") is None else int(g["last"]),
            kind=str(g["kind"]),
            detected_at=float(g["detected_at"]),
        )
        for g in raw["gaps"]
    )


def _plan_path(batch_id: int) -> str:
    return f"{PLANS_FOLDER}/{batch_id:020d}.json"
