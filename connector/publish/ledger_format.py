"""The batch ledger's files in the checkpoint storage: their layout, JSON forms and format versions.

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

from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from connector.publish.ledger_state import BatchPlan, BatchSource, DataGap, LedgerState, PlannedFile, TableState
from connector.publish.lifecycle import V1_FIELDS, Lifecycle

STATE_FILE = "ledger/state.json"
SEGMENTS_FOLDER = "ledger/segments"
PLANS_FOLDER = "ledger/plans"
TOAST_FOLDER = "ledger/toast"
#: Format 3 is the head and its segments. Format 2 kept the whole state in ``state.json``, still its JSON form
#: (``state_to_json``); format 1 (flat ``stopped`` / ``rebuild*`` fields, not a ``lifecycle``) is still read.
_VERSION = 3
_WHOLE_VERSION = 2
#: Segments a head lists at most, the base included, before a commit writes a new base.
MAX_SEGMENTS = 64
#: Format of the ``data_gaps`` entry, versioned on its own so gap records can grow without a new ledger format.
_GAPS_VERSION = 1
#: What a damaged ledger file raises when parsed.
UNREADABLE = (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError)


def state_to_json(state: LedgerState) -> dict[str, Any]:
    """A whole state's JSON form (format 2: ``state.json`` before format 3, still a format 2 plan's ``state``)."""
    return {
        "version": _WHOLE_VERSION,
        "last_committed_batch": state.last_committed_batch,
        "tables": {name: asdict(t) for name, t in sorted(state.tables.items())},
        "sources": [_source_to_json(s) for s in state.sources],
        **({"resume_offsets": state.resume_offsets} if state.resume_offsets is not None else {}),
        **({"source_identity": state.source_identity} if state.source_identity is not None else {}),
        **({"data_gaps": _gaps_to_json(state.data_gaps)} if state.data_gaps else {}),
        **({"topic_ids": dict(sorted(state.topic_ids.items()))} if state.topic_ids else {}),
    }


def state_from_json(data: dict[str, Any]) -> LedgerState:
    """Parse the JSON form (this version's, or an older one).

    Raises:
        ValueError: a newer release wrote it (its lifecycle or fields may mean what this one cannot know).
    """
    version = int(data.get("version", 1))
    if version > _WHOLE_VERSION:
        msg = (
            f"ledger format {version} was written by a newer release of the connector (this one reads {_WHOLE_VERSION})"
        )
        raise ValueError(msg)
    tables = {}
    for name, raw in data.get("tables", {}).items():
        tables[name] = _table_from_json(raw)
    sources = tuple(_source_from_json(s) for s in data.get("sources", ()))
    resume = data.get("resume_offsets")
    identity = data.get("source_identity")
    return LedgerState(
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
class HeadFile:
    """A format 3 ``state.json``: the head, the generation of its newest segment, and the segments it lists."""

    head: StateHead
    generation: int
    segments: tuple[Segment, ...]

    def encode(self) -> bytes:
        """The file's bytes."""
        data = {"version": _VERSION, **self.head.to_json(), "generation": self.generation}
        data["segments"] = [asdict(s) for s in self.segments]
        return orjson.dumps(data, option=orjson.OPT_INDENT_2)


def decode_state_file(data: dict[str, Any]) -> LedgerState | HeadFile:
    """``state.json`` parsed: a format 1 or 2 state whole, or a format 3 head (its segments still to read).

    Raises:
        ValueError: a newer release wrote it.
    """
    version = int(data.get("version", 1))
    if version <= _WHOLE_VERSION:
        return state_from_json(data)
    if version > _VERSION:
        msg = f"ledger format {version} was written by a newer release of the connector (this one reads {_VERSION})"
        raise ValueError(msg)
    segments = tuple(Segment(str(s["file"]), int(s["size"])) for s in data["segments"])
    return HeadFile(StateHead.from_json(data), int(data["generation"]), segments)


def plan_to_json(plan: BatchPlan, committed: LedgerState) -> dict[str, Any]:
    """JSON form: the state as its head and its changes from ``committed``, the state it was planned on."""
    return {
        "version": _VERSION,
        "batch_id": plan.batch_id,
        "files": [asdict(f) for f in plan.files],
        "head": StateHead.of(plan.state).to_json(),
        "changes": StateChanges.between(committed, plan.state).to_json(),
        "recreated": list(plan.recreated),
    }


def plan_from_json(data: dict[str, Any], committed: LedgerState) -> BatchPlan:
    """Parse the JSON form, its changes applied over ``committed`` (a format 2 plan holds the whole state).

    Raises:
        ValueError: a newer release wrote it.
    """
    version = int(data.get("version", _WHOLE_VERSION))
    if version > _VERSION:
        msg = f"plan format {version} was written by a newer release of the connector (this one reads {_VERSION})"
        raise ValueError(msg)
    if version <= _WHOLE_VERSION:
        state = state_from_json(data["state"])
    else:
        parts = StateParts.of(committed)
        StateChanges.from_json(data["changes"]).apply_to(parts)
        state = StateHead.from_json(data["head"]).state(parts)
    return BatchPlan(
        int(data["batch_id"]),
        tuple(PlannedFile(**f) for f in data["files"]),
        state,
        tuple(data.get("recreated", ())),
    )


def plan_path(batch_id: int) -> str:
    """Where the plan of ``batch_id`` is written."""
    return f"{PLANS_FOLDER}/{batch_id:020d}.json"


def base_due(segments: tuple[Segment, ...], size: int) -> bool:
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
