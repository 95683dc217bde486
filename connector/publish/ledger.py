"""The batch ledger: the connector's checkpointed file counter.

For each batch the sink stages its files, then writes a *plan* (which staged file becomes which
numbered file, and the table state after the batch), then renames the files into place, then
*commits* (replaces ``state.json`` and removes the plan). A crash anywhere leaves either no plan (the
batch is redone from scratch; staged files are orphans and are removed) or a plan (which is completed
exactly as written, whatever the replayed batch computes). So a file number is used once, files of a
table are continuous, and a replayed batch id never publishes a second copy.

The committed state also remembers, for the last ``SOURCE_HISTORY`` batches, the source offsets each
one published (what Spark's offsets log held for it): a batch id is only "already published" when
Spark's checkpoint still gives it the same offsets (``connector.publish.source_offsets``).
"""

from __future__ import annotations

import base64
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
PLANS_FOLDER = "ledger/plans"
TOAST_FOLDER = "ledger/toast"
#: Version 2 keeps a table's lifecycle in one ``lifecycle`` object; version 1 (flat ``stopped`` / ``rebuild*``
#: fields) is still read.
_VERSION = 2
#: Batches whose source offsets the state keeps. Spark keeps 100 offsets logs by default
#: (``spark.sql.streaming.minBatchesToRetain``) and only ever re-runs the last one.
SOURCE_HISTORY = 200
#: Data gaps the state keeps for audit (``connector.stream.data_loss_healing``); the oldest are dropped.
GAP_HISTORY = 100
#: Format of the ``data_gaps`` entry, versioned on its own so gap records can grow without a new ledger format.
_GAPS_VERSION = 1


@dataclass(frozen=True)
class TableState:
    """What the ledger knows of one table after the last committed batch."""

    folder: str
    next_number: int = 1
    key_columns: tuple[str, ...] = ()
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
        kind: ``retention``, ``recreated`` or ``partition-gone`` (``connector.stream.data_loss.LostRange``).
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
            "version": _VERSION,
            "last_committed_batch": self.last_committed_batch,
            "tables": {name: asdict(t) for name, t in sorted(self.tables.items())},
            "sources": [{"batch_id": s.batch_id, "offsets": list(s.offsets)} for s in self.sources],
            **({"resume_offsets": self.resume_offsets} if self.resume_offsets is not None else {}),
            **({"source_identity": self.source_identity} if self.source_identity is not None else {}),
            **(
                {"data_gaps": {"version": _GAPS_VERSION, "gaps": [asdict(g) for g in self.data_gaps]}}
                if self.data_gaps
                else {}
            ),
            **({"topic_ids": dict(sorted(self.topic_ids.items()))} if self.topic_ids else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LedgerState:
        """Parse the JSON form (this version's, or an older one).

        Raises:
            ValueError: a newer release wrote it (its lifecycle or fields may mean what this one cannot know).
        """
        version = int(data.get("version", 1))
        if version > _VERSION:
            msg = f"ledger format {version} was written by a newer release of the connector (this one reads {_VERSION})"
            raise ValueError(msg)
        tables = {}
        for name, raw in data.get("tables", {}).items():
            tables[name] = _table_from_json(raw)
        sources = tuple(
            BatchSource(int(s["batch_id"]), tuple(str(line) for line in s["offsets"])) for s in data.get("sources", ())
        )
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

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "batch_id": self.batch_id,
            "files": [asdict(f) for f in self.files],
            "state": self.state.to_json(),
            "recreated": list(self.recreated),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchPlan:
        """Parse the JSON form."""
        return cls(
            int(data["batch_id"]),
            tuple(PlannedFile(**f) for f in data["files"]),
            LedgerState.from_json(data["state"]),
            tuple(data.get("recreated", ())),
        )


class BatchLedger:
    """Reads and writes the ledger in the checkpoint storage."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.has_state = False
        self.state = self._load_state()

    def _load_state(self) -> LedgerState:
        try:
            raw = self.storage.read_bytes(STATE_FILE)
        except FileNotFoundError:
            return LedgerState()
        self.has_state = True
        try:
            return LedgerState.from_json(orjson.loads(raw))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            msg = (
                f"{self.storage.url}/{STATE_FILE} is unreadable ({exception_line(exc, with_type=True)}); restore it "
                "from a backup of the checkpoint, or start over with a new checkpoint and an emptied landing zone"
            )
            raise LandingZoneCorrupt(msg) from None

    def pending_plans(self) -> list[BatchPlan]:
        """Plans written but not committed, oldest first (at most one in normal operation)."""
        plans = []
        for info in self.storage.list_dir(PLANS_FOLDER):
            if info.is_dir or not info.path.endswith(".json"):
                continue
            plan = self._read_plan(info.path)
            if plan.batch_id <= self.state.last_committed_batch:
                self.storage.delete(info.path)  # committed; the crash came before its plan was removed
                continue
            plans.append(plan)
        return sorted(plans, key=lambda p: p.batch_id)

    def _read_plan(self, path: str) -> BatchPlan:
        try:
            return BatchPlan.from_json(orjson.loads(self.storage.read_bytes(path)))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            # A plan is replaced atomically, so a damaged one was changed outside the connector: which of its
            # files reached their numbered names is unknown, and guessing could leave a gap or a duplicate.
            msg = (
                f"{self.storage.url}/{path} (the plan of an interrupted batch) is unreadable "
                f"({exception_line(exc, with_type=True)}); restore it from a backup of the checkpoint, or start over "
                "with a new checkpoint and an emptied landing zone"
            )
            raise LandingZoneCorrupt(msg) from None

    def write_plan(self, plan: BatchPlan) -> None:
        """Persist ``plan`` before anything of it is published."""
        self.storage.replace(_plan_path(plan.batch_id), orjson.dumps(plan.to_json()))

    def commit(self, plan: BatchPlan) -> None:
        """Make the plan's state the committed state, then drop the plan and stale TOAST snapshots."""
        self.commit_state(plan.state)
        self.storage.delete(_plan_path(plan.batch_id))

    def commit_state(self, state: LedgerState) -> None:
        """Replace the committed state atomically."""
        previous = self.state
        self.storage.replace(STATE_FILE, orjson.dumps(state.to_json(), option=orjson.OPT_INDENT_2))
        self.state = state
        live = {t.toast_snapshot for t in state.tables.values() if t.toast_snapshot}
        for table in previous.tables.values():
            if table.toast_snapshot and table.toast_snapshot not in live:
                self.storage.delete(table.toast_snapshot)

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
