"""File numbering: which number a table's next file takes, from the ledger, checked against the landing zone.

The ledger owns the numbers (``TableState.next_number``). The first time this process publishes a table, the
landing zone is listed once: files from an earlier writer are continued after, never over, and a ledger
that is ahead of or behind the files (another writer, a restored copy) stops the table instead of leaving a
gap or a duplicate number. What was checked is kept only once the batch that checked it commits.
"""

from __future__ import annotations

from connector.errors import LandingZoneCorrupt, rebuild_hint
from connector.landing_zone.layout import TableRef
from connector.publish.ledger_state import TableState
from connector.publish.publisher import highest_number
from connector.storage.base import Storage


class FileNumbering:
    """Checks each table's numbering against the landing zone once per process (per committed batch)."""

    def __init__(self, landing: Storage) -> None:
        self.landing = landing
        self._checked: set[str] = set()
        self._pending: set[str] = set()

    def table_state(self, ref: TableRef, known: TableState | None, *, recreate: bool) -> TableState:
        """The state ``ref``'s next files continue from (``recreate``: its folder is deleted and numbering restarts).

        Raises:
            LandingZoneCorrupt: the landing zone and the ledger disagree about the table's last file.
        """
        tid = ref.id
        if recreate:
            self.landing.delete_tree(ref.folder)
            self._pending.add(tid)
            return TableState(folder=ref.folder)
        if tid in self._checked or tid in self._pending:
            return known or TableState(folder=ref.folder)
        highest = highest_number(self.landing, ref.folder)
        self._pending.add(tid)
        if known is None:
            # Files from an earlier writer or checkpoint: continue after them, never over them.
            return TableState(folder=ref.folder, next_number=highest + 1)
        if highest >= known.next_number:
            msg = (
                f"{self.landing.url}/{ref.folder} holds file number {highest}, but the ledger's next number is "
                f"{known.next_number}: another writer is using this landing zone, or the checkpoint is older "
                "than the landing zone"
            )
            raise LandingZoneCorrupt(msg)
        check_no_gap(self.landing, ref, known, highest)
        return known

    def commit(self) -> None:
        """The batch committed: its checks hold from now on."""
        self._checked |= self._pending
        self._pending.clear()

    def forget_all(self) -> None:
        """A batch failed: what it (or an earlier batch) learnt of the landing zone is checked again."""
        self._checked.clear()
        self._pending.clear()

    def forget(self, table_id: str) -> None:
        """The table's folder was deleted or recreated outside a batch (a rebuild)."""
        self._checked.discard(table_id)
        self._pending.discard(table_id)


def check_no_gap(landing: Storage, ref: TableRef, known: TableState, highest: int | None = None) -> None:
    """The ledger's last file of ``ref`` must still be there (``highest``: the folder's highest number, if listed).

    Mirroring deletes processed files but always keeps the last one (here or in _ProcessedFiles /
    _FilesReadyToDelete), so without it the next file would follow a gap that mirroring never fills: the
    files, or the whole folder, were deleted outside the connector.

    Raises:
        LandingZoneCorrupt: the ledger's last file is missing.
    """
    if highest is None:
        highest = highest_number(landing, ref.folder)
    if highest + 1 >= known.next_number:
        return
    found = f"its highest file number is {highest}" if highest else "it holds no numbered file"
    msg = (
        f"{landing.url}/{ref.folder}: the ledger published files up to number "
        f"{known.next_number - 1}, but {found} (also counting _ProcessedFiles and _FilesReadyToDelete): "
        "files were deleted outside the connector or the landing zone was restored from an older copy, "
        f"and the next file would leave a gap; to recover, {rebuild_hint(ref.id)}"
    )
    raise LandingZoneCorrupt(msg)
