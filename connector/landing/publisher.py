"""Stage → rename → verify: how files reach their numbered names without ever overwriting one."""

from __future__ import annotations

import hashlib
import logging

from connector.errors import LandingZoneCorrupt
from connector.landing.layout import PROCESSED_FOLDERS, STAGED_PREFIX, parse_data_file_name
from connector.landing.ledger import PlannedFile
from connector.storage.base import Storage, join

log = logging.getLogger(__name__)


def digest(data: bytes) -> str:
    """Content hash recorded in the plan and checked when a destination already exists."""
    return hashlib.sha256(data).hexdigest()


def highest_number(storage: Storage, folder: str) -> int:
    """Highest data-file number in a table folder, its ``_ProcessedFiles`` and ``_FilesReadyToDelete``.

    Open mirroring deletes processed files but keeps the last one, and moves processed files to those
    folders, so the next number is one past the highest found anywhere (0 when none).
    """
    highest = 0
    for sub in ("", *PROCESSED_FOLDERS):
        for info in storage.list_dir(join(folder, sub)):
            if info.is_dir:
                continue
            parsed = parse_data_file_name(info.path.rsplit("/", 1)[-1])
            if parsed:
                highest = max(highest, parsed[0])
    return highest


def remove_orphans(storage: Storage, folder: str, keep: set[str]) -> int:
    """Delete staged files of batches that never reached a plan; returns how many."""
    removed = 0
    for info in storage.list_dir(folder):
        name = info.path.rsplit("/", 1)[-1]
        if not info.is_dir and name.startswith(STAGED_PREFIX) and info.path not in keep:
            storage.delete(info.path)
            removed += 1
    return removed


def publish_file(storage: Storage, planned: PlannedFile) -> bool:
    """Move one staged file to its numbered name; returns ``False`` when it was already published.

    Raises:
        LandingZoneCorrupt: the numbered name holds other content, or neither file can be found.
    """
    try:
        storage.rename_new(planned.staged, planned.final)
        return True
    except FileExistsError:
        if _holds(storage, planned.final, planned):
            storage.delete(planned.staged)  # link made, unlink lost to a crash: the file is ours
            return False
        msg = (
            f"{storage.url}/{planned.final} already exists with other content; the connector never overwrites "
            f"a numbered file (table {planned.table}): another writer is using this landing zone, or the "
            "checkpoint was restored from an older copy"
        )
        raise LandingZoneCorrupt(msg) from None
    except FileNotFoundError:
        if storage.exists(planned.final) or _moved_by_mirroring(storage, planned.final):
            return False  # renamed before a crash
        if highest_number(storage, planned.final.rpartition("/")[0]) >= planned.number:
            # Renamed before a crash, then processed and deleted by the mirroring service: it keeps only the
            # last file, and a number this high exists only once this plan's renames (in order) reached it.
            return False
        msg = (
            f"neither the staged file {storage.url}/{planned.staged} nor {planned.final} exists "
            f"(table {planned.table}); the landing zone was changed outside the connector"
        )
        raise LandingZoneCorrupt(msg) from None


def _holds(storage: Storage, path: str, planned: PlannedFile) -> bool:
    if storage.size(path) != planned.size:
        return False
    return digest(storage.read_bytes(path)) == planned.sha256


def _moved_by_mirroring(storage: Storage, final: str) -> bool:
    folder, _, name = final.rpartition("/")
    return any(storage.exists(join(folder, sub, name)) for sub in PROCESSED_FOLDERS)
