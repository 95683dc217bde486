"""The sink: one batch of Kafka records in, numbered landing-zone files out, exactly once per batch id.

A batch is begun (``MirrorSink.begin``), then planned and finished in a ``with`` block (``SinkBatch``): both the
``convert`` command and the streaming job's ``foreachBatch`` drive it so. A problem in one table (poison event,
type change, truncate, TOAST placeholder, conflicting metadata) stops that table only; the batch goes on for the
others.

This module only orders the steps of a batch (``MirrorSink.steps``, written once); each role is another module's:

- collect (decode and mark, per slice): ``collect.slice`` (``lane``, ``record_path``), ``marking`` (TOAST);
- order (a table's pieces joined): ``table_rows``; the source admitted: ``source_identity``; poison records out:
  ``connector.deadletter``;
- plan and number: ``batch_plan`` (with ``table_plan``, ``numbering``) and ``ledger`` (plans, commits, TOAST
  snapshots);
- encode and stage: ``staging`` (with ``encoding`` and ``metadata``);
- publish and crash recovery: ``publisher``; stopped tables and rebuilds: ``rebuild``, beside ``lifecycle``;
- store: the ``Storage`` given for the landing zone and the checkpoint.

The steps call down into those modules and never back into this one: the walk of a batch enters here once.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from types import TracebackType

import pyarrow as pa

from connector.collect.pieces import CollectContext, Collected
from connector.collect.poison import dead_letter_in_use
from connector.collect.staging import stage_slice
from connector.config import MirrorSettings, SourceSettings
from connector.deadletter.writer import DeadLetterWriter, send_dead_letters
from connector.errors import ConfigError
from connector.events import KafkaRecord
from connector.publish.batch_plan import BatchInput, BatchPlanner, retried_folders
from connector.publish.batch_result import BatchResult
from connector.publish.empty_tables import EmptyTable
from connector.publish.key_deletes import delete_slice
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_state import BatchPlan, BatchSource, LedgerState
from connector.publish.publisher import highest_number, publish_and_commit, remove_leftovers, table_folders
from connector.publish.rebuild import FabricTables, SnapshotSignal, TableRebuilder, requested_tables
from connector.publish.source_offsets import check_batch
from connector.publish.table_rows import merge_slices
from connector.storage.base import Storage

log = logging.getLogger(__name__)


class SinkBatch:
    """One batch through the sink, from ``MirrorSink.begin``, in a ``with`` block: ``plan`` once, then ``finish``.

    The block holds the sink's lock: nothing else works on the sink meanwhile. Left without an exception, it
    finishes a planned batch (publishes and commits it) unless ``finish_later`` was called; left with one, the
    batch is undone here, and only here: what it learnt is forgotten and the next batch first completes or removes,
    from the ledger, what it left. ``finish_later`` hands the finish to another ``with batch:`` block, on another
    thread (publish behind): between the two nothing may plan another batch (its numbers follow this one's commit),
    and ``MirrorSink.collect_context`` may be read meanwhile, for collecting the next batch (it sees this plan).

    ``published`` says the ledger committed this batch id already (Spark replays the last batch after a crash
    between our commit and its own): then ``plan`` only deletes what was staged for it again, and ``finish``
    publishes nothing. ``context`` is what slices of this batch must be collected with; it is read when the
    batch begins, after rebuilds moved on.
    """

    def __init__(self, sink: MirrorSink, batch_id: int, published: bool) -> None:
        self.batch_id = batch_id
        self.published = published
        self.result = BatchResult(batch_id, already_committed=published)
        self._sink = sink
        self._started = time.monotonic()
        self._steps: Iterator[None] = iter(())
        self._step = "begun"
        self._blocks = 0  # ``with`` blocks open on the batch (each holds the sink's lock)
        self._finish_later = False

    def __enter__(self) -> SinkBatch:
        self._sink.lock.acquire()
        self._blocks += 1
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        """Finish a planned batch when the block ends without an exception; undo the batch when one was raised."""
        failed = exc_type is not None
        try:
            if not failed and self._step == "planned" and not self._finish_later:
                self.finish()
        except BaseException:
            failed = True
            raise
        finally:
            self._blocks -= 1
            if failed:
                self._steps = iter(())
                self._sink.forget_failed_batch()
            self._sink.lock.release()

    @property
    def context(self) -> CollectContext:
        """The collect context slices of this batch are collected with."""
        return self._sink.collect_context()

    def plan(self, given: BatchInput | None = None) -> SinkBatch:
        """Join the slices collected elsewhere with the records ``given`` to collect here; write the plan.

        Records a slice deferred (``keep-last`` tables) are collected here with the TOAST stores.
        """
        given = given or BatchInput()
        self._advance("begun", "planned")
        if self.published:
            # What the executors staged for a batch published already is not needed.
            self._sink.discard(given.slices)
            return self
        self._steps = self._sink.steps(self.batch_id, self._sink.with_audit_deletes(self.batch_id, given), self.result)
        next(self._steps, None)
        return self

    def finish_later(self) -> None:
        """Leave the ``with`` block with the plan written, not published.

        A later ``with batch: batch.finish()`` (on any thread) publishes and commits it.
        """
        self._finish_later = True

    def finish(self) -> BatchResult:
        """Publish and commit the planned batch (nothing to do for one without files, or published already)."""
        self._advance("planned", "finished")
        next(self._steps, None)
        self.result.duration_s = time.monotonic() - self._started
        return self.result

    def _advance(self, expected: str, to: str) -> None:
        if not self._blocks:
            msg = f"batch {self.batch_id} cannot be {to} outside a with block: with sink.begin(...) as batch"
            raise RuntimeError(msg)
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
    ) -> None:
        """Open the sink over ``checkpoint``'s ledger and recover what a crash left.

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
        self._ledger = BatchLedger(checkpoint)
        self._plans = BatchPlanner(landing, mirror, self._ledger)
        self._recovered = False
        self._source: BatchSource | None = None
        self._rebuilder = TableRebuilder(
            landing, checkpoint, mirror, signal=snapshot_signal, fabric_tables=fabric_tables
        )
        self._rebuilds_checked: int | None = None
        self._unpublished: BatchPlan | None = None  # written, not yet published and committed
        self._audit_deletes: dict[str, list[tuple[object, ...]]] = {}  # the audit's, for the next batch
        # Held by whoever works on the sink (a batch's ``with`` block, the rebuild ticker between batches): it is
        # not thread-safe.
        self.lock = threading.RLock()
        #: Batches a crash interrupted before their commit, completed here (the start-up log line reports them).
        self.completed_at_start = self._recover()

    @property
    def ledger(self) -> BatchLedger:
        """The checkpoint's ledger: start-up steps (a resume, data-loss healing) commit there before any batch."""
        return self._ledger

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
        return {tid: t.lifecycle.reason or "" for tid, t in tables if t.lifecycle.stopped}

    @property
    def rebuilding_tables(self) -> dict[str, str]:
        """Tables whose rebuild waits (folder deletion, Fabric), with the rebuild's phase."""
        tables = self._ledger.state.tables.items()
        return {tid: t.lifecycle.phase.value for tid, t in tables if t.lifecycle.is_rebuilding}

    def healing(self, table_id: str) -> str | None:
        """Why ``table_id`` is being rebuilt or refreshed, requested or under way; ``None`` while it runs steadily.

        Safe from another thread (the audit's). It reads a request not taken yet, then the plan being published, then
        the committed state, in this order: the sink commits a rebuild it takes from a request before it removes the
        request, and a plan is committed before it is dropped, so a rebuild is never between two reads unseen.
        """
        if table_id in requested_tables(self._ledger.storage):
            return "rebuild requested"
        unpublished = self._unpublished
        for state in (unpublished.state if unpublished is not None else None, self._ledger.state):
            table = state.tables.get(table_id) if state is not None else None
            if table is not None and not table.lifecycle.steady:
                return table.lifecycle.progress
        return None

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
            self.commit_tables(advanced)
        for path in served:
            self._ledger.storage.delete(path)
        self._rebuilds_checked = batch_id
        return changed

    def commit_tables(self, state: LedgerState) -> None:
        """Commit ``state``, whose tables changed outside a batch's plan (a rebuild begun or moved on).

        Only between batches, or in a batch's ``with`` block before it is planned (a gap found while the batch was
        collected): what this process knew of a changed table is forgotten, and the batch is collected with it.
        """
        for tid, table in state.tables.items():
            if table is not self._ledger.state.tables.get(tid):
                self._plans.forget_table(tid)
        self._ledger.commit_state(state)

    def queue_deletes(self, table_id: str, keys: Sequence[tuple[object, ...]]) -> None:
        """Publish delete rows for ``keys`` of ``table_id`` with the next batch, ahead of its records (the audit).

        A batch that fails loses them: the audit finds the keys again in its next round.
        """
        with self.lock:
            self._audit_deletes.setdefault(table_id, []).extend(keys)

    def queue_empty_tables(self, tables: Sequence[EmptyTable]) -> None:
        """Publish a zero-row file for each of ``tables`` with the next batches, until each has a file."""
        self._plans.empty_tables = list(tables)

    def with_audit_deletes(self, batch_id: int, given: BatchInput) -> BatchInput:
        """``given`` with the queued deletes as a first slice, staged here (``connector.publish.key_deletes``)."""
        if not self._audit_deletes:
            return given
        deletes, self._audit_deletes = self._audit_deletes, {}
        collected = delete_slice(self._ledger.state.tables, deletes)
        staged = stage_slice(self.landing, batch_id, collected, self.collect_context(defer_keep_last=False))
        return replace(given, slices=[staged, *given.slices])

    def _recover(self) -> int:
        """Finish any batch a crash interrupted and delete orphaned staged files; returns plans completed."""
        completed = 0
        for plan in self._ledger.pending_plans():
            log.warning("completing batch %d interrupted before its commit (%d files)", plan.batch_id, len(plan.files))
            publish_and_commit(self.landing, self._ledger, plan, self.mirror, BatchResult(plan.batch_id))
            completed += 1
        remove_leftovers(self.landing, self._ledger.state)
        self._recovered = True
        return completed

    def _recover_after_failure(self) -> None:
        """After a failed batch, what it left is finished or removed before anything else runs."""
        if not self._recovered:
            self._recover()

    def begin(
        self,
        batch_id: int,
        spark_offsets: tuple[str, ...] | None = None,
        where: str = "",
        topic_ids: Mapping[str, str] | None = None,
    ) -> SinkBatch:
        """Begin batch ``batch_id``: check its source offsets against the ledger, move rebuilds on.

        ``spark_offsets`` (Spark's offsets for the batch, or ``convert``'s digest of its input) are recorded with
        the batch's commit, so a later run can tell whether Spark's checkpoint (``where``) still matches; so are
        ``topic_ids`` (each topic's Kafka id when the batch was planned: a topic created again is told apart).

        Raises:
            LandingZoneCorrupt: the ledger and Spark's checkpoint disagree about the batch.
        """
        with self.lock:
            self._recover_after_failure()
            if spark_offsets is None:
                published = batch_id <= self._ledger.state.last_committed_batch
            else:
                published = check_batch(self._ledger.state, batch_id, spark_offsets, where)
            ids = tuple(sorted((topic_ids or {}).items()))
            self._source = None if published or spark_offsets is None else BatchSource(batch_id, spark_offsets, ids)
            if not published:
                self.advance_rebuilds(batch_id)
            return SinkBatch(self, batch_id, published)

    def admit_source(self, topics: Iterable[str]) -> None:
        """Refuse topics of another source, or topics landing in one folder; the next commit records the source.

        Raises:
            SourceConflict: the topics belong to another Debezium source, or two of them to one table folder.
        """
        self._plans.source_claim.admit(topics)

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
        return self._plans.collect_context(state, self.source, defer_keep_last=defer_keep_last)

    def process_batch(self, batch_id: int, records: Iterable[KafkaRecord]) -> BatchResult:
        """Collect and publish one batch here, in this process. Re-running a committed batch id publishes nothing."""
        with self.begin(batch_id) as batch:
            batch.plan(BatchInput(records=records))
        return batch.result

    def process_table(self, batch_id: int, table: pa.Table, *, columnar: bool = True) -> BatchResult:
        """Collect and publish one batch of Kafka records given as Arrow columns here, in this process."""
        with self.begin(batch_id) as batch:
            batch.plan(BatchInput(table=table, columnar=columnar))
        return batch.result

    def steps(self, batch_id: int, given: BatchInput, result: BatchResult) -> Iterator[None]:
        """A batch's steps, in their order, written once here: ``SinkBatch`` drives them.

        ``SinkBatch.plan`` runs them up to the written plan (the ``yield``), ``SinkBatch.finish`` the rest, maybe on
        another thread once the next batch was collected. A failure at any step is undone by the ``SinkBatch``.
        """
        # 1. Collect here what the executors did not: the records given here, those slices deferred (keep-last).
        state = self._unpublished.state if self._unpublished is not None else self._ledger.state
        context = functools.partial(self._plans.collect_context, state, self.source, defer_keep_last=False)
        slices = self._plans.collect_here(batch_id, given, context)
        slices = self._plans.with_empty_tables(batch_id, slices)  # captured tables no event announced yet
        # 2. Join each table's pieces in Kafka order.
        merged = merge_slices(slices, result)
        # 3. A topic of another source, or one landing in another topic's folder, fails the batch here, before any
        #    of it (dead letters included) goes out.
        self._plans.source_claim.admit(merged.topics.values())
        # 4. Poison records go out before any file of the batch is published.
        send_dead_letters(self.dead_letters, batch_id, slices, result)
        # 5. Number every table's files: the plan, with the ledger state after it.
        plan = self._plans.plan(batch_id, merged, result, self._source)
        if plan.files:
            # 6. Write the plan: from here on a crash is completed from it at the next start.
            self._ledger.write_plan(plan)
            self._unpublished = plan
            yield
            # 7. Publish, then commit: the batch is done (a crash in between redoes the publish).
            publish_and_commit(self.landing, self._ledger, plan, self.mirror, result)
            self._unpublished = None
        else:
            # 6-7. Nothing to publish: the state after the batch is committed at once.
            self._ledger.commit_state(plan.state)
        # 8. Delete what failed task attempts staged; what the batch learnt holds from now on.
        self._plans.remove_failed_attempts(batch_id, retried_folders(slices))
        self._plans.commit()

    def discard(self, slices: Sequence[Collected]) -> None:
        """Delete the files the slices staged: their batch is not published from them."""
        self._plans.discard(slices)

    def forget_failed_batch(self) -> None:
        """A batch failed: what it learnt is forgotten, and what it left is completed or removed before the next."""
        self._unpublished = None
        self._plans.rollback()
        self._recovered = False
