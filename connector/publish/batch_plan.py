"""A batch's plan on the driver: its tables' pieces numbered into one ``BatchPlan``, a stopped table apart.

What the executors did not collect is collected here (records handed to the driver, and those a slice deferred:
``keep-last`` tables, whose TOAST stores live here). Each table's staged files get the next numbers after the
checks only the driver can make (``table_plan``, in parallel across tables); a table the batch stops (schema
change, conflicting metadata, a gap) publishes nothing of it and gets its stopped (or rebuilding) state, the
others go on. The plan carries the ledger state after it; ``MirrorSink`` orders these steps around the ledger's
write, the publish and the commit.

What a batch learns here (first-touch scans of the table folders, TOAST values) holds only once its state is
committed (``commit``); a failed batch forgets it (``rollback``).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa

from connector.collect.per_table import for_each_table
from connector.collect.pieces import CollectContext, Collected, SourceShape, StagedFile
from connector.collect.record_path import SliceCollector
from connector.collect.slice import collect_slice
from connector.collect.staging import stage_slice
from connector.collect.toast_store import ToastStore, ToastStores
from connector.config import MirrorSettings, SourceSettings
from connector.errors import LandingZoneCorrupt, SchemaChanged, TableReset, TableStopped
from connector.events import KafkaRecord
from connector.publish.batch_result import BatchResult
from connector.publish.empty_tables import EmptyTable, empty_slice, pending
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_state import BatchPlan, BatchSource, LedgerState, PlannedFile, TableState
from connector.publish.numbering import FileNumbering
from connector.publish.publisher import remove_orphans
from connector.publish.schema_changes import SchemaChange, after_ddl, after_events, after_stop, column_change
from connector.publish.source_identity import SourceClaim
from connector.publish.table_plan import TablePlanner
from connector.publish.table_rows import MergedBatch, TableFiles
from connector.storage.base import Storage

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class BatchInput:
    """What a batch is planned from: slices collected elsewhere, and Kafka records to collect here.

    ``slices`` were collected and staged on the executors (``decode_on: executors``). ``records`` (one by one)
    and ``table`` (Arrow columns, decoded with ``columnar`` or row by row) are collected here: ``convert`` and
    ``decode_on: driver``. A batch Spark replays after its commit is planned from nothing (``BatchInput()``).
    """

    slices: Sequence[Collected] = ()
    records: Iterable[KafkaRecord] | None = None
    table: pa.Table | None = None
    columnar: bool = True


def retried_folders(slices: Sequence[Collected]) -> frozenset[str]:
    """The folders a retried task staged in: only there can a failed attempt have left files."""
    return frozenset(folder for part in slices if part.retried for folder in part.staged_folders())


class BatchPlanner:
    """Plans batches over one landing zone and ledger, keeping what one batch learns for the next."""

    def __init__(self, landing: Storage, mirror: MirrorSettings, ledger: BatchLedger) -> None:
        self.landing = landing
        self.mirror = mirror
        self._ledger = ledger
        self.source_claim = SourceClaim(landing, ledger, mirror)
        self._numbering = FileNumbering(landing)
        self._tables = TablePlanner(landing, mirror, self._numbering)
        self.toast = ToastStores(self._load_toast_store, removed_limit=mirror.keep_last_removed_keys)
        #: Captured tables no event announced, until each has its zero-row file (``connector.publish.empty_tables``).
        self.empty_tables: list[EmptyTable] = []
        self._schemas: dict[str, pa.Schema] = {}  # each ledger schema's Arrow form, built once

    def collect_context(
        self, state: LedgerState, source: SourceSettings, *, defer_keep_last: bool = True
    ) -> CollectContext:
        """What slices collected after ``state`` need (on executors or here)."""
        established = {}
        for tid, table in state.tables.items():
            if table.schema is not None:
                cached = self._schemas.get(table.schema)
                if cached is None:
                    cached = self._schemas[table.schema] = table.arrow_schema()
                established[tid] = cached
        return CollectContext(
            mirror=self.mirror,
            source=source,
            established=established,
            key_columns={tid: t.key_columns for tid, t in state.tables.items() if t.key_columns},
            stopped=frozenset(tid for tid, t in state.tables.items() if t.lifecycle.skips_events),
            upsert_tables=frozenset(tid for tid, t in state.tables.items() if t.lifecycle.upserts),
            defer_keep_last=defer_keep_last,
            incremental=frozenset(tid for tid, t in state.tables.items() if t.incremental),
            awaiting_snapshot={
                tid: int(t.lifecycle.since * 1000)
                for tid, t in state.tables.items()
                if t.snapshot_expected and t.lifecycle.since is not None
            },
        )

    def collect_here(self, batch_id: int, given: BatchInput, context: Callable[[], CollectContext]) -> list[Collected]:
        """The slices collected elsewhere, and those collected and staged here.

        Here are collected the records given here and those the slices deferred, with ``context()`` (taken only
        when there is something to collect).
        """
        local = list(itertools.chain.from_iterable(s.deferred for s in given.slices))
        if given.table is None and not local and given.records is None:
            return list(given.slices)
        here_context = context()
        here = []
        if given.table is not None:
            here.append(collect_slice(here_context, given.table, columnar=given.columnar, toast_stores=self.toast))
        if local or given.records is not None:
            here.append(SliceCollector(here_context, self.toast).collect(itertools.chain(local, given.records or ())))
        return [*given.slices, *(stage_slice(self.landing, batch_id, c, here_context) for c in here)]

    def with_empty_tables(self, batch_id: int, slices: list[Collected]) -> list[Collected]:
        """``slices``, and a slice of zero-row files for the captured tables still without a file and an event."""
        if not self.empty_tables:
            return slices
        self.empty_tables = pending(self.empty_tables, self._ledger.state, self.landing)
        empty = empty_slice(self.landing, batch_id, self.empty_tables, slices, self.mirror)
        return slices if empty is None else [*slices, empty]

    def plan(self, batch_id: int, merged: MergedBatch, result: BatchResult, source: BatchSource | None) -> BatchPlan:
        """Number every table's staged files; the plan to publish, with the ledger state after it."""
        state = self._ledger.state
        tables = dict(state.tables)
        files: list[PlannedFile] = []
        tids = sorted(set(merged.tables) | merged.recreate | set(merged.resets))
        if merged.tables:
            self._tables.partner_events(next((t.connector for t in merged.tables.values() if t.connector), None))
        outcomes = for_each_table(lambda tid: self._plan_table(tid, merged), tids, self.mirror.publish_parallelism)
        unused = list(merged.unused)
        schema_stops = dict(merged.schema_stops)
        resets: dict[str, TableReset] = {}
        for tid, outcome in zip(tids, outcomes, strict=True):
            if outcome is None or isinstance(outcome, TableReset):
                unused.extend(merged.tables[tid].staged if tid in merged.tables else ())
                if outcome is not None:
                    resets[tid] = outcome
                continue
            if isinstance(outcome, TableStopped):
                # A table stopped mid-batch still publishes the rows before the event that stopped it; one
                # stopped here publishes nothing of this batch.
                result.stopped[tid] = outcome.reason
                if isinstance(outcome, SchemaChanged):
                    schema_stops[tid] = outcome.kind
                else:
                    log.error("table %s stopped: %s", tid, outcome.reason)
                if tid in merged.tables:
                    unused.extend(merged.tables[tid].staged)
                continue
            table_state, planned = outcome
            table_state = self._follow_columns(tid, merged.tables.get(tid), table_state, result)
            files.extend(planned)
            if planned and tid in self.toast.stores:
                path = self._ledger.write_toast_snapshot(tid, batch_id, self.toast.stores[tid].snapshot())
                table_state = replace(table_state, toast_snapshot=path)
            tables[tid] = replace(table_state, topic=merged.topics.get(tid, table_state.topic))
        self._begin_rebuilds(merged, tables, resets, result)
        self._follow_ddls(merged, tables, result)
        self._discard(unused, [merged.refs[tid].folder for tid in result.stopped if tid in merged.refs])
        self._record_stops(merged, tables, schema_stops, result)
        new_state = replace(state, last_committed_batch=batch_id, tables=tables, resume_offsets=None)
        new_state = self.source_claim.recorded_in(new_state)
        if source is not None and source.batch_id == batch_id:
            new_state = new_state.with_source(source)
        return BatchPlan(batch_id, tuple(files), new_state, tuple(sorted(merged.recreate)))

    def discard(self, slices: Sequence[Collected]) -> None:
        """Delete the files the slices staged: their batch is not published from them."""
        for part in slices:
            for piece in part.pieces.values():
                for item in piece.files:
                    self.landing.delete(item.path)

    def remove_failed_attempts(self, batch_id: int, folders: frozenset[str]) -> None:
        """Delete what failed task attempts of the committed batch ``batch_id`` staged (their files are no plan's).

        Only folders a retried task staged in are listed: a batch without retries costs no request. A file an
        attempt still writes after this (a zombie of a lost executor) goes at the next start.
        """
        for folder in sorted(folders):
            removed = remove_orphans(self.landing, folder, batch_id)
            if removed:
                log.info("removed %d staged files of failed task attempts of batch %d in %s", removed, batch_id, folder)

    def commit(self) -> None:
        """What the batch learnt (TOAST values, table numbers) holds from now on: its state is committed."""
        self.toast.commit()
        self._numbering.commit()

    def rollback(self) -> None:
        """Forget what a failed batch learnt."""
        self.toast.rollback()
        # What this batch learnt of the landing zone (first-touch scans) and of its own progress (a plan
        # written, files renamed) is uncommitted: the next batch recovers from the ledger and rescans.
        self._numbering.forget_all()

    def forget_table(self, tid: str) -> None:
        """The table's folder is gone or new (a rebuild moved on): forget what this process knew of it."""
        self._numbering.forget(tid)
        self.toast.stores.pop(tid, None)

    def _load_toast_store(self, tid: str) -> ToastStore:
        table = self._ledger.state.tables.get(tid)
        if table is None or table.toast_snapshot is None:
            return ToastStore(removed_limit=self.mirror.keep_last_removed_keys)
        return ToastStore.from_snapshot(
            self._ledger.read_toast_snapshot(table.toast_snapshot), removed_limit=self.mirror.keep_last_removed_keys
        )

    def _follow_ddls(self, merged: MergedBatch, tables: dict[str, TableState], result: BatchResult) -> None:
        """Tables a DDL of this batch altered, and that publish, follow it (``schema_changes.after_ddl``)."""
        for tid, shape in merged.ddl.items():
            table = tables.get(tid)
            if table is not None and not table.lifecycle.skips_events and tid not in result.stopped:
                tables[tid] = self._follow_ddl(tid, table, shape, result)

    def _begin_rebuilds(
        self, merged: MergedBatch, tables: dict[str, TableState], resets: dict[str, TableReset], result: BatchResult
    ) -> None:
        """Each table the source reset in this batch (a truncate, a new snapshot) begins its rebuild: one line each.

        Not an automatic rebuild of a stopped table (``rebuild.max_automatic`` does not count it): the source, not
        a failure, asked for it, and a nightly reload must not use the count up.
        """
        for tid, reset in resets.items():
            ref = merged.refs.get(tid)
            previous = tables.get(tid) or TableState(folder=ref.folder if ref else tid)
            previous = replace(previous, topic=merged.topics.get(tid, previous.topic))
            log.warning("table %s: %s", tid, reset.reason)
            tables[tid] = replace(previous, lifecycle=previous.lifecycle.begin_rebuild(reset.reason, now=time.time()))
            result.resets[tid] = reset.cause
            result.stopped.pop(tid, None)  # a poison event in another partition: the rebuild re-reads past it

    def _record_stops(
        self, merged: MergedBatch, tables: dict[str, TableState], schema_stops: dict[str, str], result: BatchResult
    ) -> None:
        """Each table that stopped in this batch gets its stopped (or rebuilding) state."""
        for tid, reason in result.stopped.items():
            stopped_ref = merged.refs.get(tid)
            previous = tables.get(tid) or TableState(folder=stopped_ref.folder if stopped_ref else tid)
            previous = replace(previous, topic=merged.topics.get(tid, previous.topic))
            tables[tid] = self._stopped(tid, previous, reason, schema_stops.get(tid), result)

    def _discard(self, unused: list[StagedFile], stopped_folders: list[str]) -> None:
        """Delete staged files no plan publishes, and the folders of stopped tables that staging alone made."""
        for item in unused:
            self.landing.delete(item.path)
        for folder in stopped_folders:
            if not self.landing.list_dir(folder):
                self.landing.delete_tree(folder)

    def _plan_table(self, tid: str, merged: MergedBatch) -> tuple[TableState, list[PlannedFile]] | TableStopped | None:
        """One table's state and planned files, why it stopped, or ``None`` (run in parallel with the other tables).

        ``None``: the table stopped after this batch's slices were collected (while the previous batch was published
        behind); its pieces are not published. A column removed (``column_removed: rebuild``) stops it here, before
        anything of the batch is published: its rebuild re-reads the table whole.
        """
        ref = merged.refs[tid]
        known = self._ledger.state.tables.get(tid)
        if known is not None and known.lifecycle.skips_events and tid not in merged.recreate:
            return None
        if tid in merged.resets:
            return merged.resets[tid]
        files = merged.tables.get(tid)
        if known is not None and files is not None and tid not in merged.recreate:
            change = column_change(tid, known.source_columns, files.shape, self.mirror.schema_changes_for(known.topic))
            if change is not None and change.action == "rebuild":
                return SchemaChanged(tid, change.detail, change.kind)
        try:
            return self._tables.plan(ref, files, known, recreate=tid in merged.recreate)
        except TableStopped as exc:
            return exc
        except LandingZoneCorrupt as exc:
            return TableStopped(tid, str(exc))

    def _follow_columns(self, tid: str, files: TableFiles | None, table: TableState, result: BatchResult) -> TableState:
        """The table's state after its published events' columns (``schema_changes.after_events``)."""
        if files is None or files.shape is None:
            return table
        table, change = after_events(tid, table, files.shape, self.mirror, now=time.time())
        return _counted(result, change, table)

    def _follow_ddl(self, tid: str, table: TableState, shape: SourceShape, result: BatchResult) -> TableState:
        """A table a DDL altered (``schema_changes.after_ddl``: a refresh, or nothing)."""
        table, change = after_ddl(tid, table, shape, self.mirror, now=time.time())
        return _counted(result, change, table)

    def _stopped(
        self, tid: str, table: TableState, reason: str, schema_kind: str | None, result: BatchResult
    ) -> TableState:
        """A table that stopped in this batch: rebuilt when a schema change's policy says so, else as configured."""
        if schema_kind is None:
            return table.with_stop(reason, self.mirror)
        table, change = after_stop(tid, table, reason, schema_kind, self.mirror)
        return _counted(result, change, table)


def _counted(result: BatchResult, change: SchemaChange | None, table: TableState) -> TableState:
    """``table``, with the schema change that led to it recorded in the batch's result (for the metric)."""
    if change is not None:
        result.schema_changes[change.table] = (change.kind, change.action)
    return table
