"""Rename → verify: how a batch's staged files reach their numbered names without ever overwriting one.

Publishing carries out a recorded plan (``connector.publish.ledger``), so a crash is recovered by carrying
it out again; the ledger commits what was published. Staging the files is ``connector.collect.staging``.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from connector.collect.per_table import for_each_table
from connector.collect.staging import digest
from connector.config import MirrorSettings
from connector.errors import LandingZoneCorrupt
from connector.landing_zone.layout import (
    PROCESSED_FOLDERS,
    STAGED_PREFIX,
    discover_tables,
    parse_data_file_name,
    staged_batch_prefix,
)
from connector.publish.batch_result import BatchResult
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_state import BatchPlan, LedgerState, PlannedFile
from connector.storage.base import Storage, join

log = logging.getLogger(__name__)


def highest_number(storage: Storage, folder: str) -> int:
    """Highest data-file number in a table folder, its ``_ProcessedFiles`` and ``_FilesReadyToDelete``.

    Open mirroring deletes processed files but keeps the last one, and moves processed files to those
    folders, so the next number is one past the highest found anywhere (0 when none). Those folders are
    listed only when the table folder's listing shows them: one round trip instead of three without them.
    """
    entries = storage.list_dir(folder)
    for info in [e for e in entries if e.is_dir and e.path.rsplit("/", 1)[-1] in PROCESSED_FOLDERS]:
        entries.extend(storage.list_dir(info.path))
    numbers = [parse_data_file_name(e.path.rsplit("/", 1)[-1]) for e in entries if not e.is_dir]
    return max((parsed[0] for parsed in numbers if parsed), default=0)


def remove_orphans(storage: Storage, folder: str, batch_id: int | None = None) -> int:
    """Delete staged files no plan will publish (only batch ``batch_id``'s, when given); returns how many.

    Without ``batch_id``: at start-up, once every recorded plan is published. With it: once that batch committed
    (every file of its plan renamed), the files a failed attempt of one of its tasks staged; the next batch, which
    may be staging already, is left alone.
    """
    prefix = STAGED_PREFIX if batch_id is None else staged_batch_prefix(batch_id)
    removed = 0
    for info in storage.list_dir(folder):
        name = info.path.rsplit("/", 1)[-1]
        if not info.is_dir and name.startswith(prefix):
            storage.delete(info.path)
            removed += 1
    return removed


def publish_plan(
    storage: Storage, plan: BatchPlan, mirror: MirrorSettings, result: BatchResult, *, workers: int = 1
) -> LedgerState:
    """Publish every file of ``plan``; the state to commit, with the tables that failed stopped.

    Tables are published in parallel (``workers`` at a time), each table's files in number order. A table
    whose file cannot be published (``LandingZoneCorrupt``) publishes none of its later files and is stopped
    (or its rebuild begun); the other tables go on. What was published is counted in ``result``.
    """
    by_table: dict[str, list[PlannedFile]] = {}
    for planned in plan.files:
        by_table.setdefault(planned.table, []).append(planned)
    outcomes = for_each_table(lambda tid: _publish_table(storage, by_table[tid]), list(by_table), workers)
    tables = dict(plan.state.tables)
    failed = False
    for tid, published, error in outcomes:
        for planned in published:
            entry = result.table(tid)
            entry.files += 1
            entry.rows += planned.rows
            if planned.marker_free:
                entry.marker_free_rows += planned.rows
            entry.bytes += planned.size
        if error is not None:
            failed = True
            tables[tid] = tables[tid].with_stop(error, mirror)
            result.stopped[tid] = error
            log.error("table %s stopped: %s", tid, error)
    return plan.state if not failed else replace(plan.state, tables=tables)


def publish_and_commit(
    storage: Storage, ledger: BatchLedger, plan: BatchPlan, mirror: MirrorSettings, result: BatchResult
) -> None:
    """Publish a written plan, then commit it in ``ledger`` (a crash in between redoes the publish)."""
    published = publish_plan(storage, plan, mirror, result, workers=mirror.publish_parallelism)
    ledger.commit(replace(plan, state=published))


def _publish_table(storage: Storage, files: list[PlannedFile]) -> tuple[str, list[PlannedFile], str | None]:
    """One table's files in order: (table, the files published now, why the rest could not be)."""
    published = []
    for planned in files:
        try:
            if publish_file(storage, planned):
                published.append(planned)
        except LandingZoneCorrupt as exc:
            return planned.table, published, str(exc)
    return files[0].table, published, None


def table_folders(storage: Storage, state: LedgerState) -> list[str]:
    """Every table folder: the ledger's, and those found in the landing zone (an earlier writer's too)."""
    folders = {t.folder for t in state.tables.values()}
    folders.update(table.folder for table in discover_tables(storage))
    return sorted(folders)


def remove_leftovers(storage: Storage, state: LedgerState) -> None:
    """Delete interrupted uploads and unplanned staged files, once ``state`` committed every recorded plan."""
    # Uploads a crash cut short (never renamed, so never visible to mirroring) go first.
    for path in storage.cleanup_temporary():
        log.info("removed an interrupted upload: %s", path)
    for folder in table_folders(storage, state):
        removed = remove_orphans(storage, folder)
        if removed:
            log.info("removed %d staged files of an unplanned batch in %s", removed, folder)


def publish_file(storage: Storage, planned: PlannedFile) -> bool:
    """Move one staged file to its numbered name; returns ``False`` when it was already published.

    Raises:
        LandingZoneCorrupt: the numbered name holds other content, or neither file can be found.
    """
    try:
        storage.rename_new(planned.staged, planned.final, size=planned.size)
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
