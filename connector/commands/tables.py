"""``tables`` and ``rebuild``: what each mirrored table is doing, and asking for a table's rebuild.

Both read the ledger in the checkpoint folder without taking the writer fence, so they work beside the
running connector: ``rebuild`` only leaves a request there, which the connector holding the fence
carries out (``connector.publish.rebuild``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

import orjson

from connector.audit.status import read_audit_status
from connector.errors import ConfigError
from connector.operate.job_status import read_job_status
from connector.operate.table_status import TableLine, table_lines, table_state_word
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_format import STATE_FILE
from connector.publish.rebuild import request_rebuild
from connector.storage.base import Storage

__all__ = ["TableLine", "rebuild_command", "table_lines", "table_state_word", "tables_command"]

#: How often ``rebuild --wait`` looks at the ledger.
WAIT_POLL_S = 1.0


def tables_command(checkpoint: Storage, *, as_json: bool, fabric: Mapping[str, Any] | None = None) -> int:
    """Print the job's last status, then the tables; exit 0, or 1 when a table is stopped, 2 when there is no ledger.

    With ``as_json`` the job's status is a first line of its own, ``{"job": {...}}``, before one line per table.
    """
    ledger = _ledger(checkpoint)
    job = read_job_status(checkpoint)
    if job is not None:
        # First: a job that stopped explains why every table stands still (they still say ``running``).
        print(orjson.dumps({"job": asdict(job)}).decode() if as_json else job.text())
    audits = {table: status.text() for table, status in read_audit_status(checkpoint).items()}
    lines = table_lines(ledger.state, fabric, audits)
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
        # Asked for (untracked), or already completed (tracked: the table runs again).
        asked = lifecycle is not None and not lifecycle.skips_events and not lifecycle.awaits_rebuilder
        if asked and lifecycle is not None and lifecycle.request == request.id:
            print(f"{table_id}: folder recreated, Debezium snapshot requested")
            return 0
        sleep(WAIT_POLL_S)
    table = BatchLedger(checkpoint).state.tables.get(table_id)
    where = table_state_word(table) if table is not None and table.lifecycle.request == request.id else "not taken yet"
    print(f"{table_id}: rebuild not through after {wait_s:.0f} s ({where}); is the connector running?")
    return 1


def _ledger(checkpoint: Storage) -> BatchLedger:
    ledger = BatchLedger(checkpoint)
    if not ledger.has_state:
        msg = f"no ledger at {checkpoint.url}/{STATE_FILE}: is this the connector's checkpoint folder?"
        raise ConfigError(msg)
    return ledger
