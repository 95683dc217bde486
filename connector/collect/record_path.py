"""Decode and mark one slice of a batch: Kafka records in, one marked Arrow table per landing-zone table out.

This is the per-record half of the core. It only reads state (``CollectContext``), so it runs where
the records are: in Spark's Python workers, once per Kafka-partition slice of a micro-batch, or
in-process for ``convert``. The driver then merges the slices' ``TablePiece`` objects, assigns file
numbers, publishes and commits (``connector.sink``).

The one stateful feature, the ``keep-last`` TOAST store, needs every earlier batch's values, which only
the driver holds: with ``defer_keep_last`` the records of such tables come back untouched in
``Collected.deferred`` and the driver collects them itself with its stores.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from connector.collect.marking import RowMarkerMapper, ToastHandling
from connector.collect.ordering import Position, position_order
from connector.collect.pieces import (
    CollectContext,
    Collected,
    SourceShape,
    TablePiece,
    key_columns_for,
)
from connector.collect.poison import DeadLetter, poison_policy
from connector.collect.slice_events import TableEvents
from connector.collect.table_buffer import DeclaredDecimal, TableBatch
from connector.collect.toast_store import ToastStores
from connector.collect.tombstones import NO_ROWS_YET, DeletedKeys, TombstoneTally, as_delete
from connector.collect.tombstones import SKIPPED as TOMBSTONE
from connector.collect.tombstones import UNWRITABLE as UNWRITABLE_TOMBSTONE
from connector.config import TableSettings
from connector.debezium.arrow_values import ConversionError
from connector.debezium.ddl_events import altered_tables
from connector.debezium.decoder import open_decoder
from connector.debezium.envelope import ChangeEvent, Noise
from connector.debezium.types import ColumnType, type_policy
from connector.errors import DecodeError, SchemaChanged, TableReset, TableStopped, rebuild_hint
from connector.events import KafkaRecord, Op
from connector.landing_zone.layout import TableRef, table_for_topic

log = logging.getLogger(__name__)

# Compared with once a record: bound once (see ``Op``).
_TRUNCATE = Op.TRUNCATE


class _Open:
    """A table being collected: rows so far and its mapper."""

    def __init__(self, batch: TableBatch, mapper: RowMarkerMapper, ref: TableRef, first: Position) -> None:
        self.batch = batch
        self.mapper = mapper
        self.ref = ref
        self.first = first


@dataclass
class _SliceRun:
    """What one ``collect`` call gathers, table by table, besides its result."""

    out: Collected
    tables: dict[str, _Open] = field(default_factory=dict)
    events: dict[str, TableEvents] = field(default_factory=dict)
    refs: dict[str, TableRef] = field(default_factory=dict)
    recreated: dict[str, Position] = field(default_factory=dict)
    last_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    unordered: set[str] = field(default_factory=set)
    deleted: DeletedKeys = field(default_factory=DeletedKeys)
    tombstones: TombstoneTally = field(default_factory=TombstoneTally)
    # Tables awaiting their blocking snapshot (``CollectContext.awaiting_snapshot``) whose first read came here.
    snapshot_begun: set[str] = field(default_factory=set)


#: Skip kind of an event of a keyless table streamed before the blocking snapshot its rebuild asked for.
BEFORE_SNAPSHOT = "before_snapshot"


def _before_snapshot(run: _SliceRun, tid: str, decoded: ChangeEvent | Noise, asked_ms: int) -> bool:
    """Whether ``decoded`` came before the blocking snapshot ``tid`` awaits, asked for at ``asked_ms``: skipped.

    Before the snapshot's first read in this slice, an event Debezium processed (its ``ts_ms``) before the snapshot
    was asked for was streamed before it paused for it: the snapshot's reads hold its effect, and published, an
    insert would be there twice and an update would begin another rebuild. An event processed later is kept: a
    snapshot of an empty table has no read, and what follows it must not wait for one.
    """
    if tid in run.snapshot_begun:
        return False
    if not isinstance(decoded, ChangeEvent):
        # A tombstone follows its delete: one skipped here, or one kept, which began a rebuild and stopped the table.
        return True
    if decoded.op == Op.READ:
        run.snapshot_begun.add(tid)
        return False
    return decoded.ts_ms is not None and decoded.ts_ms <= asked_ms


class SliceCollector:
    """Decodes records and marks their rows, per table; one instance per slice."""

    def __init__(self, context: CollectContext, toast_stores: ToastStores | None = None) -> None:
        self.context = context
        self.mirror = context.mirror
        self._decoder = open_decoder(context.source, type_policy(self.mirror))
        self._toast_stores = toast_stores
        self._topics: dict[str, tuple[TableRef, TableSettings, bool]] = {}
        self._dead_letter: set[str] = set()

    def _topic(self, topic: str) -> tuple[TableRef, TableSettings, bool]:
        """Table, overrides and whether the table is deferred, once per topic (this is on the per-record path)."""
        known = self._topics.get(topic)
        if known is None:
            settings = self.mirror.table_settings(topic)
            keep_last = (settings.toast_policy or self.mirror.toast_policy) == "keep-last"
            deferred = keep_last and self._toast_stores is None
            ref = table_for_topic(topic, self.mirror)
            if poison_policy(self.mirror, topic) == "dead-letter":
                self._dead_letter.add(ref.id)
            known = self._topics[topic] = (ref, settings, deferred)
        return known

    def collect(self, records: Iterable[KafkaRecord]) -> Collected:
        """Decode and mark ``records`` (one slice, in Kafka order per partition)."""
        run = _SliceRun(Collected())
        out = run.out
        stopped = out.stopped
        already_stopped = self.context.stopped
        awaiting = self.context.awaiting_snapshot
        for record in records:
            out.records += 1
            ref, settings, deferred = self._topic(record.topic)
            if deferred:
                out.deferred.append(record)
                continue
            decoded = self._decode(record, ref, out)
            if decoded is None:
                continue
            if ref.id in stopped or ref.id in already_stopped:
                out.skipped.add("table_stopped")
                continue
            if ref.id in awaiting and _before_snapshot(run, ref.id, decoded, awaiting[ref.id]):
                out.skipped.add(BEFORE_SNAPSHOT)
                continue
            key_types = None
            if isinstance(decoded, Noise):  # a tombstone
                delete = self._tombstone(run, record, ref, settings)
                if delete is None:
                    continue
                decoded, key_types = delete
            else:
                run.deleted.saw(record, decoded.op)
            self._add(run, record, decoded, ref, settings, key_types)
        run.tombstones.log(log)
        return self._finish(run)

    def _decode(self, record: KafkaRecord, ref: TableRef, out: Collected) -> ChangeEvent | Noise | None:
        """The record's change event, a tombstone, or ``None``: other noise, or a record that does not decode.

        A record that does not decode is dead-lettered, or stops its table.
        """
        try:
            decoded = self._decoder.decode(record)
        except DecodeError as exc:
            out.skipped.add("malformed")
            if ref.id in self._dead_letter:
                out.poison.append(DeadLetter.from_record(record, ref.id, exc))
            elif ref.id not in out.stopped and ref.id not in self.context.stopped:
                out.stopped[ref.id] = str(exc)
                out.stopped_refs[ref.id] = ref
                log.error("table %s stopped: %s", ref.id, exc)
            return None
        if isinstance(decoded, Noise):
            if decoded.kind == TOMBSTONE:
                return decoded
            out.skipped.add(decoded.kind)
            if decoded.payload is not None:
                for table in altered_tables(record, decoded.payload):
                    altered = table_for_topic(table.topic, self.mirror)
                    out.ddl[altered.id] = (SourceShape(table.columns, table.unfilled), table.position)
            return None
        return decoded

    def _tombstone(
        self, run: _SliceRun, record: KafkaRecord, ref: TableRef, settings: TableSettings
    ) -> tuple[ChangeEvent, Mapping[str, ColumnType] | None] | None:
        """The delete a tombstone stands for and its key's column types, or ``None`` (counted, and logged if lost)."""
        if run.deleted.follows_delete(record):
            run.out.skipped.add(TOMBSTONE)
            return None
        tid = ref.id
        table = run.tables.get(tid)
        established = self.context.established.get(tid)
        try:
            key = self._decoder.key_layout(record)
        except DecodeError as exc:
            delete: ChangeEvent | str = str(exc)
        else:
            if table is None and established is None:
                delete = f"{record.position}: {NO_ROWS_YET}"
            else:
                keys = table.batch.key_columns if table is not None else None
                keys = keys or key_columns_for(tid, key.fields, settings.key_columns, self.context)
                typed = {*(table.batch.columns if table else ()), *(established.names if established else ())}
                delete = as_delete(record, key, keys, typed | set(self._declared_decimals(ref)))
        if isinstance(delete, str):
            run.out.skipped.add(UNWRITABLE_TOMBSTONE)
            run.tombstones.unwritable(tid, delete)
            return None
        run.tombstones.written += 1
        return delete, key.types

    def _add(
        self,
        run: _SliceRun,
        record: KafkaRecord,
        decoded: ChangeEvent,
        ref: TableRef,
        settings: TableSettings,
        key_types: Mapping[str, ColumnType] | None = None,
    ) -> None:
        """Mark one change event's rows into its table; a poison event stops the table (earlier rows stay).

        ``key_types``: a tombstone's delete has no row schema, only its key's (which types its key columns).
        """
        tid = ref.id
        seen = run.events.get(tid)
        if seen is None:
            seen = run.events[tid] = TableEvents()
            run.refs[tid] = ref
        seen.add(decoded)
        try:
            if decoded.op == _TRUNCATE:
                self._truncate(tid, decoded, settings, run.tables, run.recreated, run.out)
                return
            table = run.tables.get(tid)
            if table is None:
                table = run.tables[tid] = self._open(tid, ref, decoded, settings)
            batch = table.batch
            if decoded.key_fields != batch.key_columns and not settings.key_columns:
                _key_changed(batch, decoded)
            if decoded.columns is not None:
                batch.merge_columns(decoded.columns, record)
            elif key_types is not None:
                batch.merge_columns(key_types, record)
            for marker, row in table.mapper.rows(decoded):
                batch.markers.append(marker)
                batch.rows.append(row)
                batch.records.append(record)
            position = (record.topic, record.partition)
            if run.last_offsets.get(position, -1) > record.offset:
                run.unordered.add(tid)
            run.last_offsets[position] = record.offset
        except TableStopped as exc:
            run.out.stop(tid, exc, ref)
            if not isinstance(exc, TableReset):  # a reset's one line is the driver's, when it begins the rebuild
                log.error("%s", exc)
            # Rows before the poison event stay: they are correct, and the mirror keeps them.

    def _finish(self, run: _SliceRun) -> Collected:
        """One piece per table the slice touched (rows back in Kafka order where partitions interleaved)."""
        out = run.out
        for tid, seen in run.events.items():
            table = run.tables.get(tid)
            if table is not None and tid in run.unordered:
                _sort_by_position(table.batch)
            out.pieces[tid] = self._piece(tid, run.refs[tid], table, seen, run.recreated.get(tid), out)
        if out.stopped:
            topic_of = {ref.id: topic for topic, (ref, _, _) in self._topics.items()}
            out.stopped_topics = {tid: topic_of[tid] for tid in out.stopped if tid in topic_of}
        return out

    def _open(self, tid: str, ref: TableRef, event: ChangeEvent, settings: TableSettings) -> _Open:
        key_columns = self._key_columns(tid, event, settings)
        record = event.record
        return _Open(
            TableBatch(tid, key_columns),
            self._mapper(tid, key_columns, event, settings),
            ref,
            (record.topic, record.partition, record.offset),
        )

    def _piece(
        self,
        tid: str,
        ref: TableRef,
        table: _Open | None,
        seen: TableEvents,
        recreated_at: Position | None,
        out: Collected,
    ) -> TablePiece:
        if table is None:  # only a truncate (recreate) or events that stopped the table before any row
            return TablePiece(
                ref=ref,
                key_columns=self.context.key_columns.get(tid, ()),
                table=None,
                first=recreated_at or ("", 0, 0),
                facts=seen.facts(None),
                recreate=recreated_at is not None,
            )
        batch = table.batch
        arrow = self._to_arrow(tid, ref, batch, out)
        # After _to_arrow: a dead-lettered record's rows are gone from batch.records too.
        return TablePiece(
            ref=ref,
            key_columns=batch.key_columns,
            table=arrow,
            first=recreated_at or table.first,
            facts=seen.facts(batch.records if arrow is not None else None),
            recreate=recreated_at is not None,
        )

    def _to_arrow(self, tid: str, ref: TableRef, batch: TableBatch, out: Collected) -> pa.Table | None:
        """The piece's Arrow table; under ``dead-letter`` a value that does not convert only loses its record."""
        while len(batch):
            try:
                return batch.to_arrow(self.context.established.get(tid), self._declared_decimals(ref))
            except TableStopped as exc:
                cause = exc.__cause__
                if tid not in self._dead_letter or not isinstance(cause, ConversionError):
                    out.stop(tid, exc, ref)
                    log.error("%s", exc)
                    return None
                bad = batch.records[cause.row]
                out.poison.append(DeadLetter.from_record(bad, tid, exc.reason))
                out.skipped.add("malformed")
                # Every row of that record goes (an update changing the key made two).
                kept = [i for i, record in enumerate(batch.records) if record is not bad]
                batch.rows = [batch.rows[i] for i in kept]
                batch.markers = [batch.markers[i] for i in kept]
                batch.records = [batch.records[i] for i in kept]
        return None

    def _truncate(
        self,
        tid: str,
        event: ChangeEvent,
        settings: TableSettings,
        tables: dict[str, _Open],
        recreated: dict[str, Position],
        out: Collected,
    ) -> None:
        policy = settings.truncate_policy or self.mirror.truncate_policy
        if policy == "ignore":
            out.skipped.add("truncate")
            return
        if policy == "rebuild":
            # Its rebuild re-reads the table as it stands (rows inserted after the truncate too): later events go.
            raise TableReset(
                tid,
                f"{event.record.position}: the source table was truncated (mirror.truncate_policy: rebuild); "
                "rebuilding it: folder deleted, Fabric waited for, then re-read by a Debezium snapshot",
                "truncate",
            )
        if policy == "recreate":
            # Everything before the truncate is gone in the source too; the folder starts again.
            tables.pop(tid, None)
            record = event.record
            recreated[tid] = (record.topic, record.partition, record.offset)
            if self._toast_stores is not None:
                self._toast_stores.reset(tid)
            log.warning(
                "%s: truncate: table %s folder will be recreated (data lost until re-snapshot)", record.position, tid
            )
            return
        raise TableStopped(
            tid,
            f"{event.record.position}: the source table was truncated and open mirroring has no truncate marker; "
            "set truncate_policy to 'rebuild' (the default: the table rebuilt), 'recreate' or 'ignore', then "
            f"{rebuild_hint(tid)}",
        )

    def _key_columns(self, tid: str, event: ChangeEvent, settings: TableSettings) -> tuple[str, ...]:
        """The table's key columns; none for a keyless table (mirrored without keyColumns: inserts only)."""
        return key_columns_for(tid, event.key_fields, settings.key_columns, self.context) or ()

    def _mapper(
        self, tid: str, key_columns: tuple[str, ...], event: ChangeEvent, settings: TableSettings
    ) -> RowMarkerMapper:
        policy = settings.toast_policy or self.mirror.toast_policy
        store = None
        # A keyless table's rows have no key to remember values by (and its inserts hold no placeholder).
        if policy == "keep-last" and self._toast_stores is not None and key_columns:
            store = self._toast_stores.get(tid)
        toastable = None
        if event.columns is not None:
            toastable = frozenset(name for name, ctype in event.columns.items() if ctype.toastable)
        return RowMarkerMapper(
            tid,
            key_columns,
            replay_safe_inserts=self.mirror.replay_safe_inserts or tid in self.context.upsert_tables,
            toast=ToastHandling(policy, self.mirror.unavailable_value_placeholder, toastable, store),
            keyless_changes=settings.keyless_changes or self.mirror.keyless_changes,
        )

    def _declared_decimals(self, ref: TableRef) -> dict[str, DeclaredDecimal]:
        """The table's columns declared in ``mirror.decimal_columns``: (precision, scale, setting name)."""
        prefix = f"{ref.id}."
        out = {}
        for column, spec in self.mirror.decimal_columns.items():
            if column.startswith(prefix):
                where = f"mirror.decimal_columns[{column!r}]"
                precision, scale = self.mirror.declared_decimal(column)
                out[column[len(prefix) :]] = DeclaredDecimal(precision, scale, f"{where} ({spec!r})")
        return out


def _key_changed(batch: TableBatch, event: ChangeEvent) -> None:
    if event.key_fields:
        raise SchemaChanged(
            batch.table_id,
            f"{event.record.position}: key columns changed from {list(batch.key_columns)} to "
            f"{list(event.key_fields)}; keyColumns can never change: {rebuild_hint(batch.table_id)}",
            "key_changed",
        )


def _sort_by_position(batch: TableBatch) -> None:
    """Restore (partition, offset) order when the input interleaved a partition out of order."""
    order = position_order([(r.topic, r.partition, r.offset) for r in batch.records])
    batch.rows = [batch.rows[i] for i in order]
    batch.markers = [batch.markers[i] for i in order]
    batch.records = [batch.records[i] for i in order]
