"""The columnar lane: a topic's plain Debezium JSON change events collected in Arrow, in bulk.

The record path (``SliceCollector``) builds Python objects for every record, which costs about ten times
what parsing the JSON costs. For the common case (JsonConverter output of c/r/u/d events, compact
JSON, no TOASTed placeholder, keys of scalars) the lane instead runs the bulk form of each role on a
whole topic: decode (``connector.debezium.bulk_json``), mark (``marking.mark_parsed``), type
(``connector.debezium.bulk_types``, and ``connector.debezium.schemaless`` for schemaless JSON), then the
shared column order and facts (``table_buffer.column_order``, ``pieces.piece_facts``). This module only
chooses the topics and runs those steps.

The lane takes a topic only when it can produce exactly the piece the record path would. Anything a step
does not handle (noise other than tombstones, a tombstone standing for a delete compaction removed (see
``connector.collect.tombstones``), truncates, keys it cannot check, placeholders, values that do not parse
or convert, ``keep-last`` tables, a second topic for the same table) declines the topic
(``BulkDeclined``) and leaves it to the record path whole, so decode errors, dead letters and stopped
tables stay the record path's alone.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from connector.collect.marking import MarkerSpec, holds_placeholder, mark_parsed
from connector.collect.ordering import offsets_ascending
from connector.collect.pieces import (
    CollectContext,
    Collected,
    SourceShape,
    TablePiece,
    initial_load,
    key_columns_for,
    piece_facts,
)
from connector.collect.table_buffer import column_order, established_type, marked_table
from connector.collect.tombstones import tombstones_follow_deletes
from connector.config import TableSettings
from connector.debezium import bulk_json
from connector.debezium.arrow_values import ConversionError
from connector.debezium.bulk_types import converted, parse_type
from connector.debezium.envelope import HEARTBEAT_TOPIC_PREFIX, EnvelopeDecoder
from connector.debezium.schemaless import arrow_row_columns, used_columns
from connector.debezium.types import ColumnType, type_policy
from connector.errors import BulkDeclined, decline
from connector.events import KafkaRecord, Op
from connector.landing_zone.layout import TableRef, table_for_topic

log = logging.getLogger(__name__)

#: Records of one topic in a slice below which the record path takes it. Each Arrow JSON parse has a fixed cost
#: of about a millisecond (two per topic), against some 20 µs per record on the record path: a topic of a few
#: records, as in a batch touching many tables, costs the lane ten times what it costs the record path, and the
#: two cross near a few hundred records (measured with the benchmarks' events, 1 to 1,024 records per topic).
LANE_MIN_RECORDS = 256


@dataclass
class LaneResult:
    """What the lane collected, and the records it left for the row path."""

    rest: pa.Table
    collected: Collected = field(default_factory=Collected)
    topics: list[str] = field(default_factory=list)  # the topics the lane took


def collect_in_lane(
    context: CollectContext, table: pa.Table, *, enabled: bool = True, min_records: int = LANE_MIN_RECORDS
) -> LaneResult:
    """The lane's share of ``table``; with ``enabled`` false, everything is left to the row path.

    Topics with fewer than ``min_records`` records in ``table`` are left to the row path too (``LANE_MIN_RECORDS``).
    """
    return ColumnarLane(context, min_records).collect(table) if enabled else LaneResult(rest=table)


class ColumnarLane:
    """Collects whole topics of a batch in Arrow; one instance per slice, reading only a ``CollectContext``."""

    def __init__(self, context: CollectContext, min_records: int = LANE_MIN_RECORDS) -> None:
        self.context = context
        self.min_records = min_records
        self.mirror = context.mirror
        self._decoder = EnvelopeDecoder(type_policy(self.mirror))
        self._replay_safe = self.mirror.replay_safe_inserts
        self._marker_specs = {safe: MarkerSpec(safe) for safe in (False, True)}

    def collect(self, table: pa.Table) -> LaneResult:
        """Collect the topics of ``table`` (Kafka records as Arrow columns) that the lane can take.

        ``rest`` holds the other records, in their order, for ``SliceCollector``.
        """
        result = LaneResult(rest=table)
        if self.context.source.value_format != "json" or "value" not in table.column_names or not table.num_rows:
            return result
        topic_column = table.column("topic")
        counts = {c["values"]: c["counts"] for c in pc.value_counts(topic_column).to_pylist()}
        refs = {topic: table_for_topic(topic, self.mirror) for topic in counts if topic is not None}
        topics_per_table = Counter(ref.id for ref in refs.values())
        for topic, ref in refs.items():
            if counts[topic] < self.min_records or topics_per_table[ref.id] > 1 or not self._eligible(topic, ref):
                continue
            records = table if len(counts) == 1 else table.filter(pc.equal(topic_column, topic))
            try:
                piece, tombstones = self._collect_topic(topic, ref, records)
            except BulkDeclined as declined:
                log.debug("topic %s goes to the record path: %s", topic, declined.reason)
                continue
            result.collected.pieces[ref.id] = piece
            result.collected.records += records.num_rows
            if tombstones:
                result.collected.skipped.add("tombstone", tombstones)
            result.topics.append(topic)
        if result.topics:
            result.rest = table.filter(pc.invert(pc.is_in(topic_column, pa.array(result.topics, pa.string()))))
        return result

    def _eligible(self, topic: str, ref: TableRef) -> bool:
        settings = self.mirror.table_settings(topic)
        if (settings.toast_policy or self.mirror.toast_policy) == "keep-last":
            return False  # the TOAST store remembers every row: the row path keeps it
        if topic.startswith(HEARTBEAT_TOPIC_PREFIX) or ref.id in self.context.stopped:
            return False
        if ref.id in self.context.awaiting_snapshot:
            return False  # the record path skips what came before the snapshot's first read
        prefix = f"{ref.id}."
        return not any(column.startswith(prefix) for column in self.mirror.decimal_columns)

    # -- one topic ----------------------------------------------------------------------------------

    def _collect_topic(self, topic: str, ref: TableRef, records: pa.Table) -> tuple[TablePiece, int]:
        tombstone = pc.fill_null(pc.equal(pc.binary_length(records.column("value")), 0), True)
        tombstones = pc.sum(tombstone).as_py() or 0
        changes = records.filter(pc.invert(tombstone)) if tombstones else records
        count = changes.num_rows
        if not count:
            decline("no change event")
        partitions = changes.column("partition").to_numpy()
        offsets = changes.column("offset").to_numpy()
        if not offsets_ascending(partitions, offsets):
            decline("a partition's offsets go backwards")
        first = KafkaRecord(topic, int(partitions[0]), int(offsets[0]), changes.column("key")[0].as_py(), None)
        # Decode.
        payloads, columns = bulk_json.payloads(self._decoder, changes.column("value"), first)
        key_fields = bulk_json.key_fields(changes.column("key"), first)
        key_columns = self._key_columns(ref, key_fields, self.mirror.table_settings(topic))
        lines = bulk_json.payload_lines(payloads, count)
        row_columns = self._row_columns(ref, columns)
        inferring = row_columns is None
        inferred = None
        if row_columns is None:
            # Rows declared as structs of no known column: Arrow infers their columns.
            inferred = bulk_json.read_json(lines, bulk_json.envelope_schema(pa.struct([])))
            sides = (table.schema.field(side).type for table in inferred for side in ("before", "after"))
            row_columns = arrow_row_columns(sides, bulk_json.first_row_columns(payloads[0].as_py(), first))
        row_type = pa.struct([pa.field(name, parse_type(name, ctype)) for name, ctype in row_columns.items()])
        # Inferred tables are reused where exact, not parsed again (``parse_envelopes``).
        parsed = bulk_json.parse_envelopes(lines, row_type, inferred, declared=columns is not None)
        if tombstones:
            _check_tombstones(records, tombstone, parsed.column("op"))
        # Mark.
        if holds_placeholder(parsed, self.mirror.unavailable_value_placeholder):
            decline("a value is an unavailable (TOASTed) placeholder")
        changes_rows = pc.is_in(parsed.column("op"), pa.array([Op.UPDATE.value, Op.DELETE.value]))
        if not key_columns and pc.any(changes_rows).as_py():
            decline("an update or delete of a keyless table")  # the record path rebuilds or stops the table
        # A keyless table's rows are inserts (no key for an upsert to match: ``marking.RowMarkerMapper``).
        spec = self._marker_specs[bool(key_columns) and (self._replay_safe or ref.id in self.context.upsert_tables)]
        markers, rows = mark_parsed(parsed, list(row_columns), key_columns, spec)
        # Type.
        if inferring:
            row_columns = used_columns(row_columns, rows)
        arrow = self._table(ref, rows, markers, row_columns, columns)
        # Events and rows agree up to the first event that is not an initial-snapshot read (one row per read).
        initial = initial_load(parsed.column("op"), parsed.column("snapshot"))
        shape = SourceShape.of_schema(columns) if columns is not None else _last_row_shape(payloads)
        facts = piece_facts(parsed.column("op"), parsed.column("ts_ms"), parsed.column("connector"), initial, shape)
        piece = TablePiece(
            ref=ref, key_columns=key_columns, table=arrow, first=(topic, first.partition, first.offset), facts=facts
        )
        return piece, tombstones

    def _key_columns(self, ref: TableRef, key_fields: tuple[str, ...], settings: TableSettings) -> tuple[str, ...]:
        """The table's key columns; none for a keyless table (its inserts only are taken here)."""
        return key_columns_for(ref.id, key_fields, settings.key_columns, self.context) or ()

    def _row_columns(self, ref: TableRef, columns: Mapping[str, ColumnType] | None) -> dict[str, ColumnType] | None:
        """Each row column's type: the schema's, for schemaless JSON the established one, else None (infer)."""
        if columns is not None:
            return dict(columns)
        established = self.context.established.get(ref.id)
        if established is None:
            return None
        return {name: established_type(established.field(name).type) for name in established.names}

    def _table(
        self,
        ref: TableRef,
        rows: Mapping[str, pa.Array],
        markers: np.ndarray,
        row_columns: Mapping[str, ColumnType],
        schema_columns: Mapping[str, ColumnType] | None,
    ) -> pa.Table:
        """The piece's table, with ``TableBatch.to_arrow``'s column order, types and conversions."""
        established = self.context.established.get(ref.id)
        names = column_order(established, row_columns)
        arrays: list[pa.Array] = []
        fields: list[pa.Field] = []
        size = len(markers)
        for name in names:
            ctype = (schema_columns or {}).get(name)
            if ctype is None and established is not None and name in established.names:
                ctype = established_type(established.field(name).type)
            if ctype is None:
                ctype = row_columns[name]
            raw = rows.get(name)
            try:
                arrays.append(converted(raw, ctype, size))
            except (ConversionError, pa.ArrowException) as exc:
                decline(f"column {name!r} does not convert: {exc}")
            fields.append(pa.field(name, ctype.arrow, nullable=True))
        return marked_table(fields, arrays, markers)


def _check_tombstones(records: pa.Table, tombstone: pa.ChunkedArray, ops: pa.ChunkedArray) -> None:
    """Decline the topic unless every tombstone follows its key's delete (the others are deletes to write)."""
    flags = tombstone.to_numpy()
    deletes = np.zeros(len(flags), dtype=bool)
    deletes[~flags] = pc.equal(ops, Op.DELETE.value).to_numpy()
    partitions, offsets = records.column("partition"), records.column("offset")
    if not offsets_ascending(partitions.to_numpy(), offsets.to_numpy()):
        decline("a partition's offsets go backwards")
    if not tombstones_follow_deletes(partitions, offsets, records.column("key"), flags, deletes):
        decline("a tombstone stands for a delete whose event was compacted away")


#: Events from a schemaless topic's end looked at for a row (deletes have none): past these, the shape is unknown.
_SHAPE_LOOKBACK = 64


def _last_row_shape(payloads: pa.ChunkedArray) -> SourceShape | None:
    """A schemaless topic's shape: the field names of its last event with an ``after`` row, as the record path."""
    for index in range(len(payloads) - 1, max(-1, len(payloads) - 1 - _SHAPE_LOOKBACK), -1):
        event = orjson.loads(payloads[index].as_py())
        row = event.get("after") if isinstance(event, dict) else None
        if isinstance(row, dict) and row:
            return SourceShape.of_row(row)
    return None
