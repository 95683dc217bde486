"""``tables`` and ``rebuild``: what each mirrored table is doing, and asking for a table's rebuild.

Both read the ledger in the checkpoint folder without taking the writer fence, so they work beside the
running connector: ``rebuild`` only leaves a request there, which the connector holding the fence
carries out (``connector.operate.rebuild``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from connector.errors import ConfigError
from connector.operate.job_status import read_job_status
from connector.operate.rebuild import request_rebuild
from connector.publish.ledger import STATE_FILE, BatchLedger, LedgerState, TableState
from connector.publish.lifecycle import Phase
from connector.storage.base import Storage

#: How often ``rebuild --wait`` looks at the ledger.
WAIT_POLL_S = 1.0


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
        if self.fabric_state is not None:
            parts.append(f"fabric={self.fabric_state}")
            if self.fabric_rows is not None:
                parts.append(f"fabric_rows={self.fabric_rows}")
        if self.reason:
            parts.append(f"reason={self.reason}")
        return "  ".join(parts)


def table_state_word(table: TableState) -> str:
    """running, stopped, rebuilding:<phase> or refreshing (``Lifecycle.word``)."""
    return table.lifecycle.word


def table_lines(state: LedgerState, fabric: Mapping[str, Any] | None = None) -> list[TableLine]:
    """One line per table of the ledger's state, with Fabric's state when ``fabric`` (status by table id) is given."""
    lines = []
    for tid, table in sorted(state.tables.items()):
        reason = _reason(table)
        status = fabric.get(tid) if fabric is not None else None
        lines.append(
            TableLine(
                table=tid,
                state=table_state_word(table),
                reason=reason,
                last_file=table.next_number - 1,
                files=table.files_published,
                rows=table.rows_published,
                last_batch=_iso(table.last_published_at),
                load="changes" if table.initial_load_ended else "initial-load",
                marker_free_rows=table.marker_free_rows,
                fabric_state=None if fabric is None else str(getattr(status, "state", "absent")),
                fabric_rows=getattr(status, "processed_rows", None) if status else None,
            )
        )
    return lines


def tables_command(checkpoint: Storage, *, as_json: bool, fabric: Mapping[str, Any] | None = None) -> int:
    """Print the job's last status, then the tables; exit 0, or 1 when a table is stopped, 2 when there is no ledger.

    With ``as_json`` the job's status is a first line of its own, ``{"job": {...}}``, before one line per table.
    """
    ledger = _ledger(checkpoint)
    job = read_job_status(checkpoint)
    if job is not None:
        # First: a job that stopped explains why every table stands still (they still say ``running``).
        print(orjson.dumps({"job": asdict(job)}).decode() if as_json else job.text())
    lines = table_lines(ledger.state, fabric)
    for line in lines:
        print(orjson.dumps(line.__dict__).decode() if as_json else line.text())
    if not lines and not as_json:
        print("no table published yet")
    return 1 if any(line.state == "stopped" for line in lines) else 0


def rebuild_command(
    checkpoint: Storage,
    table_id: str,
    *,
    wait_s: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Request a rebuild of ``table_id``; with ``wait_s``, wait until the connector asked Debezium to re-snapshot."""
    ledger = _ledger(checkpoint)
    if table_id not in ledger.state.tables:
        known = ", ".join(sorted(ledger.state.tables)) or "none"
        msg = f"no table {table_id} in the ledger at {checkpoint.url}/{STATE_FILE} (tables: {known})"
        raise ConfigError(msg)
    request = request_rebuild(checkpoint, table_id)
    print(
        f"rebuild of {table_id} requested ({request.id}): the running connector deletes its folder, waits until "
        "Fabric dropped the table, then asks Debezium for an incremental snapshot; follow it with `tables`"
    )
    if wait_s <= 0:
        return 0
    deadline = clock() + wait_s
    while clock() < deadline:
        table = BatchLedger(checkpoint).state.tables.get(table_id)
        lifecycle = table.lifecycle if table is not None else None
        if lifecycle is not None and lifecycle.request == request.id and lifecycle.phase is Phase.SNAPSHOT_REQUESTED:
            print(f"{table_id}: folder recreated, Debezium snapshot requested")
            return 0
        sleep(WAIT_POLL_S)
    table = BatchLedger(checkpoint).state.tables.get(table_id)
    where = table_state_word(table) if table is not None and table.lifecycle.request == request.id else "not taken yet"
    print(f"{table_id}: rebuild not through after {wait_s:.0f} s ({where}); is the connector running?")
    return 1


def _reason(table: TableState) -> str | None:
    """Why the table stands where it does; for a re-read table, when and why it was re-read."""
    lifecycle = table.lifecycle
    if lifecycle.phase is Phase.SNAPSHOT_REQUESTED:
        # A refresh re-reads the table into its folder; a rebuild recreated the folder first.
        done = "refreshed" if lifecycle.refreshed else "rebuilt"
        return f"{done} {_iso(lifecycle.since)} (was: {lifecycle.reason})"
    return lifecycle.reason if lifecycle.phase is not Phase.RUNNING else None


def _ledger(checkpoint: Storage) -> BatchLedger:
    ledger = BatchLedger(checkpoint)
    if not ledger.has_state:
        msg = f"no ledger at {checkpoint.url}/{STATE_FILE}: is this the connector's checkpoint folder?"
        raise ConfigError(msg)
    return ledger


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
