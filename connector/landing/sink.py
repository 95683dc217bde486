"""The core's entry point: one batch of Kafka records in, numbered landing-zone files out.

``MirrorSink.process_batch(batch_id, records)`` is what both ``convert`` and the streaming job's
``foreachBatch`` call. A problem in one table (poison event, type change, truncate, TOAST placeholder,
conflicting metadata) stops that table only; the batch goes on for the others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import pyarrow as pa

from connector.config import MirrorSettings, TableSettings, parse_precision_scale
from connector.debezium.envelope import ChangeEvent, EnvelopeDecoder, Noise
from connector.debezium.types import ColumnType, text_decimal_type, type_name
from connector.errors import DecodeError, LandingZoneCorrupt, TableStopped
from connector.events import ROW_MARKER_COLUMN, KafkaRecord, SkipCounts
from connector.landing.batching import TableBatch
from connector.landing.encoding import FileFormat
from connector.landing.layout import TableRef, data_file_name, staged_file_name, table_for_topic
from connector.landing.ledger import BatchLedger, BatchPlan, LedgerState, PlannedFile, TableState
from connector.landing.metadata import ensure_partner_events, ensure_table_metadata, table_metadata
from connector.landing.publisher import digest, highest_number, publish_file, remove_orphans
from connector.landing.rowmarker import RowMarkerMapper, ToastStore
from connector.storage.base import Storage, join

log = logging.getLogger(__name__)


@dataclass
class TableResult:
    """What one batch did for one table."""

    rows: int = 0
    files: int = 0
    bytes: int = 0
    events: dict[str, int] = field(default_factory=dict)


@dataclass
class BatchResult:
    """What one batch did, for logs, metrics and the CLI's summary."""

    batch_id: int
    tables: dict[str, TableResult] = field(default_factory=dict)
    skipped: SkipCounts = field(default_factory=SkipCounts)
    stopped: dict[str, str] = field(default_factory=dict)
    max_source_ts_ms: int | None = None
    already_committed: bool = False
    records: int = 0
    duration_s: float = 0.0

    @property
    def rows(self) -> int:
        """Rows published by the batch."""
        return sum(t.rows for t in self.tables.values())

    @property
    def files(self) -> int:
        """Files published by the batch."""
        return sum(t.files for t in self.tables.values())

    def table(self, table_id: str) -> TableResult:
        """The result entry for ``table_id``, created on first use."""
        return self.tables.setdefault(table_id, TableResult())


class MirrorSink:
    """Writes batches of Debezium records into a landing zone, exactly once per batch id."""

    def __init__(self, landing: Storage, checkpoint: Storage, mirror: MirrorSettings) -> None:
        self.landing = landing
        self.mirror = mirror
        self.ledger = BatchLedger(checkpoint)
        precision, scale = parse_precision_scale(mirror.variable_scale_decimal, "mirror.variable_scale_decimal")
        self._decoder = EnvelopeDecoder(precision, scale)
        self._format = FileFormat(mirror.file_format, mirror.compression)
        self._scanned: set[str] = set()
        self._toast: dict[str, ToastStore] = {}
        self._recovered = False
        self._partner_events_written = False
        self._topics: dict[str, tuple[TableRef, TableSettings]] = {}

    def _topic(self, topic: str) -> tuple[TableRef, TableSettings]:
        """Table and overrides of ``topic``, computed once per topic (this is on the per-record path)."""
        known = self._topics.get(topic)
        if known is None:
            known = self._topics[topic] = (table_for_topic(topic, self.mirror), self.mirror.table_settings(topic))
        return known

    @property
    def stopped_tables(self) -> dict[str, str]:
        """Tables stopped so far (committed), with the reason."""
        return {tid: t.stopped for tid, t in self.ledger.state.tables.items() if t.stopped}

    def recover(self) -> int:
        """Finish any batch a crash interrupted and delete orphaned staged files; returns plans completed."""
        completed = 0
        for plan in self.ledger.pending_plans():
            log.warning("completing batch %d interrupted before its commit (%d files)", plan.batch_id, len(plan.files))
            self._publish(plan, BatchResult(plan.batch_id))
            completed += 1
        for folder in self._table_folders():
            removed = remove_orphans(self.landing, folder, keep=set())
            if removed:
                log.info("removed %d staged files of an unplanned batch in %s", removed, folder)
        self._recovered = True
        return completed

    def process_batch(self, batch_id: int, records: Iterable[KafkaRecord]) -> BatchResult:
        """Publish one batch. Re-running a committed batch id publishes nothing."""
        started = time.monotonic()
        if not self._recovered:
            self.recover()
        result = BatchResult(batch_id)
        if batch_id <= self.ledger.state.last_committed_batch:
            result.already_committed = True
            return result
        try:
            batches, refs, recreate = self._collect(records, result)
            plan = self._stage(batch_id, batches, refs, recreate, result)
            if plan.files:
                self.ledger.write_plan(plan)
                self._publish(plan, result)
            else:
                self.ledger.commit_state(plan.state)
        except BaseException:
            for store in self._toast.values():
                store.rollback()
            raise
        for store in self._toast.values():
            store.commit()
        result.duration_s = time.monotonic() - started
        return result

    # -- decode and mark -------------------------------------------------------------------------------

    def _collect(
        self, records: Iterable[KafkaRecord], result: BatchResult
    ) -> tuple[dict[str, TableBatch], dict[str, TableRef], set[str]]:
        state = self.ledger.state
        batches: dict[str, TableBatch] = {}
        refs: dict[str, TableRef] = {}
        mappers: dict[str, RowMarkerMapper] = {}
        recreate: set[str] = set()
        last_offsets: dict[tuple[str, int], int] = {}
        unordered: set[str] = set()
        stopped = result.stopped
        already_stopped = {tid for tid, table in state.tables.items() if table.stopped}
        for record in records:
            result.records += 1
            try:
                decoded = self._decoder.decode(record)
            except DecodeError as exc:
                ref = self._topic(record.topic)[0]
                result.skipped.add("malformed")
                if ref.id not in stopped and ref.id not in already_stopped:
                    stopped[ref.id] = str(exc)
                    refs.setdefault(ref.id, ref)
                    log.error("table %s stopped: %s", ref.id, exc)
                continue
            if isinstance(decoded, Noise):
                result.skipped.add(decoded.kind)
                continue
            ref, settings = self._topic(record.topic)
            tid = ref.id
            if tid in stopped or tid in already_stopped:
                result.skipped.add("table_stopped")
                continue
            refs.setdefault(tid, ref)
            op = decoded.op
            counts = result.table(tid).events
            counts[op] = counts.get(op, 0) + 1
            try:
                if op == "t":
                    self._truncate(tid, decoded, batches, recreate, result)
                    continue
                batch = batches.get(tid)
                if batch is None:
                    batch = batches[tid] = TableBatch(tid, self._key_columns(tid, decoded))
                    mappers[tid] = self._mapper(tid, batch.key_columns, decoded)
                if decoded.key_fields != batch.key_columns and not settings.key_columns:
                    self._key_changed(batch, decoded)
                if decoded.columns is not None:
                    batch.merge_columns(decoded.columns, record)
                for marker, row in mappers[tid].rows(decoded):
                    batch.markers.append(marker)
                    batch.rows.append(row)
                    batch.records.append(record)
                if op != "r":
                    batch.snapshot_only = False
                ts_ms = decoded.ts_ms
                if ts_ms is not None and (batch.max_source_ts_ms is None or ts_ms > batch.max_source_ts_ms):
                    batch.max_source_ts_ms = ts_ms
                position = (record.topic, record.partition)
                if last_offsets.get(position, -1) > record.offset:
                    unordered.add(tid)
                last_offsets[position] = record.offset
            except TableStopped as exc:
                stopped[tid] = exc.reason
                log.error("%s", exc)
                # Rows before the poison event stay: they are correct, and the mirror keeps them.
        for batch in batches.values():
            if batch.max_source_ts_ms is not None:
                result.max_source_ts_ms = max(result.max_source_ts_ms or 0, batch.max_source_ts_ms)
        for tid in unordered:
            if tid in batches:
                _sort_by_position(batches[tid])
        return batches, refs, recreate

    def _truncate(
        self,
        tid: str,
        event: ChangeEvent,
        batches: dict[str, TableBatch],
        recreate: set[str],
        result: BatchResult,
    ) -> None:
        policy = self._topic(event.record.topic)[1].truncate_policy or self.mirror.truncate_policy
        if policy == "ignore":
            result.skipped.add("truncate")
            return
        if policy == "recreate":
            # Everything before the truncate is gone in the source too; the folder starts again.
            batches.pop(tid, None)
            recreate.add(tid)
            self._toast.pop(tid, None)
            log.warning(
                "%s: truncate: table %s folder will be recreated (data lost until re-snapshot)",
                event.record.position,
                tid,
            )
            return
        raise TableStopped(
            tid,
            f"{event.record.position}: the source table was truncated and open mirroring has no truncate marker; "
            "set truncate_policy to 'recreate' (drops and recreates the folder) or 'ignore', or reload the table",
        )

    def _key_columns(self, tid: str, event: ChangeEvent) -> tuple[str, ...]:
        override = self._topic(event.record.topic)[1].key_columns
        if override:
            return tuple(override)
        if event.key_fields:
            return event.key_fields
        known = self.ledger.state.tables.get(tid)
        if known and known.key_columns:
            return known.key_columns
        raise TableStopped(
            tid,
            f"{event.record.position}: the event has no key, so updates and deletes cannot be mirrored; "
            f"give the table a primary key or set mirror.tables[{event.record.topic!r}].key_columns",
        )

    @staticmethod
    def _key_changed(batch: TableBatch, event: ChangeEvent) -> None:
        if event.key_fields:
            raise TableStopped(
                batch.table_id,
                f"{event.record.position}: key columns changed from {list(batch.key_columns)} to "
                f"{list(event.key_fields)}; keyColumns can never change: drop the table folder to reload it",
            )

    def _mapper(self, tid: str, key_columns: tuple[str, ...], event: ChangeEvent) -> RowMarkerMapper:
        policy = self._topic(event.record.topic)[1].toast_policy or self.mirror.toast_policy
        store = None
        if policy == "keep-last":
            store = self._toast.get(tid)
            if store is None:
                store = self._toast[tid] = self._load_toast_store(tid)
        toastable = None
        if event.columns is not None:
            toastable = frozenset(name for name, ctype in event.columns.items() if ctype.toastable)
        return RowMarkerMapper(
            tid,
            key_columns,
            replay_safe_inserts=self.mirror.replay_safe_inserts,
            toast_policy=policy,
            placeholder=self.mirror.unavailable_value_placeholder,
            toastable_columns=toastable,
            toast_store=store,
        )

    def _load_toast_store(self, tid: str) -> ToastStore:
        table = self.ledger.state.tables.get(tid)
        if table is None or table.toast_snapshot is None:
            return ToastStore()
        return ToastStore.from_snapshot(self.ledger.read_toast_snapshot(table.toast_snapshot))

    # -- encode and stage ------------------------------------------------------------------------------

    def _stage(
        self,
        batch_id: int,
        batches: dict[str, TableBatch],
        refs: dict[str, TableRef],
        recreate: set[str],
        result: BatchResult,
    ) -> BatchPlan:
        state = self.ledger.state
        tables = dict(state.tables)
        files: list[PlannedFile] = []
        for tid in sorted(set(batches) | recreate):
            ref = refs[tid]
            # A table stopped mid-batch still publishes the rows before the event that stopped it.
            try:
                table_state = self._table_state(tid, ref, recreate)
                batch = batches.get(tid)
                if batch is not None and len(batch):
                    self._partner_events(batch)
                    table_state, staged = self._stage_table(batch_id, ref, batch, table_state)
                    files.extend(staged)
                    if tid in self._toast:
                        path = self.ledger.write_toast_snapshot(tid, batch_id, self._toast[tid].snapshot())
                        table_state = replace(table_state, toast_snapshot=path)
                tables[tid] = table_state
            except (TableStopped, LandingZoneCorrupt) as exc:
                reason = exc.reason if isinstance(exc, TableStopped) else str(exc)
                result.stopped[tid] = reason
                log.error("table %s stopped: %s", tid, reason)
                files = [f for f in files if f.table != tid]
                remove_orphans(self.landing, ref.folder, keep={f.staged for f in files})
        for tid, reason in result.stopped.items():
            stopped_ref = refs.get(tid)
            previous = tables.get(tid) or TableState(folder=stopped_ref.folder if stopped_ref else tid)
            tables[tid] = replace(previous, stopped=reason)
        return BatchPlan(batch_id, tuple(files), LedgerState(batch_id, tables), tuple(sorted(recreate)))

    def _table_state(self, tid: str, ref: TableRef, recreate: set[str]) -> TableState:
        known = self.ledger.state.tables.get(tid)
        if tid in recreate:
            self.landing.delete_tree(ref.folder)
            self._scanned.add(tid)
            return TableState(folder=ref.folder)
        if tid in self._scanned:
            return known or TableState(folder=ref.folder)
        highest = highest_number(self.landing, ref.folder)
        self._scanned.add(tid)
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
        return known

    def _stage_table(
        self, batch_id: int, ref: TableRef, batch: TableBatch, table_state: TableState
    ) -> tuple[TableState, list[PlannedFile]]:
        established = table_state.arrow_schema()
        table = batch.to_arrow(established, self._declared_decimals(ref))
        data_schema = pa.schema([f for f in table.schema if f.name != ROW_MARKER_COLUMN])
        merged = _merge_schema(ref.id, established, data_schema)
        omit_marker = (
            self.mirror.omit_row_marker_for_snapshot
            and not self._format.is_delimited
            and not table_state.incremental
            and batch.snapshot_only
        )
        chunks = self._split(table)
        extra = self._format.metadata_properties(chunks[0])
        ensure_table_metadata(self.landing, ref, table_metadata(batch.key_columns, extra))
        staged: list[PlannedFile] = []
        number = table_state.next_number
        for chunk in chunks:
            if omit_marker:
                chunk = chunk.drop_columns([ROW_MARKER_COLUMN])
            data = self._format.encode(chunk)
            staged_path = join(ref.folder, staged_file_name(batch_id, number, self._format.extension))
            self.landing.delete(staged_path)  # a leftover of this same batch's earlier, unplanned try
            self.landing.create(staged_path, data)
            staged.append(
                PlannedFile(
                    table=ref.id,
                    number=number,
                    staged=staged_path,
                    final=join(ref.folder, data_file_name(number, self._format.extension)),
                    size=len(data),
                    sha256=digest(data),
                    rows=chunk.num_rows,
                )
            )
            number += 1
        new_state = replace(
            table_state.with_schema(merged),
            next_number=number,
            key_columns=batch.key_columns,
            incremental=table_state.incremental or not omit_marker,
        )
        return new_state, staged

    def _split(self, table: pa.Table) -> list[pa.Table]:
        rows_per_file = table.num_rows
        if self.mirror.max_rows_per_file:
            rows_per_file = min(rows_per_file, self.mirror.max_rows_per_file)
        if self.mirror.max_bytes_per_file and table.num_rows:
            per_row = max(1, table.nbytes // table.num_rows)
            rows_per_file = min(rows_per_file, max(1, self.mirror.max_bytes_per_file // per_row))
        rows_per_file = max(1, rows_per_file)
        return [table.slice(start, rows_per_file) for start in range(0, max(table.num_rows, 1), rows_per_file)]

    def _declared_decimals(self, ref: TableRef) -> dict[str, ColumnType]:
        prefix = f"{ref.id}."
        out = {}
        for column, spec in self.mirror.decimal_columns.items():
            if column.startswith(prefix):
                precision, scale = parse_precision_scale(spec, f"mirror.decimal_columns[{column}]")
                out[column[len(prefix) :]] = text_decimal_type(precision, scale)
        return out

    def _partner_events(self, batch: TableBatch) -> None:
        if self._partner_events_written:
            return
        connector = None
        for record in batch.records[:1]:
            decoded = self._decoder.decode(record)
            if isinstance(decoded, ChangeEvent):
                connector = decoded.source.get("connector")
        source_type = self.mirror.source_type or (str(connector) if connector else "Debezium")
        ensure_partner_events(self.landing, self.mirror.partner_name, source_type, self.mirror.source_version)
        self._partner_events_written = True

    # -- publish and commit ----------------------------------------------------------------------------

    def _publish(self, plan: BatchPlan, result: BatchResult) -> None:
        tables = dict(plan.state.tables)
        failed: set[str] = set()
        for planned in plan.files:
            if planned.table in failed:
                continue
            try:
                published = publish_file(self.landing, planned)
            except LandingZoneCorrupt as exc:
                failed.add(planned.table)
                tables[planned.table] = replace(tables[planned.table], stopped=str(exc))
                result.stopped[planned.table] = str(exc)
                log.error("table %s stopped: %s", planned.table, exc)
                continue
            if published:
                entry = result.table(planned.table)
                entry.files += 1
                entry.rows += planned.rows
                entry.bytes += planned.size
        state = plan.state if not failed else LedgerState(plan.state.last_committed_batch, tables)
        self.ledger.commit(replace(plan, state=state))

    def _table_folders(self) -> list[str]:
        folders = {t.folder for t in self.ledger.state.tables.values()}
        for info in self.landing.list_dir(""):
            if not info.is_dir or info.path.startswith("_"):
                continue
            if info.path.endswith(".schema"):
                folders.update(child.path for child in self.landing.list_dir(info.path) if child.is_dir)
            else:
                folders.add(info.path)
        return sorted(folders)


def _merge_schema(tid: str, established: pa.Schema | None, batch: pa.Schema) -> pa.Schema:
    """Union of columns; a column whose type changed stops the table (mirroring would stop it too)."""
    if established is None:
        return batch
    fields = list(established)
    known = {f.name: f for f in established}
    for new in batch:
        old = known.get(new.name)
        if old is None:
            fields.append(new)
        elif old.type != new.type:
            raise TableStopped(
                tid,
                f"column {new.name!r} changed type from {type_name(old.type)} to {type_name(new.type)}; open "
                "mirroring stops a table on a type change: drop the table folder and reload the table to recover",
            )
    return pa.schema(fields)


def _sort_by_position(batch: TableBatch) -> None:
    """Restore (partition, offset) order when the input interleaved a partition out of order."""
    order = sorted(
        range(len(batch.rows)),
        key=lambda i: (batch.records[i].topic, batch.records[i].partition, batch.records[i].offset),
    )
    batch.rows = [batch.rows[i] for i in order]
    batch.markers = [batch.markers[i] for i in order]
    batch.records = [batch.records[i] for i in order]
