"""A finding's repair, carried out through the running stream (``Repairs``, ``connector.audit.loop``'s)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from connector.audit.finding import AuditFinding, unique_keys
from connector.readback.chunk_compare import Key


class Repairs(Protocol):
    """What the audit asks of the running stream (``connector.audit.loop``)."""

    def delete(self, table_id: str, keys: Sequence[Key]) -> None:
        """Publish delete rows for ``keys`` (as the mirror holds them) through the sink."""

    def reread(self, table_id: str, keys: Sequence[Key]) -> None:
        """Ask Debezium to read ``keys`` again (their current rows become upserts)."""

    def rebuild(self, table_id: str, reason: str) -> None:
        """Ask for a rebuild of the table."""


def repair(finding: AuditFinding, repairs: Repairs) -> None:
    """Carry out ``finding``'s repair: deletes first, then the re-reads (so a row written again comes back)."""
    if finding.repair == "rebuild":
        repairs.rebuild(finding.table, _rebuild_reason(finding))
    elif finding.repair == "rows":
        if finding.deletes:
            repairs.delete(finding.table, finding.deletes)
        rereads = finding.rereads if finding.nudge is None else unique_keys([*finding.rereads, finding.nudge])
        if rereads:
            repairs.reread(finding.table, rereads)


def _rebuild_reason(finding: AuditFinding) -> str:
    if finding.missing_files:
        first, last = finding.missing_files[0], finding.missing_files[-1]
        return f"audit: files {first}..{last} left the landing zone before Fabric took them"
    if finding.column_notes:
        return f"audit: the column set differs ({'; '.join(finding.column_notes)})"
    return f"audit: {finding.differences} differing keys (more than mirror.audit.repair_threshold)"
