"""The columnar lane: a topic's plain Debezium JSON change events decoded and marked in Arrow, in bulk.

The row path (``SliceCollector``) builds Python objects for every record, which costs about ten times
what parsing the JSON costs. For the common case (JsonConverter output of c/r/u/d events, compact
JSON, no TOASTed placeholder, keys of scalars) the lane instead parses all of a topic's payloads in
one call of Arrow's JSON reader, with the column types the Connect schema (or, for schemaless JSON,
the table's established schema) gives, and marks rows with vectorised kernels.

The lane takes a topic only when it can produce exactly the piece the row path would. Anything it does
not handle (noise other than tombstones, truncates, keys it cannot check, placeholders, values that do
not parse or convert, ``keep-last`` tables, a second topic for the same table) leaves the topic to the
row path whole, so decode errors, dead letters and stopped tables stay the row path's alone.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import logging
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from connector.config import TableSettings
from connector.debezium.connect_decimal import decimals_from_base64
from connector.debezium.envelope import EnvelopeDecoder, wrapped_payload_start
from connector.debezium.types import ColumnType, ConversionError, floor_nanos_to_micros, to_arrow, type_policy
from connector.errors import ConnectorError
from connector.events import ROW_OPS, KafkaRecord, Op
from connector.landing.batching import column_order, established_type, marked_table
from connector.landing.collect import CollectContext, Collected, TablePiece
from connector.landing.layout import TableRef, table_for_topic
from connector.landing.ordering import offsets_ascending
from connector.landing.rowmarker import MarkerSpec, placeholder_values

log = logging.getLogger(__name__)

_SCHEMA_PREFIX = b'{"schema":'

# A JSON scalar as a key holds it: the row path parses such keys with orjson, so the pattern only admits
# what orjson admits (no control characters, no surrogate escapes, no leading zeros, no whitespace).
_JSON_STRING = r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})))*"'
_JSON_SCALAR = rf"(?:null|true|false|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|{_JSON_STRING})"
_FLAT_OBJECT = rf"\{{(?:{_JSON_STRING}:{_JSON_SCALAR}(?:,{_JSON_STRING}:{_JSON_SCALAR})*)?\}}"

# Arrow types whose parsed JSON values cast exactly as ``pa.array(values, type)`` converts them.
_CASTS_EXACTLY = {pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float64(), pa.bool_(), pa.string()}


# Payload lines are parsed in chunks of about this size, in parallel (``_read_json``).
_CHUNK_BYTES = 4 << 20


def _envelope(row_type: pa.StructType) -> pa.Schema:
    """The envelope fields the lane reads, with ``before`` and ``after`` of ``row_type``."""
    return pa.schema(
        [
            pa.field("op", pa.string()),
            pa.field("before", row_type),
            pa.field("after", row_type),
            pa.field("ts_ms", pa.int64()),
            pa.field("source", pa.struct([pa.field("connector", pa.string())])),
        ]
    )


# What the row path infers from a schemaless column's values (``column_type_from_value``).
_INFERRED_TYPES = {
    "int": ColumnType(pa.int64(), "plain"),
    "double": ColumnType(pa.float64(), "plain"),
    "bool": ColumnType(pa.bool_(), "plain"),
    "string": ColumnType(pa.string(), "plain"),
}
_EXACT_DOUBLE_INTS = 2**53


class _NotForTheLane(Exception):
    """This topic's records go to the row path (not an error: the row path handles them)."""


def _leave(reason: str) -> NoReturn:
    raise _NotForTheLane(reason)


@dataclass
class LaneResult:
    """What the lane collected, and the records it left for the row path."""

    rest: pa.Table
    collected: Collected = field(default_factory=Collected)
    topics: list[str] = field(default_factory=list)  # the topics the lane took


def collect_in_lane(context: CollectContext, table: pa.Table, *, enabled: bool = True) -> LaneResult:
    """The lane's share of ``table``; with ``enabled`` false, everything is left to the row path."""
    return ColumnarLane(context).collect(table) if enabled else LaneResult(rest=table)


class ColumnarLane:
    """Collects whole topics of a batch in Arrow; one instance per slice, reading only a ``CollectContext``."""

    def __init__(self, context: CollectContext) -> None:
        self.context = context
        self.mirror = context.mirror
        self._decoder = EnvelopeDecoder(type_policy(self.mirror))
        self._placeholders = pa.array(placeholder_values(self.mirror.unavailable_value_placeholder), pa.string())
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
        topics = [t for t in pc.unique(topic_column).to_pylist() if t is not None]
        refs = {topic: table_for_topic(topic, self.mirror) for topic in topics}
        topics_per_table = Counter(ref.id for ref in refs.values())
        for topic in topics:
            ref = refs[topic]
            if topics_per_table[ref.id] > 1 or not self._eligible(topic, ref):
                continue
            records = table if len(topics) == 1 else table.filter(pc.equal(topic_column, topic))
            try:
                piece, tombstones = self._collect_topic(topic, ref, records)
            except _NotForTheLane as reason:
                log.debug("topic %s goes to the row path: %s", topic, reason)
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
        if topic.startswith("__debezium-heartbeat") or ref.id in self.context.stopped:
            return False
        prefix = f"{ref.id}."
        return not any(column.startswith(prefix) for column in self.mirror.decimal_columns)

    # -- one topic ----------------------------------------------------------------------------------

    def _collect_topic(self, topic: str, ref: TableRef, records: pa.Table) -> tuple[TablePiece, int]:
        tombstone = pc.fill_null(pc.equal(pc.binary_length(records.column("value")), 0), True)
        tombstones = pc.sum(tombstone).as_py() or 0
        changes = records.filter(pc.invert(tombstone)) if tombstones else records
        count = changes.num_rows
        if not count:
            _leave("no change event")
        partitions = changes.column("partition").to_numpy()
        offsets = changes.column("offset").to_numpy()
        if not offsets_ascending(partitions, offsets):
            _leave("a partition's offsets go backwards")
        values = changes.column("value")
        first = KafkaRecord(topic, int(partitions[0]), int(offsets[0]), changes.column("key")[0].as_py(), None)
        payloads, columns = self._payloads(values, first)
        settings = self.mirror.table_settings(topic)
        key_fields = self._check_keys(changes.column("key"), first)
        key_columns = self._key_columns(ref, key_fields, settings)
        lines = _lines(payloads, count)
        row_columns = self._row_columns(ref, columns)
        inferring = row_columns is None
        if row_columns is None:
            # Rows declared as structs of no known column: Arrow infers their columns.
            inferred = _read_json(lines, _envelope(pa.struct([])))
            row_columns = _inferred_columns(inferred, payloads[0].as_py(), first)
        parsed = self._parse(lines, row_columns)
        spec = self._marker_specs[self._replay_safe or ref.id in self.context.upsert_tables]
        markers, rows = self._mark(parsed, row_columns, key_columns, spec)
        if inferring:
            row_columns = _used_columns(row_columns, rows)
        arrow = self._table(ref, rows, markers, row_columns, columns, key_columns)
        ops = parsed.column("op")
        events = {str(item["values"]): int(item["counts"]) for item in pc.value_counts(ops).to_pylist()}
        max_ts = pc.max(parsed.column("ts_ms")).as_py()
        piece = TablePiece(
            ref=ref,
            key_columns=key_columns,
            table=arrow,
            first=(topic, first.partition, first.offset),
            events=events,
            snapshot_only=set(events) == {Op.READ},
            max_source_ts_ms=max_ts if isinstance(max_ts, int) else None,
            connector=_first_connector(parsed.column("connector")),
        )
        return piece, tombstones

    def _payloads(
        self, values: pa.ChunkedArray, first: KafkaRecord
    ) -> tuple[pa.ChunkedArray, Mapping[str, ColumnType] | None]:
        """The payloads of JsonConverter values sharing one schema (or the values themselves, schemaless)."""
        head = values[0].as_py()
        if not head.startswith(_SCHEMA_PREFIX):
            return values, None
        layout = self._decoder.payload_layout(head)
        if layout is None:
            _leave(f"{first.position}: the value's schema is not JsonConverter's compact layout")
        start, columns = layout
        prefix = head[:start]
        if not pc.all(pc.starts_with(values, pattern=prefix)).as_py():
            _leave("the topic's values do not all share one schema")
        return pc.binary_slice(values, start, -1), columns

    def _check_keys(self, keys: pa.ChunkedArray, first: KafkaRecord) -> tuple[str, ...]:
        """Key columns of every record; each key must be JSON the row path would read the same way."""
        if keys.null_count:
            _leave("a record has no key")
        try:
            keys.cast(pa.string())  # the pattern below would let invalid UTF-8 through; orjson does not
        except pa.ArrowInvalid as exc:
            _leave(f"a key is not valid UTF-8: {exc}")
        try:
            _, fields = EnvelopeDecoder.parse_key(first)
        except ConnectorError as exc:
            _leave(str(exc))
        head = first.key or b""
        if not fields:
            _leave("the key has no columns")
        try:
            if head.startswith(_SCHEMA_PREFIX):
                start = wrapped_payload_start(head)
                if start is None:
                    _leave("the key's schema is not JsonConverter's compact layout")
                pattern = "^" + re.escape(head[:start].decode()) + _FLAT_OBJECT + r"\}$"
            else:
                names = ",".join(re.escape(orjson.dumps(name).decode()) + ":" + _JSON_SCALAR for name in fields)
                pattern = r"^\{" + names + r"\}$"
            matches = pc.match_substring_regex(keys, pattern=pattern)
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            _leave(f"key pattern: {exc}")
        if not pc.all(matches).as_py():
            _leave("a key is not a flat JSON object of the first key's layout")
        return fields

    def _key_columns(self, ref: TableRef, key_fields: tuple[str, ...], settings: TableSettings) -> tuple[str, ...]:
        if settings.key_columns:
            return tuple(settings.key_columns)
        return key_fields or self.context.key_columns.get(ref.id, ())

    def _row_columns(self, ref: TableRef, columns: Mapping[str, ColumnType] | None) -> dict[str, ColumnType] | None:
        """Each row column's type: the schema's, for schemaless JSON the established one, else None (infer)."""
        if columns is not None:
            return dict(columns)
        established = self.context.established.get(ref.id)
        if established is None:
            return None
        return {name: established_type(established.field(name).type) for name in established.names}

    def _parse(self, lines: pa.Array, row_columns: Mapping[str, ColumnType]) -> pa.Table:
        """Every payload line parsed with the row columns' types: op, before, after, ts_ms and connector."""
        row_type = pa.struct([pa.field(name, _parse_type(name, ctype)) for name, ctype in row_columns.items()])
        tables = _read_json(lines, _envelope(row_type))
        for table in tables:
            for side in ("before", "after"):
                if table.schema.field(side).type != row_type:
                    _leave(f"a {side} row has a column its schema does not declare")
        parsed = pa.Table.from_batches(
            [
                pa.RecordBatch.from_arrays(
                    [*(table.column(name).combine_chunks() for name in ("op", "before", "after", "ts_ms"))]
                    + [pc.struct_field(table.column("source").combine_chunks(), "connector")],
                    names=["op", "before", "after", "ts_ms", "connector"],
                )
                for table in tables
            ]
        ).combine_chunks()
        if self._holds_placeholder(parsed):
            _leave("a value is an unavailable (TOASTed) placeholder")
        ops = parsed.column("op")
        if ops.null_count or not pc.all(pc.is_in(ops, pa.array([op.value for op in ROW_OPS]))).as_py():
            _leave("a record is not a c/r/u/d change event")
        return parsed

    def _holds_placeholder(self, parsed: pa.Table) -> bool:
        """Whether a row value equals the placeholder (text or base64), the row path's own test."""
        for side in ("before", "after"):
            for column in parsed.column(side).chunk(0).flatten():
                if column.type == pa.string() and pc.any(pc.is_in(column, value_set=self._placeholders)).as_py():
                    return True
        return False

    def _mark(
        self,
        parsed: pa.Table,
        row_columns: Mapping[str, ColumnType],
        key_columns: tuple[str, ...],
        spec: MarkerSpec,
    ) -> tuple[np.ndarray, dict[str, pa.Array]]:
        """Row markers and row columns, as ``RowMarkerMapper`` makes them record by record."""
        ops = parsed.column("op").combine_chunks()
        before = parsed.column("before").combine_chunks()
        after = parsed.column("after").combine_chunks()
        is_delete = pc.equal(ops, Op.DELETE.value)
        is_update = pc.equal(ops, Op.UPDATE.value)
        if pc.any(pc.and_(pc.invert(is_delete), pc.is_null(after))).as_py():
            _leave("a create or update has no 'after' row")
        before_columns = dict(zip(row_columns, before.flatten(), strict=True))
        after_columns = dict(zip(row_columns, after.flatten(), strict=True))
        missing = [c for c in key_columns if c not in row_columns]
        if missing:
            _leave(f"key columns {missing} are not row columns")
        has_before = pc.is_valid(before)
        key_changed = pa.array(np.zeros(len(ops), dtype=bool))
        for column in key_columns:
            old, new = before_columns[column], after_columns[column]
            same = pc.or_(pc.fill_null(pc.equal(old, new), False), pc.and_(pc.is_null(old), pc.is_null(new)))
            key_changed = pc.or_(key_changed, pc.invert(same))
            # A delete row (or the delete half of a key change) without its key would need the record key.
            needs_key = pc.and_(pc.is_null(old), pc.or_(is_delete, pc.and_(is_update, has_before)))
            if pc.any(needs_key).as_py():
                _leave("a delete row lacks a key column in 'before'")
        split = pc.and_(pc.and_(is_update, has_before), key_changed).to_numpy(zero_copy_only=False)
        op_codes = ops.to_numpy(zero_copy_only=False)
        markers = spec.of_ops(op_codes, split)
        deletes = is_delete.to_numpy(zero_copy_only=False)
        rows: dict[str, pa.Array] = {}
        if not split.any():
            for name in row_columns:
                old, new = before_columns[name], after_columns[name]
                rows[name] = pc.if_else(is_delete, old, new) if deletes.any() else new
            return markers, rows
        # An update that changes the key: a delete of the old row, then an insert of the new one.
        per_record = 1 + split.astype(np.int64)
        take = np.repeat(np.arange(len(op_codes)), per_record)
        starts = np.cumsum(per_record) - per_record
        from_before = np.repeat(deletes, per_record)
        from_before[starts[split]] = True
        expanded = np.repeat(markers, per_record)
        expanded[starts[split]] = int(spec.key_change[0])
        indices = pa.array(take)
        mask = pa.array(from_before)
        for name in row_columns:
            rows[name] = pc.if_else(mask, before_columns[name].take(indices), after_columns[name].take(indices))
        return expanded, rows

    def _table(
        self,
        ref: TableRef,
        rows: Mapping[str, pa.Array],
        markers: np.ndarray,
        row_columns: Mapping[str, ColumnType],
        schema_columns: Mapping[str, ColumnType] | None,
        key_columns: tuple[str, ...],
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
                arrays.append(_converted(raw, ctype, size))
            except (ConversionError, pa.ArrowException) as exc:
                _leave(f"column {name!r} does not convert: {exc}")
            fields.append(pa.field(name, ctype.arrow, nullable=True))
        return marked_table(fields, arrays, markers)


def _lines(payloads: pa.ChunkedArray, count: int) -> pa.Array:
    """The payloads as JSON lines, one large_binary array over one buffer; line ``i`` is record ``i``'s payload."""
    starts = pc.starts_with(payloads, pattern=b"{")
    ends = pc.ends_with(payloads, pattern=b"}")
    if not pc.all(pc.and_(starts, ends)).as_py():
        _leave("a payload is not one JSON object")
    try:
        # large_binary: a slice of more than 2 GiB of payloads still joins into one buffer.
        lines = pc.binary_join_element_wise(
            payloads.cast(pa.large_binary()), pa.scalar(b"", pa.large_binary()), pa.scalar(b"\n", pa.large_binary())
        ).combine_chunks()
    except pa.ArrowException as exc:
        _leave(f"payloads do not join: {exc}")
    try:
        lines.cast(pa.large_string())  # Arrow's JSON reader takes invalid UTF-8 in strings; orjson does not
    except pa.ArrowInvalid as exc:
        _leave(f"a payload is not valid UTF-8: {exc}")
    # Each line starts '{' and ends '}', so it yields at least one row; a newline inside a payload would make
    # more lines than records (and ``_read_json`` checks one row per line).
    data = np.frombuffer(_line_bytes(lines, _line_offsets(lines), 0, len(lines)), dtype=np.uint8)
    if np.count_nonzero(data == ord("\n")) != count:
        _leave("a payload spans lines")
    return lines


def _line_offsets(lines: pa.Array) -> np.ndarray:
    """Where each line of a large_binary array starts in its data buffer, and where the last one ends."""
    return np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset : lines.offset + len(lines) + 1]


def _line_bytes(lines: pa.Array, offsets: np.ndarray, start: int, stop: int) -> pa.Buffer:
    """The bytes of lines ``start`` to ``stop`` (exclusive), without copying them."""
    begin, end = int(offsets[start]), int(offsets[stop])
    return lines.buffers()[2].slice(begin, end - begin)


def _read_json(lines: pa.Array, schema: pa.Schema) -> list[pa.Table]:
    """The lines parsed in chunks of whole lines (in parallel), ``schema``'s fields typed and others inferred.

    Each chunk is one block of Arrow's JSON reader: across blocks the reader unifies the types it inferred
    for a field, and pyarrow 21 crashes the process when a field holds a string in one block and an object
    or array in another (and turns an object then a string into nulls). Within one block such a conflict
    is a parse error. Fields Arrow reads but orjson (the row path) rejects (bare NaN/Infinity, only ever
    read into doubles) are looked for here, in every field, before the chunks are cut down to what the lane
    uses.
    """
    offsets = _line_offsets(lines)
    targets = offsets[0] + np.arange(1, (int(offsets[-1] - offsets[0]) // _CHUNK_BYTES) + 1) * _CHUNK_BYTES
    bounds = np.unique(np.concatenate([[0], np.searchsorted(offsets, targets), [len(lines)]])).tolist()
    chunks = list(itertools.pairwise(bounds))

    def parse(chunk: tuple[int, int]) -> pa.Table:
        data = _line_bytes(lines, offsets, *chunk)
        return pa_json.read_json(
            pa.BufferReader(data),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=data.size + 1),
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer"),
        )

    try:
        tables = list(_parse_pool().map(parse, chunks)) if len(chunks) > 1 else [parse(chunks[0])]
    except pa.ArrowException as exc:
        _leave(f"payloads do not parse with the schema's types: {exc}")
    for (start, stop), table in zip(chunks, tables, strict=True):
        if table.num_rows != stop - start:
            _leave("payload rows do not match records")
        if any(_non_finite(column) for column in table.columns):
            _leave("a value holds NaN or Infinity")
    return tables


@functools.cache
def _parse_pool() -> concurrent.futures.ThreadPoolExecutor:
    """Threads for parsing chunks (Arrow's reader releases the GIL)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="lane-json")


def _inferred_columns(inferred: list[pa.Table], first_payload: bytes, first: KafkaRecord) -> dict[str, ColumnType]:
    """A schemaless table's first batch: its row columns, typed as the row path's inference may type them.

    ``inferred`` holds the payloads' chunks parsed with ``before`` and ``after`` inferred by Arrow. A column of
    ints, of numbers, of booleans or of strings gets the type the row path gives such values (int64,
    double, bool, string); nested values or mixed kinds go to the row path. Columns come in the order
    of the first row, as the row path orders them, so every row must hold only the first row's columns.
    ``_used_columns`` then checks the values the rows actually use.
    """
    kinds: dict[str, str | None] = {}
    for table, side in itertools.product(inferred, ("before", "after")):
        for column in table.schema.field(side).type:
            kind = _value_kind(column.name, column.type)
            known = kinds.get(column.name)
            if known is None or kind is None or known == kind:
                kinds[column.name] = known or kind
            elif {known, kind} == {"int", "double"}:
                kinds[column.name] = "double"
            else:
                _leave(f"column {column.name!r} holds {known} and {kind} values")
    order = _first_row_columns(first_payload, first)
    if not set(kinds) <= set(order):
        _leave("a row has a column the first row does not have")
    return {name: _INFERRED_TYPES[kinds.get(name) or "string"] for name in order}


def _value_kind(name: str, arrow: pa.DataType) -> str | None:
    """What Arrow inferred a schemaless column's values to be: int, double, bool, string, or None (nulls)."""
    if pa.types.is_null(arrow):
        return None
    if arrow == pa.int64():
        return "int"
    if arrow == pa.float64():
        return "double"
    if arrow == pa.bool_():
        return "bool"
    if pa.types.is_string(arrow) or pa.types.is_timestamp(arrow):  # strings Arrow took for timestamps
        return "string"
    _leave(f"column {name!r} holds {arrow} values (nested or mixed): the row path writes them as JSON text")


def _first_row_columns(payload: bytes, first: KafkaRecord) -> list[str]:
    """The columns of the first row the row path makes, in order (it orders columns by first appearance)."""
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError:
        _leave(f"{first.position}: the first payload does not parse")
    if not isinstance(event, dict):
        _leave(f"{first.position}: the first payload is not an object")
    before, after = event.get("before"), event.get("after")
    op = event.get("op")
    row = before if op == Op.DELETE else after
    if op == Op.UPDATE and isinstance(before, dict) and isinstance(after, dict) and list(before) != list(after):
        _leave(f"{first.position}: the first update's before and after order their columns differently")
    if not isinstance(row, dict):
        _leave(f"{first.position}: the first event has no row")
    return list(row)


def _used_columns(row_columns: Mapping[str, ColumnType], rows: Mapping[str, pa.Array]) -> dict[str, ColumnType]:
    """Inferred columns as the row path keeps them: all-null ones dropped, doubles only where it says double.

    The row path infers from the values its rows use: ints alone make int64, and a column with no value
    is left out. A double column whose used values are all whole numbers could have been ints (``1``
    and ``1.0`` parse alike), and ints beyond 2**53 do not convert exactly: those go to the row path.
    """
    kept: dict[str, ColumnType] = {}
    for name, ctype in row_columns.items():
        used = rows[name]
        if used.null_count == len(used):
            continue
        if ctype.arrow == pa.float64():
            present = pc.drop_null(used)
            if not pc.any(pc.not_equal(pc.trunc(present), present)).as_py():
                _leave(f"column {name!r} has only whole numbers: ints or doubles cannot be told apart")
            if pc.max(pc.abs(present)).as_py() > _EXACT_DOUBLE_INTS:
                _leave(f"column {name!r} has numbers beyond 2**53")
        kept[name] = ctype
    return kept


def merge_lane(lane: Collected, rest: Collected) -> Collected:
    """One slice's outcome from the lane's topics and the row path's (their tables never overlap)."""
    rest.pieces.update(lane.pieces)
    rest.records += lane.records
    for kind, count in lane.skipped.by_kind.items():
        rest.skipped.add(kind, count)
    rest.problems.extend(lane.problems)
    return rest


def _parse_type(name: str, ctype: ColumnType) -> pa.DataType:
    """The type Arrow's JSON reader parses a column's wire values as."""
    wire = ctype.wire
    if wire == "plain" and ctype.arrow in _CASTS_EXACTLY:
        return pa.int64() if pa.types.is_integer(ctype.arrow) else ctype.arrow
    if wire == "plain" and ctype.arrow == pa.float32():
        return pa.float64()
    if wire in ("cast", "millis", "nanos", "time"):
        return pa.int64()
    if wire in ("base64", "decimal", "decimal_text", "zoned", "bits", "bits_bytes") or (
        wire == "json" and ctype.arrow == pa.string()
    ):
        # "json" columns here are established string columns of schemaless tables: strings pass through.
        return pa.string()
    if wire in ("vsdecimal", "vsdecimal_text"):
        return pa.struct([pa.field("scale", pa.int64()), pa.field("value", pa.string())])
    _leave(f"column {name!r} ({wire} {ctype.arrow}) needs the row path")


def _converted(raw: pa.Array | None, ctype: ColumnType, size: int) -> pa.Array:
    """``to_arrow`` of the column's wire values, vectorised where Arrow converts exactly the same way."""
    if raw is None:
        return to_arrow([None] * size, ctype)
    wire = ctype.wire
    if wire == "plain" and ctype.arrow in _CASTS_EXACTLY:
        return raw.cast(ctype.arrow)
    if wire == "cast":
        storage = pa.int32() if ctype.arrow == pa.date32() else pa.int64()
        return raw.cast(storage).cast(ctype.arrow)
    if wire == "millis":
        return raw.cast(pa.timestamp("ms")).cast(ctype.arrow)
    if wire == "nanos":
        return floor_nanos_to_micros(raw)
    if wire == "json" and raw.type == pa.string():
        return raw
    if wire == "decimal":
        bulk = decimals_from_base64(raw, ctype.arrow, ctype.scale)
        if bulk is not None:
            return bulk
    return to_arrow(raw.to_pylist(), ctype)


def _non_finite(column: pa.ChunkedArray | pa.Array) -> bool:
    """Whether any floating-point leaf of ``column`` (structs and lists included) holds NaN or ±infinity."""
    arrays = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    for array in arrays:
        kind = array.type
        if pa.types.is_floating(kind):
            if pc.any(pc.invert(pc.is_finite(array))).as_py():
                return True
        elif pa.types.is_struct(kind):
            if any(_non_finite(array.field(i)) for i in range(kind.num_fields)):
                return True
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            if _non_finite(array.values):
                return True
    return False


def _first_connector(connectors: pa.ChunkedArray) -> str | None:
    """The first non-empty ``source.connector``, as the row path keeps it."""
    present = pc.drop_null(connectors)
    present = present.filter(pc.not_equal(present, ""))
    return str(present[0].as_py()) if len(present) else None
