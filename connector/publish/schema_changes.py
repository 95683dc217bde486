"""A table's schema change in the source, seen in its events, and what the mirror does about it.

Fabric's open mirroring unions an added column (existing rows NULL), keeps the old values of a column new files
lack, and stops a table whose column type changes; Microsoft's own mirroring re-snapshots a table on DDL. So the
mirror stays equal to the source only if the connector acts (``mirror.schema_changes``, per table overridable):

- column added: existing rows hold NULL in the source only for a nullable column without a default; otherwise
  (NOT NULL, a default, or an encoding that cannot tell: schemaless JSON) the table is **refreshed**: Debezium
  re-reads it as upserts into the same folder, and Fabric gives every row its value (``union`` opts out);
- column removed, or renamed (removed + added): the table is **rebuilt** (folder deleted, Fabric waited for,
  re-snapshot), since Fabric would keep the removed column's values forever (``keep`` opts out);
- a column's type, or the key columns: rebuilt (``stop`` leaves it to an operator).

The columns are compared with those of the table's last event the ledger recorded (``TableState.source_columns``),
not with the files' columns: a file may lack a column for other reasons. Postgres sends no DDL event, so a change
is seen at the table's next event.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Literal

from connector.collect.pieces import SourceShape
from connector.config import MirrorSettings, SchemaChangeSettings
from connector.publish.ledger_state import TableState

log = logging.getLogger(__name__)

ChangeKind = Literal["column_added", "column_removed", "type_changed", "key_changed"]
Action = Literal["refresh", "union", "rebuild", "keep", "stop"]


@dataclass(frozen=True)
class SchemaChange:
    """One schema change of one table, and the action its policy chose."""

    table: str
    kind: ChangeKind
    action: Action
    detail: str  # before → after, for the log line and ``tables``
    columns: tuple[str, ...] = ()  # the columns that decided it: removed ones, or added ones existing rows may fill

    @property
    def reason(self) -> str:
        """The lifecycle's reason: what changed and what is done."""
        return f"schema change ({self.kind.replace('_', ' ')}: {self.detail}): {self.action}"


def column_change(
    table: str, recorded: tuple[str, ...] | None, shape: SourceShape | None, policy: SchemaChangeSettings
) -> SchemaChange | None:
    """The column-set change from ``recorded`` to ``shape``, with its action; ``None`` when there is none.

    A removal decides over an addition in the same event (a rename): both need the folder rebuilt.
    """
    if recorded is None or shape is None or shape.columns == recorded:
        return None
    before, after = set(recorded), set(shape.columns)
    removed = [c for c in recorded if c not in after]
    added = [c for c in shape.columns if c not in before]
    if removed:
        detail = _detail(removed, added)
        action: Action = "rebuild" if policy.column_removed == "rebuild" else "keep"
        return SchemaChange(table, "column_removed", action, detail, tuple(removed))
    if not added:
        return None  # the same columns in another order: Fabric matches columns by name
    filled = [c for c in added if c not in shape.unfilled]
    if not filled:
        return SchemaChange(table, "column_added", "union", f"+{', +'.join(added)} (nullable, no default)")
    action = "refresh" if policy.column_added == "refresh" else "union"
    detail = f"+{', +'.join(added)} (existing rows may hold a value)"
    return SchemaChange(table, "column_added", action, detail, tuple(filled))


def stop_action(table: str, kind: str, reason: str, policy: SchemaChangeSettings) -> SchemaChange:
    """A change that stopped the table, with what its policy does: rebuild, or stop.

    ``kind`` is a ``SchemaChanged`` error's: a type or key change, or a column removal ``column_change`` already
    decided to rebuild for.
    """
    if kind == "type_changed":
        return SchemaChange(table, "type_changed", policy.type_changed, reason)
    if kind == "key_changed":
        return SchemaChange(table, "key_changed", policy.key_changed, reason)
    return SchemaChange(table, "column_removed", "rebuild", reason)


def _detail(removed: list[str], added: list[str]) -> str:
    text = f"-{', -'.join(removed)}"
    return f"{text} +{', +'.join(added)}" if added else text


def log_change(change: SchemaChange) -> None:
    """The decision's one log line: table, kind, columns before → after, action."""
    log.warning("table %s: schema change %s (%s): %s", change.table, change.kind, change.detail, change.action)


# -- a table's state after each way a change is seen; each returns the change it acted on, logged ------------------


def after_events(
    tid: str, table: TableState, shape: SourceShape, mirror: MirrorSettings, *, now: float
) -> tuple[TableState, SchemaChange | None]:
    """The table after its published events' columns: recorded, and a refresh begun where one is due.

    Columns a DDL-time refresh re-read already (``after_ddl``) need no second refresh.
    """
    change = column_change(tid, table.source_columns, shape, mirror.schema_changes_for(table.topic))
    refreshed = table.ddl_refreshed
    table = replace(
        table, source_columns=shape.columns, ddl_refreshed=tuple(c for c in refreshed if c not in shape.columns)
    )
    if change is None:
        return table, None
    if change.action == "refresh" and set(change.columns) <= set(refreshed):
        log.info("table %s: columns %s were refreshed when their DDL was read", tid, ", ".join(change.columns))
        return table, None
    log_change(change)
    if change.action == "refresh":
        table = replace(table, lifecycle=table.lifecycle.begin_refresh(change.reason, now=now))
    return table, change


def after_ddl(
    tid: str, table: TableState, shape: SourceShape, mirror: MirrorSettings, *, now: float
) -> tuple[TableState, SchemaChange | None]:
    """A table a DDL altered (MySQL/MariaDB's schema change topic): refreshed where existing rows gained a value.

    No row event may ever show such a column (a table altered and left alone), so the DDL does that much. Only
    that: the schema change topic is not ordered with the table's own topic, and a DDL may be read before events
    older than it (a connector catching up). So its columns are not recorded, and every other change (a removal,
    a nullable addition) waits for the table's events, which show it in their own order. A refresh is safe
    whenever it comes: the snapshot's reads are upserts of the rows as they are now.
    """
    change = column_change(tid, table.source_columns, shape, mirror.schema_changes_for(table.topic))
    if change is None or change.action != "refresh":
        return table, None
    new = tuple(c for c in change.columns if c not in table.ddl_refreshed)
    if not new:
        return table, None  # this DDL's refresh was begun already (the DDL read again after a restart)
    log_change(change)
    lifecycle = table.lifecycle.begin_refresh(change.reason, now=now)
    return replace(table, lifecycle=lifecycle, ddl_refreshed=(*table.ddl_refreshed, *new)), change


def after_stop(
    tid: str, table: TableState, reason: str, kind: str, mirror: MirrorSettings
) -> tuple[TableState, SchemaChange]:
    """A table a schema change stopped (``SchemaChanged``): rebuilt, or stopped as ``on_table_stopped`` says."""
    change = stop_action(tid, kind, reason, mirror.schema_changes_for(table.topic))
    log_change(change)
    # 'stop' is today's stop: on_table_stopped still decides whether an automatic rebuild follows.
    return table.with_stop(change.reason, mirror, rebuild=True if change.action == "rebuild" else None), change
