"""What auditing one table finds: the table audited, its confirmed differences and repair, or its withdrawal."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from connector.landing_zone.layout import TableRef
from connector.readback.chunk_compare import Key


@dataclass(frozen=True)
class AuditTarget:
    """One table to audit: its landing-zone reference and key columns (``_metadata.json``'s)."""

    ref: TableRef
    key_columns: tuple[str, ...]

    @property
    def id(self) -> str:
        """``schema.table``."""
        return self.ref.id


@dataclass
class AuditFinding:
    """One table's audit: what was read, what differs for sure, and the repair chosen."""

    table: str
    rows_checked: int = 0
    deletes: list[Key] = field(default_factory=list)
    """Keys the mirror holds that the source lacks (or holds more than once), as the mirror holds them."""
    rereads: list[Key] = field(default_factory=list)
    """Keys whose mirror row is missing or differs (and the ``deletes``), as the source gives them."""
    missing_files: list[int] = field(default_factory=list)
    column_notes: list[str] = field(default_factory=list)
    nudge: Key | None = None
    """A key the source has, re-read with the deletes so the stream gets a batch to publish them with."""
    lagging: bool = False
    """The mirror did not catch up within ``settle_s``: nothing is judged this round."""
    repair: str = "none"
    repair_error: str | None = None
    """Why the chosen repair could not be asked for (the next round finds the difference again)."""
    """``none``, ``rows`` (deletes and re-reads), ``rebuild`` or ``lagging``."""
    finished_at: float = field(default_factory=time.time)

    @property
    def differences(self) -> int:
        """Confirmed differences: differing keys, a column set that differs, missing files (each counts)."""
        keys = {repr(k) for k in self.rereads} | {repr(k) for k in self.deletes}
        return len(keys) + len(self.column_notes) + len(self.missing_files)

    @property
    def clean(self) -> bool:
        """Compared, and nothing differs."""
        return not self.lagging and not self.differences

    def line(self) -> str:
        """The audit's log line for the table."""
        if self.lagging:
            return f"audit {self.table}: the mirror did not catch up in time; judged next round"
        if self.clean:
            return f"audit {self.table}: clean ({self.rows_checked} rows checked)"
        what = [f"{len(self.rereads)} keys to re-read", f"{len(self.deletes)} keys to delete"]
        what += self.column_notes
        if self.missing_files:
            what.append(f"files {self.missing_files[0]}..{self.missing_files[-1]} missing before Fabric took them")
        examples = ", ".join(repr(k) for k in (self.deletes + self.rereads)[:5])
        return (
            f"audit {self.table}: {self.differences} differences ({'; '.join(what)}; e.g. {examples}) -> {self.repair}"
        )


Withdrawn = Callable[[str], str | None]
"""Why a table is out of the audit now (its rebuild or refresh requested or under way), ``None`` while it may be
judged (``MirrorSink.healing``)."""


class TableWithdrawn(Exception):  # noqa: N818 - an outcome of the audit, not a failure
    """The table's rebuild or refresh was requested while it was compared: nothing of it is judged this round."""

    def __init__(self, table: str, why: str) -> None:
        super().__init__(table, why)
        self.table = table
        self.why = why

    def __str__(self) -> str:
        return f"{self.table}: {self.why}"


def never_withdrawn(table_id: str) -> str | None:
    """The ``Withdrawn`` of an audit that nothing withdraws tables from."""
    return None


def unique_keys(keys: Sequence[Key]) -> list[Key]:
    """``keys`` without repeats (told apart by ``repr``), in order."""
    seen: dict[str, Key] = {}
    for key in keys:
        seen.setdefault(repr(key), key)
    return list(seen.values())
