"""A table's lifecycle: the one state machine that says whether a table publishes, waits, or is being healed.

Every decision about a whole table goes through here: a stop (a poison event, a type change, a truncate), a
rebuild (delete the folder, wait for Fabric, re-snapshot it; ``connector.publish.rebuild`` runs the steps), and a
refresh (re-snapshot it without deleting the folder, for a column whose existing rows changed without an event).
The ledger persists it per table (``TableState.lifecycle``), so a crash at any instant resumes where it stood.

::

    RUNNING ──stop──> STOPPED ─────────────────────────┐ (operator's rebuild, or on_table_stopped: rebuild)
       │                                               v
       ├──begin_rebuild──> DELETING ──folder_deleted──> WAITING ──snapshot_requested──> SNAPSHOT_REQUESTED
       │                                                                                   ^     │
       └──begin_refresh──> REFRESH_PENDING ──snapshot_requested────────────────────────────┘     │
                                     ^                                                           │
                                     └─────────────────────────begin_refresh─────────────────────┘

``SNAPSHOT_REQUESTED`` is a running table whose rows Debezium is reading again: its events are written as upserts
(marker 4), so a snapshot read of a row that exists already replaces it instead of inserting it twice. Any state
but ``STOPPED``, ``DELETING`` and ``WAITING`` publishes; those three skip the table's events.

With Debezium's notification channel readable, the snapshot asked for is tracked (``SnapshotTrack``, matched by the
signal's id): ``SNAPSHOT_REQUESTED ──snapshot completed──> RUNNING`` only once Debezium reported that snapshot's scan
of the table and its COMPLETED; an aborted or stalled snapshot is asked for again (``snapshot_retried``) up to
``mirror.rebuild.snapshot_attempts`` times, then the table stops (``snapshot_given_up``). A new rebuild or refresh of a
table whose snapshot is in flight stops that snapshot first (``stop_sent``, then ``ABORTED``). Without the channel the
snapshot is untracked and ``SNAPSHOT_REQUESTED`` lasts (the table shows ``running``), as before.

Adding a state: a member of ``Phase``, its transitions below, its place in ``SKIPPING`` / ``BLOCKING`` /
``UPSERTING`` and in ``Lifecycle``'s questions, its word in ``Lifecycle.word``, and, if the rebuilder has a step to do
in it, that step in ``connector.publish.rebuild``. Only these two modules name phases: the rebuilder carries out the
steps this machine orders; every other module asks ``Lifecycle``'s questions (``skips_events``, ``stopped``,
``re_read``, ...) or shows ``phase.value``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from connector.config import MirrorSettings
from connector.errors import ConnectorError

log = logging.getLogger(__name__)

#: After this long without an automatic rebuild, a table's automatic rebuilds are counted afresh.
AUTOMATIC_COUNT_RESET_S = 86_400.0


class Phase(StrEnum):
    """Where a table stands; the values are what the ledger stores and ``tables`` shows."""

    RUNNING = "running"
    STOPPED = "stopped"
    DELETING = "deleting"
    WAITING = "waiting-for-fabric"
    REFRESH_PENDING = "refresh-pending"
    SNAPSHOT_REQUESTED = "snapshot-requested"


#: Phases whose table publishes nothing and whose events are skipped.
SKIPPING = frozenset({Phase.STOPPED, Phase.DELETING, Phase.WAITING})
#: Phases of a rebuild the rebuilder still has to move on (the folder is deleted, or Fabric must drop the table).
BLOCKING = frozenset({Phase.DELETING, Phase.WAITING})
#: Phases whose events are upserts: Debezium re-reads (or is about to re-read) rows the folder may hold.
UPSERTING = frozenset({Phase.REFRESH_PENDING, Phase.SNAPSHOT_REQUESTED})


class SnapshotState(StrEnum):
    """Where the incremental snapshot the connector asked for stands, as Debezium's notifications told."""

    REQUESTED = "requested"  # signal sent, nothing heard yet
    STARTED = "started"  # STARTED or a chunk of it heard
    PAUSED = "paused"  # an operator paused it: no stall while paused
    SCANNED = "scanned"  # TABLE_SCAN_COMPLETED of this table (SUCCEEDED or EMPTY): COMPLETED is next
    ABORTED = "aborted"  # ABORTED, or the table's scan failed: asked for again
    STOPPING = "stopping"  # stop-snapshot sent before a new request: waiting for its ABORTED
    COMPLETED = "completed"


#: States of a snapshot Debezium may still be running for this table.
IN_FLIGHT = frozenset({SnapshotState.REQUESTED, SnapshotState.STARTED, SnapshotState.PAUSED, SnapshotState.SCANNED})


@dataclass(frozen=True)
class SnapshotNotice:
    """One of Debezium's incremental snapshot notifications (its sink notification channel), decoded."""

    id: str  # the signal's id (Debezium's correlation id: the last signal it took into the running snapshot)
    type: str  # STARTED, IN_PROGRESS, TABLE_SCAN_COMPLETED, COMPLETED, ABORTED, PAUSED, RESUMED
    collections: tuple[str, ...] = ()  # data_collections
    current: str | None = None  # current_collection_in_progress (IN_PROGRESS)
    scanned: str | None = None  # scanned_collection (TABLE_SCAN_COMPLETED)
    status: str | None = None  # the scan's status (TABLE_SCAN_COMPLETED): SUCCEEDED, EMPTY, SQL_EXCEPTION, ...
    last_key: str | None = None
    maximum_key: str | None = None
    where: str = ""  # topic[partition]@offset, for the logs


@dataclass(frozen=True)
class SnapshotTrack:
    """The incremental snapshot the connector asked for last, and how far Debezium's notifications say it got."""

    id: str
    collection: str
    state: SnapshotState = SnapshotState.REQUESTED
    sent_at: float = 0.0
    heard_at: float = 0.0  # the last notification of it (or the request): a stall is measured from here
    started_at: float | None = None
    chunks: int = 0
    last_key: str | None = None
    maximum_key: str | None = None
    attempts: int = 1
    why: str | None = None  # why it was aborted (or asked for again)

    @property
    def in_flight(self) -> bool:
        """Whether Debezium may still be reading the table for it."""
        return self.state in IN_FLIGHT

    def heard(self, notice: SnapshotNotice, now: float) -> SnapshotTrack:
        """This snapshot after ``notice`` (one of its own: the caller matched the id)."""
        mine = self.collection
        if self.state is SnapshotState.STOPPING:
            ended = notice.type == "COMPLETED" or (notice.type == "ABORTED" and mine in notice.collections)
            return replace(self, state=SnapshotState.ABORTED, heard_at=now, why="stopped") if ended else self
        if not self.in_flight:
            return self
        track = replace(self, heard_at=now)
        started = self.started_at if self.started_at is not None else now
        if notice.type in ("STARTED", "RESUMED"):
            state = SnapshotState.SCANNED if self.state is SnapshotState.SCANNED else SnapshotState.STARTED
            return replace(track, state=state, started_at=started)
        if notice.type == "PAUSED":
            return replace(track, state=SnapshotState.PAUSED)
        if notice.type == "IN_PROGRESS" and notice.current == mine:
            return replace(
                track,
                state=SnapshotState.STARTED,
                started_at=started,
                chunks=self.chunks + 1,
                last_key=notice.last_key,
                maximum_key=notice.maximum_key,
            )
        if notice.type == "TABLE_SCAN_COMPLETED" and notice.scanned == mine:
            if notice.status in ("SUCCEEDED", "EMPTY"):
                return replace(track, state=SnapshotState.SCANNED, started_at=started)
            return replace(track, state=SnapshotState.ABORTED, why=f"scan of {mine} ended {notice.status}")
        if notice.type == "ABORTED" and (not notice.collections or mine in notice.collections):
            return replace(track, state=SnapshotState.ABORTED, why=f"Debezium aborted it ({notice.where})")
        if notice.type == "COMPLETED" and self.state is SnapshotState.SCANNED:
            return replace(track, state=SnapshotState.COMPLETED)
        return track

    def to_json(self) -> dict[str, Any]:
        """JSON form (inside the lifecycle's)."""
        return {k: (v.value if isinstance(v, SnapshotState) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SnapshotTrack:
        """Parse the JSON form."""
        return cls(**{**raw, "state": SnapshotState(raw.get("state", SnapshotState.REQUESTED.value))})


class LifecycleError(ConnectorError):
    """A transition the table's current phase does not allow (a bug in the caller, never bad input)."""


@dataclass(frozen=True)
class Lifecycle:
    """One table's phase, why it entered it, when, and the rebuilds already spent on it."""

    phase: Phase = Phase.RUNNING
    reason: str | None = None  # why the table stopped, or why its rebuild or refresh began
    since: float | None = None  # epoch seconds when the phase began
    request: str | None = None  # the operator's rebuild request this phase serves
    automatic_rebuilds: int = 0
    last_rebuild_at: float | None = None  # when the last rebuild moved (counts automatic rebuilds afresh after a day)
    refreshed: bool = False  # the snapshot was asked for by a refresh (folder kept), not by a rebuild
    snapshot: SnapshotTrack | None = None  # the snapshot asked for last, when Debezium's notifications are read

    # -- questions the sink, the rebuilder, ``tables`` and the metrics ask --------------------------------------

    @property
    def skips_events(self) -> bool:
        """Whether the table publishes nothing now (stopped, or its rebuild has not reached the snapshot)."""
        return self.phase in SKIPPING

    @property
    def stopped(self) -> bool:
        """Whether the table is stopped for an operator (``rebuild``), with no rebuild under way."""
        return self.phase is Phase.STOPPED

    @property
    def is_rebuilding(self) -> bool:
        """Whether a rebuild step is still to be done before the table runs again."""
        return self.phase in BLOCKING

    @property
    def awaits_rebuilder(self) -> bool:
        """Whether the rebuilder has a step to do: a rebuild's deletion or wait, or a refresh's snapshot request."""
        return self.phase in BLOCKING or self.phase is Phase.REFRESH_PENDING

    @property
    def upserts(self) -> bool:
        """Whether the table's events are written as upserts (a snapshot re-reads rows the folder may hold).

        A table whose tracked snapshot completed keeps upserting: a read of that snapshot may still be in Kafka
        behind the notification, and before tracking such a table upserted for good as well.
        """
        return self.phase in UPSERTING or (self.phase is Phase.RUNNING and self.snapshot is not None)

    @property
    def awaits_snapshot(self) -> bool:
        """Whether Debezium's notifications about this table's snapshot are still awaited (in flight or stopping)."""
        track = self.snapshot
        return track is not None and (track.in_flight or track.state is SnapshotState.STOPPING)

    @property
    def re_read(self) -> bool:
        """Whether Debezium was asked to re-read the table: its snapshot asked for, or tracked and completed."""
        return self.phase is Phase.SNAPSHOT_REQUESTED or (self.phase is Phase.RUNNING and self.snapshot is not None)

    @property
    def progress(self) -> str:
        """The phase as the ledger stores it, and the tracked snapshot's state."""
        track = self.snapshot
        return self.phase.value + (f", snapshot {track.state.value}" if track is not None else "")

    @property
    def steady(self) -> bool:
        """Whether the table runs with no rebuild, refresh or snapshot of its own under way.

        The audit judges only such a table: one being re-read differs from its source until the re-read is through.
        """
        return self.phase is Phase.RUNNING and not self.awaits_snapshot

    @property
    def stop_reason(self) -> str | None:
        """Why the table publishes nothing, ``None`` while it publishes."""
        return self.reason if self.skips_events else None

    @property
    def word(self) -> str:
        """What ``tables`` shows: running, stopped, rebuilding:<phase>, or refreshing."""
        if self.is_rebuilding:
            return f"rebuilding:{self.phase.value}"
        if self.stopped:
            return "stopped"
        if self.phase is Phase.REFRESH_PENDING:
            return "refreshing"
        if self.phase is Phase.SNAPSHOT_REQUESTED and self.snapshot is not None:
            # Tracked: ``running`` only once the snapshot completed (the phase is RUNNING then).
            return "refreshing" if self.refreshed else "rebuilding:snapshot"
        return "running"

    # -- transitions -------------------------------------------------------------------------------------------

    def stop(self, reason: str, mirror: MirrorSettings, *, now: float, rebuild: bool | None = None) -> Lifecycle:
        """The table cannot publish: stopped, or its rebuild begun, within ``rebuild.max_automatic``.

        ``rebuild`` says whether to rebuild (a schema change's policy); ``None`` leaves it to ``on_table_stopped``.
        """
        if not (mirror.on_table_stopped == "rebuild" if rebuild is None else rebuild):
            return replace(self, phase=Phase.STOPPED, reason=reason, since=now)
        count = self.automatic_rebuilds
        if self.last_rebuild_at is not None and now - self.last_rebuild_at > AUTOMATIC_COUNT_RESET_S:
            count = 0
        if count >= mirror.rebuild.max_automatic:
            gave_up = f"{reason} (not rebuilt automatically: {count} automatic rebuild(s) already; run `rebuild`)"
            return replace(self, phase=Phase.STOPPED, reason=gave_up, since=now)
        log.warning("table stopped: %s; rebuilding it automatically (attempt %d)", reason, count + 1)
        return replace(self.begin_rebuild(reason, now=now), automatic_rebuilds=count + 1)

    def begin_rebuild(self, reason: str, *, now: float, request: str | None = None) -> Lifecycle:
        """Delete the folder next, whatever the table was doing (an operator's request resets the automatic count)."""
        return replace(
            self,
            phase=Phase.DELETING,
            reason=reason,
            since=now,
            request=request,
            last_rebuild_at=now,
            automatic_rebuilds=0 if request is not None else self.automatic_rebuilds,
        )

    def folder_deleted(self, *, now: float) -> Lifecycle:
        """The folder is gone: wait until Fabric dropped the table."""
        self._expect(Phase.DELETING)
        return replace(self, phase=Phase.WAITING, since=now, last_rebuild_at=now)

    def begin_refresh(self, reason: str, *, now: float) -> Lifecycle:
        """Re-read the table into its folder as it stands (no deletion): the table keeps publishing meanwhile.

        A stopped or rebuilding table is left as it is: its rebuild re-reads every row anyway.
        """
        if self.skips_events:
            return self
        return replace(self, phase=Phase.REFRESH_PENDING, reason=reason, since=now, request=None)

    def snapshot_requested(self, *, now: float, track: SnapshotTrack | None = None) -> Lifecycle:
        """Debezium was asked to re-read the table: it runs again, writing upserts.

        ``track`` is the snapshot asked for when Debezium's notifications are read (``None``: untracked).
        """
        self._expect(Phase.WAITING, Phase.REFRESH_PENDING)
        rebuilt = self.phase is Phase.WAITING
        return replace(
            self,
            phase=Phase.SNAPSHOT_REQUESTED,
            since=now,
            last_rebuild_at=now if rebuilt else self.last_rebuild_at,
            refreshed=not rebuilt,
            snapshot=track,
        )

    def stop_sent(self, *, now: float) -> Lifecycle:
        """A stop-snapshot was sent for the snapshot in flight: a new request waits for its ABORTED."""
        if self.snapshot is None or not self.snapshot.in_flight:
            return self
        return replace(self, snapshot=replace(self.snapshot, state=SnapshotState.STOPPING, heard_at=now))

    def snapshot_notified(self, notice: SnapshotNotice, *, now: float) -> Lifecycle:
        """Apply one of the tracked snapshot's notifications; a COMPLETED after the table's scan makes it run."""
        if self.snapshot is None:
            return self
        track = self.snapshot.heard(notice, now)
        if track == self.snapshot:
            return self
        if track.state is SnapshotState.COMPLETED and self.phase is Phase.SNAPSHOT_REQUESTED:
            done = "refresh" if self.refreshed else "rebuild"
            log.warning(
                "table %s: its %s's snapshot completed (%d chunk(s)): running", track.collection, done, track.chunks
            )
            return replace(self, phase=Phase.RUNNING, since=now, snapshot=track)
        return replace(self, snapshot=track)

    def snapshot_retried(self, track: SnapshotTrack, *, now: float) -> Lifecycle:
        """The snapshot aborted or stalled and was asked for again (``track``, its attempts counted on)."""
        self._expect(Phase.SNAPSHOT_REQUESTED)
        return replace(self, since=now, snapshot=track)

    def snapshot_given_up(self, why: str, *, now: float) -> Lifecycle:
        """The snapshot failed ``snapshot_attempts`` times: the table stops for an operator (``rebuild``)."""
        self._expect(Phase.SNAPSHOT_REQUESTED)
        reason = f"{why}; run `rebuild` once Debezium snapshots again"
        return replace(self, phase=Phase.STOPPED, reason=reason, since=now)

    def _expect(self, *phases: Phase) -> None:
        if self.phase not in phases:
            allowed = " or ".join(p.value for p in phases)
            msg = f"table lifecycle: expected {allowed}, found {self.phase.value} ({self.reason or 'no reason'})"
            raise LifecycleError(msg)

    # -- persistence -------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """JSON form (ledger version 2); ``snapshot`` only when tracked, so untracked ledgers read as before."""
        raw = {k: (v.value if isinstance(v, Phase) else v) for k, v in asdict(self).items() if k != "snapshot"}
        if self.snapshot is not None:
            raw["snapshot"] = self.snapshot.to_json()
        return raw

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Lifecycle:
        """Parse the JSON form (ledger version 2)."""
        track = raw.get("snapshot")
        return cls(
            **{
                **raw,
                "phase": Phase(raw.get("phase", Phase.RUNNING.value)),
                "snapshot": SnapshotTrack.from_json(track) if track else None,
            }
        )

    @classmethod
    def from_v1_fields(cls, raw: Mapping[str, Any]) -> Lifecycle:
        """The lifecycle a version-1 ledger recorded as flat fields (``stopped``, ``rebuild``, ``rebuild_*``)."""
        stopped = raw.get("stopped")
        rebuild = raw.get("rebuild")
        at = raw.get("rebuild_at")
        base = cls(
            request=raw.get("rebuild_request"),
            automatic_rebuilds=int(raw.get("automatic_rebuilds", 0)),
            last_rebuild_at=at,
        )
        if rebuild in (Phase.DELETING.value, Phase.WAITING.value):
            return replace(base, phase=Phase(rebuild), reason=raw.get("rebuild_reason") or stopped, since=at)
        if stopped is not None:
            return replace(base, phase=Phase.STOPPED, reason=stopped, since=at)
        if rebuild == Phase.SNAPSHOT_REQUESTED.value:
            return replace(base, phase=Phase.SNAPSHOT_REQUESTED, reason=raw.get("rebuild_reason"), since=at)
        return base


#: The flat fields a version-1 ledger wrote for what is now ``Lifecycle``.
V1_FIELDS = ("stopped", "rebuild", "rebuild_at", "rebuild_request", "rebuild_reason", "automatic_rebuilds")
