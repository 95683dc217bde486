"""Rebuilding a table: delete its folder, wait until Fabric dropped it, re-snapshot it through Debezium.

Microsoft's open-mirroring best practice for a table that must be reloaded (a column type change, a
truncate, a value that cannot be mirrored) is: delete the table's folder, wait until the table is gone
from the mirrored database, then publish a complete initial load and resume the changes. Here the
writer that holds the fence runs it, one phase per step, each committed in the ledger before the next
begins, so a crash (kill -9) at any point resumes the rebuild where it stood:

1. ``deleting``: the table is stopped (its events are skipped) and its folder is deleted.
2. ``waiting-for-fabric``: until Fabric's status no longer lists the table, or, when that status is not
   configured or not readable, until ``mirror.rebuild.wait_s`` have passed since the deletion.
3. The ledger entry is reset (file numbers restart at 1, no schema) and Debezium is asked for an
   incremental snapshot of exactly that table (``execute-snapshot`` through its Kafka signal channel);
   the phase becomes ``snapshot-requested`` and the table runs again from that batch on.

Why the result equals the source: the signal is sent while a batch whose Kafka end offsets are already
fixed is being published, so every snapshot read lands in a later batch. Changes published after the
reset but made before the snapshot reached their rows are overwritten by the reads (rows are upserted,
marker 4, or replace-or-insert, marker 1; a delete of a row not there yet does nothing). Debezium's
incremental snapshot drops a chunk's read of a row that changed while the chunk was open and emits the
change instead, so for every key the last event in Kafka order is its current state. Changes made between
the stop and the signal are not replayed: the snapshot reads their result.

The signal is sent before the reset is committed: a crash between the two sends a second signal (the
table is read twice, which upserts the same rows again) rather than none (which would leave it empty).

When the signal also reads Debezium's notifications (``SnapshotTracker``), the snapshot is tracked by its signal
id: the table runs (``running``) only once that snapshot reported the table's scan and COMPLETED, so a snapshot
that started before the folder was recreated never ends a rebuild. A new rebuild or refresh of a table whose
snapshot is in flight first sends ``stop-snapshot`` and waits for its ABORTED (at most
``mirror.rebuild.snapshot_timeout_s``) before asking again: Debezium would otherwise queue the table behind the
running scan under the new id. A snapshot aborted, or silent for ``snapshot_timeout_s``, is asked for again up to
``snapshot_attempts`` times, then the table stops with one line saying so.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import orjson

from connector.config import MirrorSettings
from connector.errors import ConnectorError
from connector.publish.ledger_state import LedgerState, TableState
from connector.publish.lifecycle import Lifecycle, Phase, SnapshotNotice, SnapshotState, SnapshotTrack
from connector.storage.base import Storage

log = logging.getLogger(__name__)

REQUESTS_FOLDER = "ledger/requests"

#: Asks Debezium for an incremental snapshot of a table; returns an id for logs. Raises when it cannot.
SnapshotSignal = Callable[[str, TableState], str]


@runtime_checkable
class SnapshotTracker(Protocol):
    """A snapshot signal that also stops snapshots and reads Debezium's notifications of them."""

    def stop(self, table_id: str, table: TableState) -> None:
        """Send ``stop-snapshot`` for the table's data collection."""

    def collection(self, table: TableState) -> str:
        """The table's data collection as the notifications name it."""

    def notices(self, table: TableState, since: float | None) -> list[SnapshotNotice] | None:
        """Notifications not read yet (``since``: read from then on first use); ``None``: no channel."""


#: Fabric's tables (by table id) when its status is readable, ``None`` otherwise.
FabricTables = Callable[[], Mapping[str, object] | None]


class RebuildError(ConnectorError):
    """A rebuild step that cannot be done now (it is retried at the next batch)."""


@dataclass(frozen=True)
class RebuildRequest:
    """An operator's ``rebuild TABLE``, written to the checkpoint for the writer holding the fence."""

    table: str
    id: str
    requested_at: float


def request_rebuild(checkpoint: Storage, table_id: str, clock: Callable[[], float] = time.time) -> RebuildRequest:
    """Write a rebuild request for ``table_id``; the running connector (or its next start) carries it out."""
    request = RebuildRequest(table_id, uuid.uuid4().hex, clock())
    body = {"table": request.table, "id": request.id, "requested_at": request.requested_at}
    checkpoint.replace(f"{REQUESTS_FOLDER}/{request.id}.json", orjson.dumps(body))
    return request


def pending_requests(checkpoint: Storage) -> list[tuple[str, RebuildRequest]]:
    """Requests not carried out yet, oldest first, with their paths; unreadable ones are named and removed."""
    found = []
    for info in checkpoint.list_dir(REQUESTS_FOLDER):
        if info.is_dir or not info.path.endswith(".json"):
            continue
        try:
            raw = orjson.loads(checkpoint.read_bytes(info.path))
            request = RebuildRequest(str(raw["table"]), str(raw["id"]), float(raw["requested_at"]))
        except FileNotFoundError:
            continue
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.error("rebuild request %s/%s is unreadable (%s): ignored", checkpoint.url, info.path, exc)
            checkpoint.delete(info.path)
            continue
        found.append((info.path, request))
    return sorted(found, key=lambda item: item[1].requested_at)


def requested_tables(checkpoint: Storage) -> frozenset[str]:
    """Tables with a rebuild request not taken yet (read only: the sink names and removes unreadable requests).

    For readers beside the sink (the audit): a request counts from the moment it is written, before the sink takes
    it between batches, and the sink commits the rebuild it begins before it removes the request.
    """
    tables = set()
    for info in checkpoint.list_dir(REQUESTS_FOLDER):
        if info.is_dir or not info.path.endswith(".json"):
            continue
        try:
            tables.add(str(orjson.loads(checkpoint.read_bytes(info.path))["table"]))
        except (FileNotFoundError, orjson.JSONDecodeError, KeyError, TypeError):
            continue  # taken meanwhile, or unreadable: the sink's to name
    return frozenset(tables)


class TableRebuilder:
    """Moves every table's rebuild on by the phases it can complete now; called before each batch."""

    def __init__(
        self,
        landing: Storage,
        checkpoint: Storage,
        mirror: MirrorSettings,
        *,
        signal: SnapshotSignal | None,
        fabric_tables: FabricTables | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.landing = landing
        self.checkpoint = checkpoint
        self.mirror = mirror
        self.signal = signal
        self.fabric_tables = fabric_tables
        self.clock = clock
        self._last_error: dict[str, str] = {}
        self.tracker = signal if isinstance(signal, SnapshotTracker) else None
        self._tracking: bool | None = None  # whether notifications are read: known once a table's topic is

    def take_requests(self, state: LedgerState) -> tuple[LedgerState, list[str]]:
        """Start the rebuilds operators asked for; returns the new state and the request files it served."""
        served = []
        tables = dict(state.tables)
        for path, request in pending_requests(self.checkpoint):
            served.append(path)
            table = tables.get(request.table)
            if table is None:
                known = ", ".join(sorted(tables)) or "none yet"
                log.error(
                    "rebuild request %s: no table %s in the ledger (tables: %s)", request.id, request.table, known
                )
                continue
            if table.lifecycle.request == request.id:
                continue  # served before a crash removed the request file
            reason = table.lifecycle.stop_reason or "rebuild requested"
            log.warning("table %s: rebuild requested (%s); was: %s", request.table, request.id, reason)
            lifecycle = table.lifecycle.begin_rebuild(reason, now=request.requested_at, request=request.id)
            tables[request.table] = replace(table, lifecycle=lifecycle)
        return (replace(state, tables=tables) if served else state), served

    def advance(self, state: LedgerState) -> LedgerState:
        """Complete what can be completed now of each rebuild and refresh; ``state`` itself when nothing moved."""
        state = self._follow_snapshots(state)
        waiting = sorted((tid, t) for tid, t in state.tables.items() if t.lifecycle.awaits_rebuilder)
        if not waiting:
            return state  # every batch asks: nothing to copy or compare in the usual case
        tables = dict(state.tables)
        fabric: Mapping[str, object] | None = None
        fabric_read = False
        for tid, table in waiting:
            lifecycle, clear = self._clear_to_ask(tid, table)
            table = tables[tid] = replace(table, lifecycle=lifecycle) if lifecycle != table.lifecycle else table
            if table.keyless and table.lifecycle.phase is Phase.REFRESH_PENDING:
                # A refresh re-reads rows into the folder; without a key they would be there twice.
                reason = f"{table.lifecycle.reason}; a keyless table is rebuilt, not refreshed"
                table = tables[tid] = replace(table, lifecycle=table.lifecycle.begin_rebuild(reason, now=self.clock()))
            if table.lifecycle.phase is Phase.REFRESH_PENDING:
                if clear and (sent := self._signalled(tid, table, "refresh")) is not None:
                    log.warning("table %s: Debezium snapshot requested to refresh it in place", tid)
                    requested = table.lifecycle.snapshot_requested(now=self.clock(), track=self._track(table, sent))
                    tables[tid] = replace(table, lifecycle=requested)
                continue
            if table.lifecycle.phase is Phase.DELETING:
                self.landing.delete_tree(table.folder)
                log.warning("table %s: deleted %s/%s for its rebuild", tid, self.landing.url, table.folder)
                table = tables[tid] = replace(table, lifecycle=table.lifecycle.folder_deleted(now=self.clock()))
            if table.lifecycle.phase is not Phase.WAITING or not clear:
                continue
            if not fabric_read:
                fabric, fabric_read = self._fabric(), True
            if not self._gone(tid, table, fabric) or (sent := self._signalled(tid, table, "rebuild")) is None:
                continue
            log.warning("table %s: folder recreated from file 1; Debezium snapshot requested", tid)
            tables[tid] = TableState(
                folder=table.folder,
                topic=table.topic,
                keyless=table.keyless,
                snapshot_expected=table.keyless,
                # The incremental snapshot's reads interleave with changes: marked files. A keyless table's blocking
                # snapshot (streaming paused) is its initial load again: marker-free reads, as at the start.
                initial_load_ended=not table.keyless,
                lifecycle=table.lifecycle.snapshot_requested(now=self.clock(), track=self._track(table, sent)),
            )
        return state if tables == state.tables else replace(state, tables=tables)

    # -- the snapshot asked for, followed through Debezium's notifications ------------------------------------

    def _follow_snapshots(self, state: LedgerState) -> LedgerState:
        """Apply Debezium's notifications to the tables awaiting them; ask again for aborted or stalled snapshots."""
        if self.tracker is None:
            return state
        if self._tracking is None:
            sample = next((t for t in state.tables.values() if t.topic is not None), None)
            if sample is None:
                return state
            self._tracking = self._read(sample, None) is not None  # opens the channel, says once when there is none
        awaiting = {tid: t for tid, t in state.tables.items() if t.lifecycle.awaits_snapshot}
        if not self._tracking or not awaiting:
            return state
        since = min(t.lifecycle.snapshot.sent_at for t in awaiting.values() if t.lifecycle.snapshot is not None)
        notices = self._read(next(iter(awaiting.values())), since) or []
        tables = dict(state.tables)
        for notice in notices:
            for tid in awaiting:
                lifecycle = tables[tid].lifecycle
                if _concerns(notice, lifecycle.snapshot, tables):
                    tables[tid] = replace(tables[tid], lifecycle=lifecycle.snapshot_notified(notice, now=self.clock()))
        for tid in awaiting:
            tables[tid] = self._retry_if_failed(tid, tables[tid])
        return state if tables == state.tables else replace(state, tables=tables)

    def _read(self, table: TableState, since: float | None) -> list[SnapshotNotice] | None:
        assert self.tracker is not None  # noqa: S101 - the caller checks it
        try:
            return self.tracker.notices(table, since)
        except Exception as exc:  # noqa: BLE001 - read again at the next tick; a stall is judged by time
            log.warning("Debezium's notifications not readable now (%s): read again at the next step", exc)
            return []

    def _retry_if_failed(self, tid: str, table: TableState) -> TableState:
        """A snapshot aborted, or silent for ``snapshot_timeout_s``: stop it, ask again, or give up."""
        lifecycle, track = table.lifecycle, table.lifecycle.snapshot
        if lifecycle.phase is not Phase.SNAPSHOT_REQUESTED or track is None:
            return table
        settings, now = self.mirror.rebuild, self.clock()
        stalled = now - track.heard_at > settings.snapshot_timeout_s and track.state is not SnapshotState.PAUSED
        if track.in_flight and stalled:
            why = f"no notification of it for {settings.snapshot_timeout_s:.0f} s ({track.state.value})"
            if track.attempts >= settings.snapshot_attempts:
                return self._give_up(tid, table, why)
            log.warning("table %s: Debezium's snapshot %s stalled: %s; stopping it", tid, track.id, why)
            return replace(
                table, lifecycle=self._stop(tid, table, replace(lifecycle, snapshot=replace(track, why=why)))
            )
        if track.state is SnapshotState.ABORTED or (track.state is SnapshotState.STOPPING and stalled):
            why = track.why or "aborted"
            if track.attempts >= settings.snapshot_attempts:
                return self._give_up(tid, table, why)
            sent = self._signalled(tid, table, f"snapshot retry ({why})")
            fresh = self._track(table, sent) if sent is not None else None
            if fresh is None:
                return table
            retried = replace(fresh, attempts=track.attempts + 1, why=why)
            log.warning("table %s: snapshot asked for again (attempt %d): %s", tid, retried.attempts, why)
            return replace(table, lifecycle=lifecycle.snapshot_retried(retried, now=now))
        return table

    def _give_up(self, tid: str, table: TableState, why: str) -> TableState:
        track = table.lifecycle.snapshot
        assert track is not None  # noqa: S101 - the caller's
        line = (
            f"Debezium's incremental snapshot of {track.collection} did not complete in {track.attempts} "
            f"attempt(s) (last: {why})"
        )
        log.error("table %s: stopped: %s", tid, line)
        return replace(table, lifecycle=table.lifecycle.snapshot_given_up(line, now=self.clock()))

    def _clear_to_ask(self, tid: str, table: TableState) -> tuple[Lifecycle, bool]:
        """Whether a new snapshot may be asked for: a tracked one in flight is stopped first, and its end awaited."""
        lifecycle, track = table.lifecycle, table.lifecycle.snapshot
        if track is None or not self._tracking:
            return lifecycle, True
        if track.in_flight:
            log.warning("table %s: a snapshot (%s) is in flight: stopping it before asking again", tid, track.id)
            return self._stop(tid, table, lifecycle), False
        if track.state is SnapshotState.STOPPING:
            if self.clock() - track.heard_at <= self.mirror.rebuild.snapshot_timeout_s:
                return lifecycle, False
            log.warning("table %s: no ABORTED of snapshot %s heard: asking again anyway", tid, track.id)
        return lifecycle, True

    def _stop(self, tid: str, table: TableState, lifecycle: Lifecycle) -> Lifecycle:
        assert self.tracker is not None  # noqa: S101 - tracked snapshots exist only with a tracker
        try:
            self.tracker.stop(tid, table)
        except RebuildError as exc:
            log.error("table %s: stop-snapshot not sent (%s): tried again at the next step", tid, exc)
            return lifecycle
        return lifecycle.stop_sent(now=self.clock())

    def _signalled(self, tid: str, table: TableState, what: str) -> str | None:
        """Ask Debezium to re-read the table: the signal's id, ``None`` (said once per reason) when it cannot now."""
        try:
            signal_id = self._signal(tid, table)
        except RebuildError as exc:
            # Tried again every few seconds: say it once per distinct reason (the stuck-rebuild alert follows).
            level = logging.DEBUG if self._last_error.get(tid) == str(exc) else logging.ERROR
            log.log(level, "table %s: %s waits: %s", tid, what, exc)
            self._last_error[tid] = str(exc)
            return None
        self._last_error.pop(tid, None)
        log.info("table %s: %s signal %s sent", tid, what, signal_id)
        return signal_id

    def _track(self, table: TableState, signal_id: str) -> SnapshotTrack | None:
        """The snapshot just asked for, to follow; ``None`` when Debezium's notifications are not read."""
        if self.tracker is None or not self._tracking or table.keyless:
            return None  # a blocking snapshot's notifications are not the incremental ones followed by signal id
        now = self.clock()
        return SnapshotTrack(signal_id, self.tracker.collection(table), sent_at=now, heard_at=now)

    def _fabric(self) -> Mapping[str, object] | None:
        if self.fabric_tables is None:
            return None
        try:
            return self.fabric_tables()
        except Exception as exc:  # noqa: BLE001 - an unreadable status falls back to the delay
            log.warning("Fabric status unreadable (%s): rebuilds wait mirror.rebuild.wait_s instead", exc)
            return None

    def _gone(self, tid: str, table: TableState, fabric: Mapping[str, object] | None) -> bool:
        if fabric is not None:
            return tid not in fabric
        waited = self.clock() - (table.lifecycle.since or 0.0)
        return waited >= self.mirror.rebuild.wait_s

    def _signal(self, tid: str, table: TableState) -> str:
        if self.signal is None:
            msg = "a rebuild needs Debezium's Kafka signal channel, and this source is not Kafka"
            raise RebuildError(msg)
        if table.topic is None:
            msg = "its Kafka topic is not known yet (no event of it was read); it is learnt from the next event"
            raise RebuildError(msg)
        return self.signal(tid, table)


def _concerns(notice: SnapshotNotice, track: SnapshotTrack | None, tables: Mapping[str, TableState]) -> bool:
    """Whether ``notice`` is about ``track``'s snapshot.

    Debezium gives a running snapshot the id of the last signal it took in: a later request (of another table)
    joining the snapshot renames it, so the ids of snapshots asked for after this one count as its own too. A
    stop waits for the ABORTED naming the table, whatever id it carries.
    """
    if track is None:
        return False
    if notice.id == track.id:
        return True
    if track.state is SnapshotState.STOPPING:
        return notice.type == "ABORTED" and track.collection in notice.collections
    later = {
        t.lifecycle.snapshot.id
        for t in tables.values()
        if t.lifecycle.snapshot is not None and t.lifecycle.snapshot.sent_at > track.sent_at
    }
    return notice.id in later
