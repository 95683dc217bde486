"""What each mirrored table is doing, read from the ledger: the one reading ``tables`` prints and the status page shows.

``tables`` (``connector.commands.tables``) prints these lines; the service's status page
(``connector.operate.status_page``) shows the same lines with the running process's counters beside them, so the
two never disagree about a table's state or why it stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from connector.publish.ledger_state import LedgerState, TableState
from connector.publish.lifecycle import SnapshotState


@dataclass(frozen=True)
class TableLine:
    """One table as ``tables`` shows it."""

    table: str
    state: str
    reason: str | None
    last_file: int
    files: int
    rows: int
    last_batch: str | None
    load: str = "changes"  # initial-load while only initial-snapshot reads were published, else changes
    marker_free_rows: int = 0  # rows published in files without __rowMarker__
    fabric_state: str | None = None
    fabric_rows: int | None = None
    snapshot: str | None = None  # the tracked incremental snapshot's progress, while it runs
    audit: str | None = None  # the continuous audit's last look at the table (mirror.audit), when it ran
    keyless: bool = False  # mirrored without keyColumns (no key): inserts only; an update or delete rebuilds it

    def text(self) -> str:
        """The human line."""
        parts = [
            f"{self.table}",
            f"state={self.state}",
            f"last_file={self.last_file}",
            f"files={self.files}",
            f"rows={self.rows}",
            f"load={self.load}",
            f"marker_free_rows={self.marker_free_rows}",
            f"last_batch={self.last_batch or '-'}",
        ]
        if self.keyless:
            parts.append("key=none (no primary key: inserts only)")
        if self.fabric_state is not None:
            parts.append(f"fabric={self.fabric_state}")
            if self.fabric_rows is not None:
                parts.append(f"fabric_rows={self.fabric_rows}")
        if self.snapshot:
            parts.append(f"snapshot={self.snapshot}")
        if self.audit:
            parts.append(f"audit={self.audit}")
        if self.reason:
            parts.append(f"reason={self.reason}")
        return "  ".join(parts)


def table_state_word(table: TableState) -> str:
    """running, stopped, rebuilding:<phase> or refreshing (``Lifecycle.word``).

    A keyless table's blocking snapshot is not tracked through Debezium's notifications: until its rebuilt folder
    has a file (the snapshot's first read, or an event after the snapshot of an empty table) it reads
    ``rebuilding:blocking-snapshot``, not ``running``.
    """
    word = table.lifecycle.word
    if word == "running" and table.snapshot_expected and table.last_published_at is None:
        return "rebuilding:blocking-snapshot"
    return word


def table_lines(
    state: LedgerState,
    fabric: Mapping[str, Any] | None = None,
    audits: Mapping[str, str] | None = None,
) -> list[TableLine]:
    """One line per table of the ledger's state, with Fabric's state and the table's last audit when known.

    ``fabric`` is Fabric's status by table id; ``audits`` the audit's last look by table id, as
    ``TableAuditStatus.text`` words it (``connector.audit.status``, which the audit above this layer writes).
    """
    lines = []
    for tid, table in sorted(state.tables.items()):
        status = fabric.get(tid) if fabric is not None else None
        audit = (audits or {}).get(tid)
        lines.append(
            TableLine(
                table=tid,
                state=table_state_word(table),
                reason=table_reason(table),
                last_file=table.next_number - 1,
                files=table.files_published,
                rows=table.rows_published,
                last_batch=iso_time(table.last_published_at),
                load="changes" if table.initial_load_ended else "initial-load",
                marker_free_rows=table.marker_free_rows,
                fabric_state=None if fabric is None else str(getattr(status, "state", "absent")),
                fabric_rows=getattr(status, "processed_rows", None) if status else None,
                snapshot=snapshot_progress(table),
                audit=audit,
                keyless=table.keyless,
            )
        )
    return lines


def table_reason(table: TableState) -> str | None:
    """Why the table stands where it does; for a re-read table, when and why it was re-read."""
    lifecycle = table.lifecycle
    if lifecycle.re_read:
        # A refresh re-reads the table into its folder; a rebuild recreated the folder first.
        done = "refreshed" if lifecycle.refreshed else "rebuilt"
        if lifecycle.awaits_snapshot:
            done = f"{'refresh' if lifecycle.refreshed else 'rebuild'} snapshot asked for"
        return f"{done} {iso_time(lifecycle.since)} (was: {lifecycle.reason})"
    return lifecycle.reason if lifecycle.skips_events or lifecycle.awaits_rebuilder else None


def snapshot_progress(table: TableState) -> str | None:
    """The tracked snapshot while Debezium reads the table: ``started:<time>,chunks=N,last_key=K/M,attempt=A``."""
    track = table.lifecycle.snapshot
    if track is None or not (track.in_flight or track.state is SnapshotState.STOPPING):
        return None
    parts = [f"{track.state.value}:{iso_time(track.started_at or track.sent_at)}", f"chunks={track.chunks}"]
    if track.last_key is not None:
        parts.append(f"last_key={track.last_key}/{track.maximum_key or '?'}")
    parts.append(f"attempt={track.attempts}")
    return ",".join(parts)


def iso_time(epoch: float | None) -> str | None:
    """``2026-01-02T03:04:05Z``, or ``None``."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
