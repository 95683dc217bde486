"""A table's stop, and the rebuild phases the ledger records for it (the phases are run by ``operate.rebuild``).

Publishing stops a table whose file cannot be published, and the sink one whose slice failed; either way
``stop_or_rebuild`` decides whether it stays stopped or (``on_table_stopped: rebuild``) its rebuild begins.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from connector.config import MirrorSettings
from connector.publish.ledger import TableState

log = logging.getLogger(__name__)

DELETING = "deleting"
WAITING = "waiting-for-fabric"
SNAPSHOT_REQUESTED = "snapshot-requested"
#: Phases during which the table publishes nothing and its events are skipped.
BLOCKING_PHASES = frozenset({DELETING, WAITING})
#: After this long without an automatic rebuild, a table's automatic rebuilds are counted afresh.
AUTOMATIC_COUNT_RESET_S = 86_400.0


def is_rebuilding(table: TableState) -> bool:
    """Whether the table is between the deletion of its folder and the snapshot request."""
    return table.rebuild in BLOCKING_PHASES


def stop_or_rebuild(
    table: TableState, reason: str, mirror: MirrorSettings, clock: Callable[[], float] = time.time
) -> TableState:
    """The state of a table that just stopped: stopped, or (``on_table_stopped: rebuild``) its rebuild begun."""
    if mirror.on_table_stopped != "rebuild":
        return replace(table, stopped=reason)
    now = clock()
    count = table.automatic_rebuilds
    if table.rebuild_at is not None and now - table.rebuild_at > AUTOMATIC_COUNT_RESET_S:
        count = 0
    if count >= mirror.rebuild.max_automatic:
        gave_up = f"{reason} (not rebuilt automatically: {count} automatic rebuild(s) already; run `rebuild`)"
        return replace(table, stopped=gave_up)
    log.warning("table stopped: %s; rebuilding it automatically (attempt %d)", reason, count + 1)
    return replace(begin_rebuild(table, reason, clock), automatic_rebuilds=count + 1)


def begin_rebuild(table: TableState, reason: str, clock: Callable[[], float] = time.time) -> TableState:
    """The table stopped with its rebuild begun (``deleting``), whatever ``on_table_stopped`` says.

    For what only a rebuild repairs and no setting should leave stopped: a second snapshot pass during the table's
    initial load (``connector.publish.initial_load``).
    """
    return replace(
        table, stopped=reason, rebuild=DELETING, rebuild_at=clock(), rebuild_request=None, rebuild_reason=reason
    )
