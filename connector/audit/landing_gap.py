"""Files of a table missing from the landing zone before Fabric took them: a gap Fabric never reads past."""

from __future__ import annotations

from connector.landing_zone.layout import TableRef, parse_data_file_name
from connector.readback.mirrored_tables import waiting_files
from connector.storage.base import Storage

PROCESSED_FOLDERS = ("_ProcessedFiles", "_FilesReadyToDelete")


def missing_files(landing: Storage, table: TableRef) -> list[int]:
    """Numbers Fabric waits for that are gone: below the first waiting file, neither waiting nor processed.

    Fabric keeps a table's last processed file, so the number before the first waiting one is found unless it was
    removed before Fabric took it (a gap Fabric's sequential detection never passes).
    """
    waiting = waiting_files(landing, table)
    if not waiting or waiting[0] <= 1:
        return []
    processed: set[int] = set()
    for folder in PROCESSED_FOLDERS:
        for entry in landing.list_dir(f"{table.folder}/{folder}"):
            parsed = None if entry.is_dir else parse_data_file_name(entry.path.rsplit("/", 1)[-1])
            if parsed is not None:
                processed.add(parsed[0])
    below = max((n for n in processed if n < waiting[0]), default=0)
    return list(range(below + 1, waiting[0])) if below + 1 < waiting[0] and (below or not processed) else []
