"""The core's entry point and batch orchestrator: one batch of Kafka records in, numbered landing-zone files out.

``MirrorSink.process_batch(batch_id, records)`` is what both ``convert`` and the streaming job's
``foreachBatch`` call. A problem in one table (poison event, type change, truncate, TOAST placeholder,
conflicting metadata) stops that table only; the batch goes on for the others.

This module only orders the steps of a batch; each role is another module's:

- collect (decode and mark, per slice): ``collect.slice`` (``lane``, ``record_path``), ``marking`` (TOAST);
- order (a table's pieces joined): ``table_rows``; poison records out: ``deadletter``;
- number: ``numbering`` (each table's next number) and ``ledger`` (plans, commits, TOAST snapshots);
- encode and stage: ``staging`` (with ``encoding`` and ``metadata``);
- publish and crash recovery: ``publisher``; stopped tables and rebuilds: ``rebuild``;
- store: the ``Storage`` given for the landing zone and the checkpoint.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace

import pyarrow as pa

from connector.collect.per_table import for_each_table
from connector.collect.pieces import CollectContext, Collected, SourceShape, StagedFile
from connector.collect.poison import DeadLetter, dead_letter_in_use
from connector.collect.record_path import SliceCollector
from connector.collect.slice import collect_slice
from connector.collect.staging import stage_slice
from connector.collect.toast_store import ToastStore, ToastStores
from connector.config import MirrorSettings, SourceSettings
from connector.errors import ConfigError, LandingZoneCorrupt, SchemaChanged, TableStopped
from connector.events import KafkaRecord
from connector.operate.deadletter import DeadLetterWriter
from connector.operate.rebuild import FabricTables, SnapshotSignal, TableRebuilder
from connector.publish.batch_result import BatchResult
from connector.publish.ledger import BatchLedger, BatchPlan, BatchSource, LedgerState, PlannedFile, TableState
from connector.publish.lifecycle import Phase
from connector.publish.numbering import FileNumbering
from connector.publish.publisher import (
    highest_number,
    publish_plan,
    remove_leftovers,
    remove_orphans,
    table_folders,
)
from connector.publish.schema_changes import SchemaChange, after_ddl, after_events, after_stop, column_change
from connector.publish.source_identity import SourceClaim
from connector.publish.source_offsets import check_batch
from connector.publish.table_plan import TablePlanner
from connector.publish.table_rows import MergedBatch, TableFiles, merge_slices
from connector.storage.base import Storage

log = logging.getLogger(__name__)


class SinkBatch:
    """One batch through the sink, from ``MirrorSink.begin``: ``plan`` once, then ``finish`` once, in that order.

    ``published`` says the ledger committed this batch id already (Spark replays the last batch after a crash
    between our commit and its own): then ``plan`` only deletes what was staged for it again, and ``finish``
    publishes nothing. ``context`` is what slices of this batch must be collected with; it is read when the
    batch begins, after rebuilds moved on.

    Between ``plan`` and ``finish`` nothing may plan another batch (its numbers follow this one's commit);
    ``MirrorSink.collect_context`` may be read meanwhile, for collecting the next batch (it sees this plan).
    """

    def __init__(self, sink: MirrorSink, batch_id: int, published: bool) -> None:
        self.batch_id = batch_id
        self.published = published
        self.result = BatchResult(batch_id, already_committed=published)
        self._sink = sink
        self._started = time.monotonic()
        self._plan: BatchPlan | None = None
        self._retried: frozenset[str] = frozenset()
        self._step = "begun"

    @property
    def context(self) -> CollectContext:
        """The collect context slices of this batch are collected with."""
        return self._sink.collect_context()

    def plan(
        self,
        slices: Sequence[Collected] = (),
        records: Iterable[KafkaRecord] | None = None,
        *,
        records_table: pa.Table | None = None,
        columnar: bool = True,
    ) -> SinkBatch:
        """Join the slices collected elsewhere with ``records`` / ``records_table`` collected here; write the plan.

        Records a slice deferred (``keep-last`` tables) are collected here with the TOAST stores.
        """
        self._advance("begun", "planned")
        if self.published:
            # What the executors staged for a batch published already is not needed.
            self._sink.discard(slices)
            return self
        self._plan, self._retried = self._sink._plan_batch(
            self.batch_id, slices, records, records_table, columnar, self.result
        )
        return self

    def finish(self) -> BatchResult:
        """Publish and commit the planned batch (nothing to do for one without files, or published already)."""
        self._advance("planned", "finished")
        if not self.published:
            self._sink._finish_batch(self._plan, self._retried, self.result)
        self.result.duration_s = time.monotonic() - self._started
        return self.result

    def _advance(self, expected: str, to: str) -> None:
        if self._step != expected:
            msg = f"batch {self.batch_id} is {self._step}, it cannot be {to} now: begin, plan, finish, in this order"
            raise RuntimeError(msg)
        self._step = to


class MirrorSink:
    """Writes batches of Debezium records into a landing zone, exactly once per batch id."""

    def __init__(
        self,
        landing: Storage,
        checkpoint: Storage,
        mirror: MirrorSettings,
        *,
        source: SourceSettings | None = None,
        dead_letters: DeadLetterWriter | None = None,
        snapshot_signal: SnapshotSignal | None = None,
        fabric_tables: FabricTables | None = None,
        ledger: BatchLedger | None = None,
    ) -> None:
        """Open the sink over ``checkpoint``'s ledger (or ``ledger``, kept on it) and recover what a crash left.

        Raises:
            ConfigError: a table's poison policy is ``dead-letter`` and no ``dead_letters`` output is given.
        """
        if dead_letter_in_use(mirror) and dead_letters is None:
            msg = "poison_policy 'dead-letter' needs a dead-letter output (dead_letter settings)"
            raise ConfigError(msg)
        self.landing = landing
        self.mirror = mirror
        self.source = source or SourceSettings()
        self.dead_letters = dead_letters
        self._ledger = ledger or BatchLedger(checkpoint)
        self._numbering = FileNumbering(landing)
        self._planner = TablePlanner(landing, mirror, self._numbering)
        self._source_claim = SourceClaim(landing, self._ledger, mirror)
        self._toast = ToastStores(self._load_toast_store, removed_limit=self.mirror.keep_last_removed_keys)
        self._recovered = False
        self._schemas: dict[str, pa.Schema] = {}
        self._source: BatchSource | None = None
        self._rebuilder = TableRebuilder(
            landing, checkpoint, mirror, signal=snapshot_signal, fabric_tables=fabric_tables
        )
        self._rebuilds_checked: int | None = None
        self._unpublished: BatchPlan | None = None  # written, not yet published and committed
        # Held by whoever works on the sink (a batch, the rebuild ticker between batches): it is not thread-safe.
        self.lock = threading.RLock()
        #: Batches a crash interrupted before their commit, completed here (the start-up log line reports them).
        self.completed_at_start = self._recover()

    @property
    def state(self) -> LedgerState:
        """The ledger's committed state (read-only: the sink alone commits)."""
        return self._ledger.state

    @property
    def table_ids(self) -> list[str]:
        """Every table the ledger knows."""
        return list(self._ledger.state.tables)

    @property
    def stopped_tables(self) -> dict[str, str]:
        """Tables stopped (committed) and not being rebuilt, with the reason."""
        tables = self._ledger.state.tables.items()
        return {tid: t.lifecycle.reason or "" for tid, t in tables if t.lifecycle.phase is Phase.STOPPED}

    @property
    def rebuilding_tables(self) -> dict[str, str]:
        """Tables whose rebuild waits (folder deletion, Fabric), with the rebuild's phase."""
        tables = self._ledger.state.tables.items()
        return {tid: t.lifecycle.phase.value for tid, t in tables if t.lifecycle.is_rebuilding}

    def advance_rebuilds(self, batch_id: int | None = None) -> bool:
        """Take rebuild requests and move rebuilds on; ``True`` when a table's state changed.

        Called before batch ``batch_id`` is collected (once per batch), or between batches (``None``, under
        ``lock``). A table whose rebuild reached its snapshot request runs again from this batch on, so the caller
        must take the collect context after this.
        """
        if batch_id is not None and self._rebuilds_checked == batch_id:
            return False
        if self._unpublished is not None:
            return False  # between batches while the last one is published behind: its commit comes first
        self._recover_after_failure()
        state, served = self._rebuilder.take_requests(self._ledger.state)
        advanced = self._rebuilder.advance(state)
        changed = advanced is not self._ledger.state
        if changed:
            for tid, table in advanced.tables.items():
                if table is not self._ledger.state.tables.get(tid):
                    # Its folder is gone or new: forget what this process knew of it.
                    self._numbering.forget(tid)
                    self._toast.stores.pop(tid, None)
            self._ledger.commit_state(advanced)
        for path in served:
            self._ledger.storage.delete(path)
        self._rebuilds_checked = batch_id
        return changed

    def _recover(self) -> int:
        """Finish any batch a crash interrupted and delete orphaned staged files; returns plans completed."""
        completed = 0
        for plan in self._ledger.pending_plans():
            log.warning("completing batch %d interrupted before its commit (%d files)", plan.batch_id, len(plan.files))
            self._publish(plan, BatchResult(plan.batch_id))
            completed += 1
        remove_leftovers(self.landing, self._ledger.state)
        self._recovered = True
        return completed

    def _recover_after_failure(self) -> None:
        """After a failed batch, what it left is finished or removed before anything else runs."""
        if not self._recovered:
            self._recover()

    def begin(self, batch_id: int, spark_offsets: tuple[str, ...] | None = None, where: str = "") -> SinkBatch:
        """Begin batch ``batch_id``: check its source offsets against the ledger, move rebuilds on.

        ``spark_offsets`` (Spark's offsets for the batch, or ``convert``'s digest of its input) are recorded with
        the batch's commit, so a later run can tell whether Spark's checkpoint (``where``) still matches.

        Raises:
            LandingZoneCorrupt: the ledger and Spark's checkpoint disagree about the batch.
        """
        self._recover_after_failure()
        if spark_offsets is None:
            published = batch_id <= self._ledger.state.last_committed_batch
        else:
            published = check_batch(self._ledger.state, batch_id, spark_offsets, where)
        self._source = None if published or spark_offsets is None else BatchSource(batch_id, spark_offsets)
        if not published:
            self.advance_rebuilds(batch_id)
        return SinkBatch(self, batch_id, published)

    def admit_source(self, topics: Iterable[str]) -> None:
        """Refuse topics of another source, or topics landing in one folder; the next commit records the source.

        Raises:
            SourceConflict: the topics belong to another Debezium source, or two of them to one table folder.
        """
        self._source_claim.admit(topics)

    def first_published_file(self) -> str | None:
        """A table folder holding a numbered file (also processed ones), ``None`` when the landing zone has none."""
        for folder in table_folders(self.landing, self._ledger.state):
            if highest_number(self.landing, folder):
                return folder
        return None

    def collect_context(self, *, defer_keep_last: bool = True) -> CollectContext:
        """The ledger state slices need, for collecting the next batch (on executors or here)."""
        # A plan being published behind (``finish`` on another thread) is what the next batch follows.
        unpublished = self._unpublished
        state = unpublished.state if unpublished is not None else self._ledger.state
        established = {}
        for tid, table in state.tables.items():
            if table.schema is not None:
                cached = self._schemas.get(table.schema)
                if cached is None:
                    cached = self._schemas[table.schema] = table.arrow_schema()
                established[tid] = cached
        return CollectContext(
            mirror=self.mirror,
            source=self.source,
            established=established,
            key_columns={tid: t.key_columns for tid, t in state.tables.items() if t.key_columns},
            stopped=frozenset(tid for tid, t in state.tables.items() if t.lifecycle.skips_events),
            upsert_tables=frozenset(tid for tid, t in state.tables.items() if t.lifecycle.upserts),
            defer_keep_last=defer_keep_last,
            incremental=frozenset(tid for tid, t in state.tables.items() if t.incremental),
        )

    def process_batch(self, batch_id: int, records: Iterable[KafkaRecord]) -> BatchResult:
        """Collect and publish one batch here, in this process. Re-running a committed batch id publishes nothing."""
        return self.begin(batch_id).plan(records=records).finish()

    def process_table(self, batch_id: int, table: pa.Table, *, columnar: bool = True) -> BatchResult:
        """Collect and publish one batch of Kafka records as Arrow columns here (``run --decode-on driver``)."""
        return self.begin(batch_id).plan(records_table=table, columnar=columnar).finish()

    def _plan_batch(
        self,
        batch_id: int,
        slices: Sequence[Collected],
        records: Iterable[KafkaRecord] | None,
        records_table: pa.Table | None,
        columnar: bool,
        result: BatchResult,
    ) -> tuple[BatchPlan | None, frozenset[str]]:
        """``SinkBatch.plan``: the written plan (``None``: nothing to publish, committed already), retried folders."""
        try:
            slices = [*slices, *self._collect_here(batch_id, slices, records, records_table, columnar)]
            merged = merge_slices(slices, result)
            # A topic of another source, or one landing in another topic's folder, fails the batch here, before
            # any of it (dead letters included) goes out.
            self.admit_source(merged.topics.values())
            self._dead_letter(batch_id, slices, result)
            plan = self._plan(batch_id, merged, result)
            retried = frozenset(folder for part in slices if part.retried for folder in part.staged_folders())
            if plan.files:
                self._ledger.write_plan(plan)
                self._unpublished = plan
                return plan, retried
            self._ledger.commit_state(plan.state)
        except BaseException:
            self._forget_batch()
            raise
        self._remove_failed_attempts(batch_id, retried)
        self._commit_caches()
        return None, frozenset()

    def discard(self, slices: Sequence[Collected]) -> None:
        """Delete the files the slices staged: their batch is not published from them."""
        for part in slices:
            for piece in part.pieces.values():
                for item in piece.files:
                    self.landing.delete(item.path)

    def _finish_batch(self, plan: BatchPlan | None, retried: frozenset[str], result: BatchResult) -> None:
        """``SinkBatch.finish``: publish and commit a written plan."""
        if plan is None:
            return
        try:
            self._publish(plan, result)
        except BaseException:
            self._forget_batch()
            raise
        finally:
            self._unpublished = None
        self._remove_failed_attempts(plan.batch_id, retried)
        self._commit_caches()

    def _commit_caches(self) -> None:
        """What the batch learnt (TOAST values, table numbers) holds from now on: its state is committed."""
        self._toast.commit()
        self._numbering.commit()

    def _remove_failed_attempts(self, batch_id: int, folders: frozenset[str]) -> None:
        """Delete what failed task attempts of the committed batch ``batch_id`` staged (their files are no plan's).

        Only folders a retried task staged in are listed: a batch without retries costs no request. A file an
        attempt still writes after this (a zombie of a lost executor) goes at the next start.
        """
        for folder in sorted(folders):
            removed = remove_orphans(self.landing, folder, batch_id)
            if removed:
                log.info("removed %d staged files of failed task attempts of batch %d in %s", removed, batch_id, folder)

    def _forget_batch(self) -> None:
        self._toast.rollback()
        # What this batch learnt of the landing zone (first-touch scans) and of its own progress (a plan
        # written, files renamed) is uncommitted: the next call recovers from the ledger and rescans.
        self._numbering.forget_all()
        self._recovered = False

    def _collect_here(
        self,
        batch_id: int,
        slices: Sequence[Collected],
        records: Iterable[KafkaRecord] | None,
        records_table: pa.Table | None,
        columnar: bool,
    ) -> list[Collected]:
        """Collect and stage, in this process, the records given here and those the slices deferred."""
        local = list(itertools.chain.from_iterable(s.deferred for s in slices))
        if records_table is None and not local and records is None:
            return []
        context = self.collect_context(defer_keep_last=False)
        here = []
        if records_table is not None:
            here.append(collect_slice(context, records_table, columnar=columnar, toast_stores=self._toast))
        if local or records is not None:
            here.append(SliceCollector(context, self._toast).collect(itertools.chain(local, records or ())))
        return [stage_slice(self.landing, batch_id, collected, context) for collected in here]

    def _dead_letter(self, batch_id: int, slices: Sequence[Collected], result: BatchResult) -> None:
        """Poison records go out before any file of the batch is published (a replay writes them again)."""
        letters = sorted(itertools.chain.from_iterable(s.poison for s in slices), key=DeadLetter.sort_key)
        if not letters:
            return
        assert self.dead_letters is not None  # noqa: S101 - the constructor requires it for dead-letter tables
        self.dead_letters.write(batch_id, letters)
        for letter in letters:
            result.dead_letters[letter.table] = result.dead_letters.get(letter.table, 0) + 1
            log.warning(
                "dead letter: table %s %s went to %s: %s",
                letter.table,
                letter.position,
                self.dead_letters.location,
                letter.error,
            )

    def _load_toast_store(self, tid: str) -> ToastStore:
        table = self._ledger.state.tables.get(tid)
        if table is None or table.toast_snapshot is None:
            return ToastStore(removed_limit=self.mirror.keep_last_removed_keys)
        return ToastStore.from_snapshot(
            self._ledger.read_toast_snapshot(table.toast_snapshot), removed_limit=self.mirror.keep_last_removed_keys
        )

    # -- plan, publish, commit -------------------------------------------------------------------------

    def _plan(self, batch_id: int, merged: MergedBatch, result: BatchResult) -> BatchPlan:
        """Number every table's staged files; the plan to publish, with the ledger state after it."""
        state = self._ledger.state
        tables = dict(state.tables)
        files: list[PlannedFile] = []
        tids = sorted(set(merged.tables) | merged.recreate)
        if merged.tables:
            self._planner.partner_events(next((t.connector for t in merged.tables.values() if t.connector), None))
        outcomes = for_each_table(lambda tid: self._plan_table(tid, merged), tids, self.mirror.publish_parallelism)
        unused = list(merged.unused)
        schema_stops = dict(merged.schema_stops)
        for tid, outcome in zip(tids, outcomes, strict=True):
            if outcome is None:
                unused.extend(merged.tables[tid].staged if tid in merged.tables else ())
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
            if planned and tid in self._toast.stores:
                path = self._ledger.write_toast_snapshot(tid, batch_id, self._toast.stores[tid].snapshot())
                table_state = replace(table_state, toast_snapshot=path)
            tables[tid] = replace(table_state, topic=merged.topics.get(tid, table_state.topic))
        self._follow_ddls(merged, tables, result)
        self._discard(unused, [merged.refs[tid].folder for tid in result.stopped if tid in merged.refs])
        self._record_stops(merged, tables, schema_stops, result)
        new_state = replace(state, last_committed_batch=batch_id, tables=tables, resume_offsets=None)
        new_state = self._source_claim.recorded_in(new_state)
        if self._source is not None and self._source.batch_id == batch_id:
            new_state = new_state.with_source(self._source)
        return BatchPlan(batch_id, tuple(files), new_state, tuple(sorted(merged.recreate)))

    def _follow_ddls(self, merged: MergedBatch, tables: dict[str, TableState], result: BatchResult) -> None:
        """Tables a DDL of this batch altered, and that publish, follow it (``schema_changes.after_ddl``)."""
        for tid, shape in merged.ddl.items():
            table = tables.get(tid)
            if table is not None and not table.lifecycle.skips_events and tid not in result.stopped:
                tables[tid] = self._follow_ddl(tid, table, shape, result)

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
        files = merged.tables.get(tid)
        if known is not None and files is not None and tid not in merged.recreate:
            change = column_change(tid, known.source_columns, files.shape, self.mirror.schema_changes_for(known.topic))
            if change is not None and change.action == "rebuild":
                return SchemaChanged(tid, change.detail, change.kind)
        try:
            return self._planner.plan(ref, files, known, recreate=tid in merged.recreate)
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

    def _publish(self, plan: BatchPlan, result: BatchResult) -> None:
        """Publish a written plan, then commit it: the batch is done (a crash in between redoes the publish)."""
        published = publish_plan(self.landing, plan, self.mirror, result, workers=self.mirror.publish_parallelism)
        self._ledger.commit(replace(plan, state=published))


def _counted(result: BatchResult, change: SchemaChange | None, table: TableState) -> TableState:
    """``table``, with the schema change that led to it recorded in the batch's result (for the metric)."""
    if change is not None:
        result.schema_changes[change.table] = (change.kind, change.action)
    return table
