"""The batch ledger: the connector's checkpointed file counter.

For each batch the sink stages its files, then writes a *plan* (which staged file becomes which
numbered file, and what the batch changes in the state), then renames the files into place, then
*commits* (writes what changed and a new head, and removes the plan). A crash anywhere leaves either no
plan (the batch is redone from scratch; staged files are orphans and are removed) or a plan (which is
completed exactly as written, whatever the replayed batch computes). So a file number is used once, files
of a table are continuous, and a replayed batch id never publishes a second copy.

Its model is ``ledger_state``; its files and their format, ``ledger_format``.
"""

from __future__ import annotations

import errno

import orjson

from connector.errors import LandingZoneCorrupt, exception_line
from connector.publish.ledger_format import (
    PLANS_FOLDER,
    SEGMENTS_FOLDER,
    STATE_FILE,
    TOAST_FOLDER,
    UNREADABLE,
    HeadFile,
    Segment,
    StateChanges,
    StateHead,
    StateParts,
    base_due,
    decode_state_file,
    plan_from_json,
    plan_path,
    plan_to_json,
)
from connector.publish.ledger_state import BatchPlan, LedgerState
from connector.storage.base import Storage

#: Reads of the head a reader makes when a commit beside it removed the segments it was reading.
_LOAD_ATTEMPTS = 3


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
                decoded = decode_state_file(orjson.loads(raw))
            except UNREADABLE as exc:
                raise self._corrupt(STATE_FILE, exc) from None
            if isinstance(decoded, LedgerState):
                self._segments = None
                return decoded
            try:
                parts = StateParts()
                for segment in decoded.segments:
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
                state = decoded.head.state(parts)
            except KeyError as exc:
                raise self._corrupt(STATE_FILE, exc) from None
            self._generation, self._segments = decoded.generation, decoded.segments
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
        except UNREADABLE as exc:
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
            return plan_from_json(orjson.loads(self.storage.read_bytes(path)), committed)
        except UNREADABLE as exc:
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
        self.storage.replace(plan_path(plan.batch_id), orjson.dumps(plan_to_json(plan, self.state)))

    def commit(self, plan: BatchPlan) -> None:
        """Make the plan's state the committed state, then drop the plan and stale TOAST snapshots."""
        self.commit_state(plan.state)
        self.storage.delete(plan_path(plan.batch_id))

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
            if segments is None or base_due(segments, len(encoded)):
                encoded, segments, based = orjson.dumps(StateChanges.whole(state).to_json()), (), True
            generation += 1
            segment = Segment(f"{generation:020d}.json", len(encoded))
            self.storage.replace(segment.path, encoded)
            segments = (*segments, segment)
        self.storage.replace(STATE_FILE, HeadFile(StateHead.of(state), generation, segments).encode())
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
