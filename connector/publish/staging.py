"""Encode and stage: one table's merged rows of a batch → staged data files, each planned under its number.

A staged file (``_staged_<batch>_<number>``) is invisible to mirroring until the publisher renames it to its
numbered name, and only after the batch's plan is recorded; so staging may be redone freely, and the bytes
are deterministic: a replayed batch stages the same files. ``_metadata.json`` and ``_partnerEvents.json`` are
written here because they must exist before a table's first data file does.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pyarrow as pa

from connector.config import MirrorSettings
from connector.errors import LandingZoneCorrupt
from connector.events import ROW_MARKER_COLUMN
from connector.landing_zone import METADATA_FILE, TableRef, data_file_name, staged_file_name
from connector.publish.encoding import FileFormat
from connector.publish.ledger import PlannedFile, TableState
from connector.publish.metadata import ensure_partner_events, ensure_table_metadata, table_metadata
from connector.publish.numbering import check_no_gap
from connector.publish.publisher import digest
from connector.publish.table_rows import TableRows, merge_schema
from connector.storage.base import Storage, join


class TableStager:
    """Writes tables' staged files in the landing zone in the configured format; publishes nothing."""

    def __init__(self, landing: Storage, mirror: MirrorSettings) -> None:
        self.landing = landing
        self.mirror = mirror
        self.format = FileFormat(mirror.file_format, mirror.compression)
        self._partner_events_written = False

    def stage(
        self, batch_id: int, ref: TableRef, rows: TableRows, table_state: TableState
    ) -> tuple[TableState, list[PlannedFile]]:
        """Stage ``rows`` (not empty) as files numbered from ``table_state``; the table's state after them.

        Raises:
            TableStopped: the rows' types conflict with the established schema, or ``_metadata.json`` with
                what the table needs.
            LandingZoneCorrupt: the table's folder was deleted outside the connector.
        """
        self._partner_events(rows)
        established = table_state.arrow_schema()
        table = rows.table
        assert table is not None  # noqa: S101 - callers pass tables with rows
        data_schema = pa.schema([f for f in table.schema if f.name != ROW_MARKER_COLUMN])
        topic, partition, offset = rows.first
        merged = merge_schema(ref.id, established, data_schema, f"{topic}[{partition}]@{offset}: " if topic else "")
        # ``omit_row_marker_for_snapshot``: only a table's first, snapshot-only Parquet files; never after one had it.
        omit_marker = (
            self.mirror.omit_row_marker_for_snapshot
            and not self.format.is_delimited
            and not table_state.incremental
            and rows.snapshot_only
        )
        chunks = self._split(table)
        extra = self.format.metadata_properties(chunks[0])
        if ensure_table_metadata(self.landing, ref, table_metadata(rows.key_columns, extra)):
            self._check_not_deleted(ref, table_state)
        staged: list[PlannedFile] = []
        number = table_state.next_number
        for chunk in chunks:
            if omit_marker:
                chunk = chunk.drop_columns([ROW_MARKER_COLUMN])
            staged.append(self._stage_file(batch_id, ref, number, chunk))
            number += 1
        new_state = replace(
            table_state.with_schema(merged),
            next_number=number,
            key_columns=rows.key_columns,
            incremental=table_state.incremental or not omit_marker,
            rows_published=table_state.rows_published + table.num_rows,
            files_published=table_state.files_published + len(staged),
            last_published_at=time.time(),
        )
        return new_state, staged

    def _check_not_deleted(self, ref: TableRef, table_state: TableState) -> None:
        """``_metadata.json`` was missing from a table that has files: was the folder deleted under us?

        Numbering lists a folder once per process, so a folder deleted while the connector runs (Fabric then
        drops the table) shows here first: without this, the table would start again from the next file with
        only the later changes. The ``_metadata.json`` just written goes again, so nothing is left behind.

        Raises:
            LandingZoneCorrupt: the table's files are gone.
        """
        if table_state.next_number <= 1:
            return
        try:
            check_no_gap(self.landing, ref, table_state)
        except LandingZoneCorrupt:
            self.landing.delete(join(ref.folder, METADATA_FILE))
            if not self.landing.list_dir(ref.folder):
                self.landing.delete_tree(ref.folder)
            raise

    def _stage_file(self, batch_id: int, ref: TableRef, number: int, chunk: pa.Table) -> PlannedFile:
        """Encode one chunk and write it under its staged name; the plan entry that publishes it."""
        data = self.format.encode(chunk)
        staged_path = join(ref.folder, staged_file_name(batch_id, number, self.format.extension))
        self.landing.delete(staged_path)  # a leftover of this same batch's earlier, unplanned try
        self.landing.create(staged_path, data)
        return PlannedFile(
            table=ref.id,
            number=number,
            staged=staged_path,
            final=join(ref.folder, data_file_name(number, self.format.extension)),
            size=len(data),
            sha256=digest(data),
            rows=chunk.num_rows,
        )

    def _split(self, table: pa.Table) -> list[pa.Table]:
        """Chunks within ``max_rows_per_file`` and (estimated from the Arrow size) ``max_bytes_per_file``."""
        rows_per_file = table.num_rows
        if self.mirror.max_rows_per_file:
            rows_per_file = min(rows_per_file, self.mirror.max_rows_per_file)
        if self.mirror.max_bytes_per_file and table.num_rows:
            per_row = max(1, table.nbytes // table.num_rows)
            rows_per_file = min(rows_per_file, max(1, self.mirror.max_bytes_per_file // per_row))
        rows_per_file = max(1, rows_per_file)
        return [table.slice(start, rows_per_file) for start in range(0, max(table.num_rows, 1), rows_per_file)]

    def _partner_events(self, rows: TableRows) -> None:
        """``_partnerEvents.json`` once per process, before the first data file (an existing one is kept)."""
        if self._partner_events_written:
            return
        source_type = self.mirror.source_type or rows.connector or "Debezium"
        ensure_partner_events(self.landing, self.mirror.partner_name, source_type, self.mirror.source_version)
        self._partner_events_written = True
