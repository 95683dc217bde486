"""A DOUBLE of Fabric's open-mirroring replicator, for tests: Fabric cannot run here.

It does to a local folder what Fabric does to a mirrored database's item in OneLake (the layout of
``connector.readback.mirrored_tables``):

- the landing zone is ``<root>/Files/LandingZone``, the Delta tables ``<root>/Tables/<schema>/<table>`` (``dbo``
  for a table folder outside a ``<schema>.schema`` folder);
- per table folder, files are taken by their 20-digit number, continuously from the next number it expects
  (a missing number blocks the table's later files, as Fabric's ``SequentialFileName`` detection does), with the
  rules of ``_metadata.json`` (``keyColumns``, ``isUpsertDefaultRowMarker``) and of ``__rowMarker__``
  (0 insert without a duplicate check, 1/4 replace or insert, 2 delete; a marker-free file is all inserts, or
  upserts with ``isUpsertDefaultRowMarker``): the Delta oracle's rules and engine (``FileApplier`` and
  ``DeltaWriter``), so the double and ``verify --landing-zone`` cannot hold two opinions;
- each file applied is moved to ``_ProcessedFiles`` and deleted ``retention_s`` seconds later, except the table's
  last one, which stays so the publisher can number the next file (Fabric waits seven days);
- a table folder that is deleted drops its Delta table; one recreated (the connector's rebuild) is applied anew.

A table whose file the rules refuse stops (``stopped``), as Fabric stops that table; the others go on.
``poll()`` does one round; ``start()`` polls on a thread every ``interval_s`` until ``stop()``.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from connector.landing_zone.layout import METADATA_FILE, TableRef, discover_tables, parse_data_file_name
from connector.readback.delta_oracle import DeltaWriter
from connector.readback.file_applier import FileApplier, TableRefused
from connector.readback.landing_reader import DataFile, read_data_file
from connector.readback.mirrored_tables import table_path
from connector.storage import LocalStorage

PROCESSED = "_ProcessedFiles"


@dataclass
class _Table:
    """One mirrored table: its folder's identity, the rules' state, its Delta table, the next number it takes."""

    folder_id: int
    """The folder's inode: a recreated folder is another table (Fabric tracks the folder's ETag)."""
    applier: FileApplier
    writer: DeltaWriter
    next_number: int = 1
    processed: dict[int, float] = field(default_factory=dict)
    """Numbers moved to ``_ProcessedFiles`` → when (the clock's seconds)."""


class FabricReplicatorDouble:
    """Fabric's replicator, doubled over local folders (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        *,
        retention_s: float = 30.0,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.landing_zone = root / "Files" / "LandingZone"
        self.tables = root / "Tables"
        self.landing_zone.mkdir(parents=True, exist_ok=True)
        self.tables.mkdir(parents=True, exist_ok=True)
        self.retention_s = retention_s
        self.interval_s = interval_s
        self.clock = clock
        self.stopped: dict[str, str] = {}
        """Table id → why the double stopped it (a refused file)."""
        self.errors: list[str] = []
        """What failed a polling round on the thread (a test asserts there is none)."""
        self._tables: dict[str, _Table] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def table_dir(self, table: TableRef) -> Path:
        """The Delta table of ``table`` (``Tables/<schema>/<table>``)."""
        return self.tables / table_path(table)

    # -- one round ------------------------------------------------------------------------------------

    def poll(self) -> int:
        """Take every file that is next in its table's order; delete processed files past retention.

        Returns the number of files applied.
        """
        with self._lock:
            storage = LocalStorage(str(self.landing_zone))
            present = {ref.id: ref for ref in discover_tables(storage)}
            for gone in set(self._tables) - set(present):
                self._drop(gone)
            applied = 0
            for ref in present.values():
                if ref.id not in self.stopped:
                    applied += self._take(storage, ref)
            self._clean(present)
            return applied

    def _take(self, storage: LocalStorage, ref: TableRef) -> int:
        folder = self.landing_zone / ref.folder
        if not (folder / METADATA_FILE).is_file():
            return 0  # a folder being set up: its keys are not known yet, and they never change once written
        state = self._state(storage, ref)
        waiting = {}
        for path in folder.iterdir():
            parsed = parse_data_file_name(path.name) if path.is_file() else None
            if parsed is not None and parsed[1] == state.applier.file_format.extension:
                waiting[parsed[0]] = path
        applied = 0
        while state.next_number in waiting:
            number = state.next_number
            path = waiting[number]
            data_file = DataFile(number, path.suffix[1:], f"{ref.folder}/{path.name}", path.stat().st_size, "")
            try:
                data = read_data_file(storage, data_file.path, state.applier.file_format)
                state.writer.apply(state.applier.change(data_file, data))
            except TableRefused as exc:
                self.stopped[ref.id] = str(exc)
                return applied
            (folder / PROCESSED).mkdir(exist_ok=True)
            os.replace(path, folder / PROCESSED / path.name)
            state.processed[number] = self.clock()
            state.next_number += 1
            applied += 1
        return applied

    def _state(self, storage: LocalStorage, ref: TableRef) -> _Table:
        """The table's state; a new one (its Delta table dropped) when its folder was recreated."""
        folder_id = (self.landing_zone / ref.folder).stat().st_ino
        known = self._tables.get(ref.id)
        if known is not None and known.folder_id == folder_id:
            return known
        if known is not None:
            self._drop(ref.id)
        target = self.table_dir(ref)
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        applier = FileApplier.open(storage, ref, delta_types=True)
        state = _Table(folder_id, applier, DeltaWriter(uri=str(target), key_columns=applier.key_columns))
        self._tables[ref.id] = state
        return state

    def _drop(self, table_id: str) -> None:
        self._tables.pop(table_id, None)
        self.stopped.pop(table_id, None)
        schema, _, name = table_id.rpartition(".")
        shutil.rmtree(self.table_dir(TableRef(schema or None, name)), ignore_errors=True)

    def _clean(self, present: dict[str, TableRef]) -> None:
        """Delete processed files older than the retention, but never a table's last file."""
        now = self.clock()
        for table_id, state in self._tables.items():
            last = state.next_number - 1
            for number, when in list(state.processed.items()):
                if number != last and now - when >= self.retention_s:
                    path = self.landing_zone / present[table_id].folder / PROCESSED
                    for found in path.glob(f"{number:020d}.*"):
                        found.unlink()
                    del state.processed[number]

    # -- on a thread ----------------------------------------------------------------------------------

    def start(self) -> FabricReplicatorDouble:
        """Poll every ``interval_s`` on a thread until ``stop()``; returns itself (use as a context manager)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="fabric-replicator-double", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - kept for the test to see; the next round tries again
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        """Stop polling (after the round under way)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> FabricReplicatorDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_until_applied(self, table: TableRef, through: int, timeout_s: float = 120.0) -> None:
        """Wait until the double applied ``table``'s files up to number ``through`` (a test's sync point)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self._tables.get(table.id)
            if state is not None and state.next_number > through:
                return
            if table.id in self.stopped:
                msg = f"the replicator double stopped {table.id}: {self.stopped[table.id]}"
                raise AssertionError(msg)
            time.sleep(0.2)
        msg = f"the replicator double did not apply {table.id} through file {through} within {timeout_s}s"
        raise AssertionError(msg)
