"""Planning one table's files of a batch on the driver: number its staged files, after the checks they need.

The executors (or this process) staged the files; here each table gets, in (topic, partition, offset) order,
the next numbers from the ledger, after the checks only the driver can make: the landing zone still holds the
ledger's last file, ``_metadata.json`` says what the files need, the column types match the established
ones. Tables are independent, so the sink plans them in parallel.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import pyarrow as pa

from connector.collect.encoding import FileFormat
from connector.collect.pieces import StagedFile
from connector.collect.staging import TableChange, cast_to, restage, with_insert_marker, with_marker
from connector.collect.table_buffer import MARKER_TYPE
from connector.config import MirrorSettings
from connector.errors import LandingZoneCorrupt
from connector.events import ROW_MARKER_COLUMN
from connector.landing_zone.layout import METADATA_FILE, TableRef, data_file_name
from connector.landing_zone.metadata import ensure_partner_events
from connector.publish.initial_load import check_initial_load, snapshot_read_in, snapshot_reset
from connector.publish.ledger_state import PlannedFile, TableState
from connector.publish.metadata import ensure_table_metadata, table_metadata
from connector.publish.numbering import FileNumbering, check_no_gap
from connector.publish.table_rows import TableFiles, merge_schema
from connector.storage.base import Storage, join

log = logging.getLogger(__name__)


class TablePlanner:
    """Numbers tables' staged files and checks them against the ledger and the landing zone; renames nothing."""

    def __init__(self, landing: Storage, mirror: MirrorSettings, numbering: FileNumbering) -> None:
        self.landing = landing
        self.mirror = mirror
        self.numbering = numbering
        self.format = FileFormat(mirror.file_format, mirror.compression)
        self._partner_events_written = False
        # Each table's _metadata.json content this process wrote or found equal (``_ensure_metadata``).
        self._metadata: dict[str, dict[str, object]] = {}

    def partner_events(self, connector: str | None) -> None:
        """``_partnerEvents.json`` once per process, before the first data file (an existing one is kept)."""
        if self._partner_events_written:
            return
        source_type = self.mirror.source_type or connector or "Debezium"
        ensure_partner_events(self.landing, self.mirror.partner_name, source_type, self.mirror.source_version)
        self._partner_events_written = True

    def plan(
        self, ref: TableRef, files: TableFiles | None, known: TableState | None, *, recreate: bool
    ) -> tuple[TableState, list[PlannedFile]]:
        """The table's state after the batch, and its staged files planned under their numbers.

        Raises:
            TableStopped: the files' types conflict with the established schema, or ``_metadata.json`` with
                what the table needs; ``TableReset`` when Debezium snapshotted the table again (its rebuild).
            LandingZoneCorrupt: the landing zone and the ledger disagree (the folder deleted outside us).
        """
        # A truncate under ``recreate`` deletes the folder, with the files this batch staged after the truncate
        # in it: they are kept aside (one table of one batch, a rare event) and staged again.
        kept = {f.path: self.landing.read_bytes(f.path) for f in files.staged} if recreate and files else {}
        table_state = self.numbering.table_state(ref, known, recreate=recreate)
        for path, data in kept.items():
            self.landing.create(path, data)
        if files is None or files.schema is None or not files.staged:  # a zero-row file is published too
            return table_state, []
        check = check_initial_load(files.pieces, table_state)
        reset = snapshot_reset(ref.id, check)
        if reset is not None:
            raise reset  # its rebuild re-reads the table: none of this batch's files of it are published
        topic, partition, offset = files.first
        where = f"{topic}[{partition}]@{offset}: " if topic else ""
        merged = merge_schema(ref.id, table_state.arrow_schema(), files.schema, where)
        with_marker_field = files.schema.append(pa.field(ROW_MARKER_COLUMN, MARKER_TYPE, nullable=False))
        extra = self.format.metadata_properties(with_marker_field.empty_table())
        self._ensure_metadata(ref, table_metadata(files.key_columns, extra), table_state)
        staged, incremental = self._in_order(files, table_state.incremental)
        number = table_state.next_number
        planned = []
        for item in staged:
            final = join(ref.folder, data_file_name(number, self.format.extension))
            planned.append(
                PlannedFile(
                    ref.id, number, item.path, final, item.size, item.sha256, item.rows, marker_free=not item.has_marker
                )
            )
            number += 1
        new_state = replace(
            table_state.with_schema(merged),
            next_number=number,
            key_columns=files.key_columns,
            keyless=not files.key_columns,
            snapshot_expected=table_state.snapshot_expected and not snapshot_read_in(files.pieces),
            incremental=incremental,
            initial_load_ended=check.ended,
            snapshot_pass_ended=check.pass_ended,
            marker_free_rows=table_state.marker_free_rows + sum(p.rows for p in planned if p.marker_free),
            rows_published=table_state.rows_published + len(files),
            files_published=table_state.files_published + len(planned),
            last_published_at=time.time(),
        )
        return new_state, planned

    def _in_order(self, files: TableFiles, incremental: bool) -> tuple[list[StagedFile], bool]:
        """The staged files in order, each rewritten if it cannot stand as staged; whether any has the marker.

        Parquet only (delimited text holds no types, and always has the marker): a piece whose column types
        another partition widened is cast to the batch's types, and a marker-free file that would follow a
        file with the marker gets it (as upserts): a table's files never go back to marker-free.
        """
        out: list[StagedFile] = []
        schema = files.schema
        assert schema is not None  # noqa: S101 - planned tables have rows
        types = {f.name: f.type for f in schema}
        for piece in files.pieces:
            widened = piece.schema is not None and any(types[f.name] != f.type for f in piece.schema)
            for item in piece.files:
                changes: list[TableChange] = []
                if widened and not self.format.is_delimited:
                    changes.append(cast_to(schema))
                if incremental and not item.has_marker:
                    changes.append(with_marker if files.key_columns else with_insert_marker)
                if changes:
                    item = restage(self.landing, item, self.format, changes)
                incremental = incremental or item.has_marker
                out.append(item)
        return out, incremental

    def _ensure_metadata(self, ref: TableRef, content: dict[str, object], table_state: TableState) -> None:
        """``_metadata.json`` written once and meaning ``content``; a deleted folder found on the way stops the table.

        Once this process wrote or checked it with the same content, one existence check stands for the whole
        comparison (on OneLake the create attempt and the read are five round trips per table and batch). A
        missing file goes the whole way: that is how a folder deleted under us shows.
        """
        path = join(ref.folder, METADATA_FILE)
        if self._metadata.get(ref.id) == content and self.landing.exists(path):
            return
        if ensure_table_metadata(self.landing, ref, content):
            self._check_not_deleted(ref, table_state)
        self._metadata[ref.id] = content

    def _check_not_deleted(self, ref: TableRef, table_state: TableState) -> None:
        """``_metadata.json`` was missing from a table that has files: was the folder deleted under us?

        Numbering lists a folder once per process, so a folder deleted while the connector runs (Fabric then
        drops the table) shows here first: without this, the table would start again from the next file with
        only the later changes. The ``_metadata.json`` just written goes again.

        Raises:
            LandingZoneCorrupt: the table's files are gone.
        """
        if table_state.next_number <= 1:
            return
        try:
            check_no_gap(self.landing, ref, table_state)
        except LandingZoneCorrupt:
            self.landing.delete(join(ref.folder, METADATA_FILE))
            raise
