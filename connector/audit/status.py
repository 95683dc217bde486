"""Each table's last audit (``mirror.audit``), kept in the checkpoint so ``tables`` shows it beside the table.

The running job's audit writes it after each table (``connector.audit.compare``); ``tables`` reads it without the
writer fence, like the job status.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import orjson

from connector.storage.base import Storage

log = logging.getLogger(__name__)

AUDIT_STATUS_FILE = "audit-status.json"


@dataclass(frozen=True)
class TableAuditStatus:
    """One table's last audit: when, what it found, what it did, and when it was last found clean."""

    at: float
    rows_checked: int
    differences: int
    repair: str
    last_clean_at: float | None = None
    repair_error: str | None = None
    """Why the repair could not be asked for; absent in files written before it was kept apart from ``repair``."""

    def text(self) -> str:
        """``2026-01-02T03:04:05Z:clean`` or ``...:3 differences -> rows``, as ``tables`` shows it."""
        when = datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.repair == "lagging":
            return f"{when}:mirror lagging"
        if not self.differences:
            return f"{when}:clean"
        failed = f" (failed: {self.repair_error})" if self.repair_error else ""
        return f"{when}:{self.differences} differences -> {self.repair}{failed}"


def read_audit_status(checkpoint: Storage) -> dict[str, TableAuditStatus]:
    """Each audited table's last audit; empty when the audit never ran (or its file is unreadable)."""
    try:
        raw = orjson.loads(checkpoint.read_bytes(AUDIT_STATUS_FILE))
        return {str(table): TableAuditStatus(**fields) for table, fields in dict(raw).items()}
    except FileNotFoundError:
        return {}
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        log.warning("the audit status %s/%s is unreadable (%s)", checkpoint.url, AUDIT_STATUS_FILE, exc)
        return {}


def write_audit_status(checkpoint: Storage, table: str, status: TableAuditStatus) -> None:
    """Record ``table``'s last audit (the clean time carried over from the previous one when this one differs)."""
    known = read_audit_status(checkpoint)
    previous = known.get(table)
    if status.last_clean_at is None and previous is not None:
        status = TableAuditStatus(**{**asdict(status), "last_clean_at": previous.last_clean_at})
    known[table] = status
    checkpoint.replace(AUDIT_STATUS_FILE, orjson.dumps({t: asdict(s) for t, s in sorted(known.items())}))
