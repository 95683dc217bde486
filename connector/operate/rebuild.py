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
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import orjson

from connector.config import MirrorSettings
from connector.errors import ConnectorError
from connector.publish.ledger import LedgerState, TableState
from connector.publish.lifecycle import Phase
from connector.storage.base import Storage

log = logging.getLogger(__name__)

REQUESTS_FOLDER = "ledger/requests"

#: Asks Debezium for an incremental snapshot of a table; returns an id for logs. Raises when it cannot.
SnapshotSignal = Callable[[str, TableState], str]
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
        waiting = sorted((tid, t) for tid, t in state.tables.items() if t.lifecycle.awaits_rebuilder)
        if not waiting:
            return state  # every batch asks: nothing to copy or compare in the usual case
        tables = dict(state.tables)
        fabric: Mapping[str, object] | None = None
        fabric_read = False
        for tid, table in waiting:
            if table.lifecycle.phase is Phase.REFRESH_PENDING:
                if self._signalled(tid, table, "refresh"):
                    log.warning("table %s: Debezium snapshot requested to refresh it in place", tid)
                    tables[tid] = replace(table, lifecycle=table.lifecycle.snapshot_requested(now=self.clock()))
                continue
            if table.lifecycle.phase is Phase.DELETING:
                self.landing.delete_tree(table.folder)
                log.warning("table %s: deleted %s/%s for its rebuild", tid, self.landing.url, table.folder)
                table = tables[tid] = replace(table, lifecycle=table.lifecycle.folder_deleted(now=self.clock()))
            if table.lifecycle.phase is not Phase.WAITING:
                continue
            if not fabric_read:
                fabric, fabric_read = self._fabric(), True
            if not self._gone(tid, table, fabric) or not self._signalled(tid, table, "rebuild"):
                continue
            log.warning("table %s: folder recreated from file 1; Debezium snapshot requested", tid)
            tables[tid] = TableState(
                folder=table.folder,
                topic=table.topic,
                initial_load_ended=True,  # the incremental snapshot's reads interleave with changes: marked files
                lifecycle=table.lifecycle.snapshot_requested(now=self.clock()),
            )
        return state if tables == state.tables else replace(state, tables=tables)

    def _signalled(self, tid: str, table: TableState, what: str) -> bool:
        """Ask Debezium to re-read the table; ``False`` (said once per distinct reason) when it cannot now."""
        try:
            signal_id = self._signal(tid, table)
        except RebuildError as exc:
            # Tried again every few seconds: say it once per distinct reason (the stuck-rebuild alert follows).
            level = logging.DEBUG if self._last_error.get(tid) == str(exc) else logging.ERROR
            log.log(level, "table %s: %s waits: %s", tid, what, exc)
            self._last_error[tid] = str(exc)
            return False
        self._last_error.pop(tid, None)
        log.info("table %s: %s signal %s sent", tid, what, signal_id)
        return True

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
