"""Decoding in bulk: a topic's JsonConverter change events parsed by Arrow's JSON reader, all at once.

The record path decodes one record at a time with orjson (``connector.debezium.envelope``). For the
columnar lane, these functions read a whole topic's values in one call of Arrow's JSON reader, with
each row column parsed as the type the Connect schema (or the table's established schema) gives. They
take only what orjson would read the same way; anything else calls ``decline`` and the record path
decodes the topic instead.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import os
import re
from collections.abc import Mapping
from typing import Literal

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from connector.debezium.envelope import EnvelopeDecoder, wrapped_payload_start
from connector.debezium.types import ColumnType
from connector.errors import ConnectorError, decline
from connector.events import ROW_OPS, KafkaRecord, Op

SCHEMA_PREFIX = b'{"schema":'

# A JSON scalar as a key holds it: the record path parses such keys with orjson, so the pattern only admits
# what orjson admits (no control characters, no surrogate escapes, no leading zeros, no whitespace).
_JSON_STRING = r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})))*"'
_JSON_SCALAR = rf"(?:null|true|false|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|{_JSON_STRING})"
_FLAT_OBJECT = rf"\{{(?:{_JSON_STRING}:{_JSON_SCALAR}(?:,{_JSON_STRING}:{_JSON_SCALAR})*)?\}}"

# Payload lines are parsed in chunks of about this size, in parallel (``read_json``).
_CHUNK_BYTES = 4 << 20

#: The columns of a parsed topic (``parse_envelopes``).
PARSED_COLUMNS = ("op", "before", "after", "ts_ms", "connector", "snapshot")


def envelope_schema(row_type: pa.StructType) -> pa.Schema:
    """The envelope fields the lane reads, with ``before`` and ``after`` of ``row_type``."""
    return pa.schema(
        [
            pa.field("op", pa.string()),
            pa.field("before", row_type),
            pa.field("after", row_type),
            pa.field("ts_ms", pa.int64()),
            pa.field("source", pa.struct([pa.field("connector", pa.string()), pa.field("snapshot", pa.string())])),
        ]
    )


def payloads(
    decoder: EnvelopeDecoder, values: pa.ChunkedArray, first: KafkaRecord
) -> tuple[pa.ChunkedArray, Mapping[str, ColumnType] | None]:
    """The payloads of JsonConverter values sharing one schema, and its columns (schemaless: the values, None)."""
    head = values[0].as_py()
    if not head.startswith(SCHEMA_PREFIX):
        return values, None
    layout = decoder.payload_layout(head)
    if layout is None:
        decline(f"{first.position}: the value's schema is not JsonConverter's compact layout")
    start, columns = layout
    prefix = head[:start]
    if not pc.all(pc.starts_with(values, pattern=prefix)).as_py():
        decline("the topic's values do not all share one schema")
    return pc.binary_slice(values, start, -1), columns


def key_fields(keys: pa.ChunkedArray, first: KafkaRecord) -> tuple[str, ...]:
    """Key columns of every record; each key must be JSON the record path would read the same way.

    No record with a key: none (a keyless table; Debezium sends a null key).
    """
    if keys.null_count == len(keys):
        return ()
    if keys.null_count:
        decline("a record has no key")
    try:
        keys.cast(pa.string())  # the pattern below would let invalid UTF-8 through; orjson does not
    except pa.ArrowInvalid as exc:
        decline(f"a key is not valid UTF-8: {exc}")
    try:
        _, fields = EnvelopeDecoder.parse_key(first)
    except ConnectorError as exc:
        decline(str(exc))
    head = first.key or b""
    if not fields:
        decline("the key has no columns")
    try:
        if head.startswith(SCHEMA_PREFIX):
            start = wrapped_payload_start(head)
            if start is None:
                decline("the key's schema is not JsonConverter's compact layout")
            pattern = "^" + re.escape(head[:start].decode()) + _FLAT_OBJECT + r"\}$"
        else:
            names = ",".join(re.escape(orjson.dumps(name).decode()) + ":" + _JSON_SCALAR for name in fields)
            pattern = r"^\{" + names + r"\}$"
        matches = pc.match_substring_regex(keys, pattern=pattern)
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        decline(f"key pattern: {exc}")
    if not pc.all(matches).as_py():
        decline("a key is not a flat JSON object of the first key's layout")
    return fields


def payload_lines(payloads: pa.ChunkedArray, count: int) -> pa.Array:
    """The payloads as JSON lines, one large_binary array over one buffer; line ``i`` is record ``i``'s payload."""
    starts = pc.starts_with(payloads, pattern=b"{")
    ends = pc.ends_with(payloads, pattern=b"}")
    if not pc.all(pc.and_(starts, ends)).as_py():
        decline("a payload is not one JSON object")
    try:
        # large_binary: a slice of more than 2 GiB of payloads still joins into one buffer.
        lines = pc.binary_join_element_wise(
            payloads.cast(pa.large_binary()), pa.scalar(b"", pa.large_binary()), pa.scalar(b"\n", pa.large_binary())
        ).combine_chunks()
    except pa.ArrowException as exc:
        decline(f"payloads do not join: {exc}")
    try:
        lines.cast(pa.large_string())  # Arrow's JSON reader takes invalid UTF-8 in strings; orjson does not
    except pa.ArrowInvalid as exc:
        decline(f"a payload is not valid UTF-8: {exc}")
    # Each line starts '{' and ends '}', so it yields at least one row; a newline inside a payload would make
    # more lines than records (and ``read_json`` checks one row per line).
    data = np.frombuffer(_line_bytes(lines, _line_offsets(lines), 0, len(lines)), dtype=np.uint8)
    if np.count_nonzero(data == ord("\n")) != count:
        decline("a payload spans lines")
    return lines


def _line_offsets(lines: pa.Array) -> np.ndarray:
    """Where each line of a large_binary array starts in its data buffer, and where the last one ends."""
    return np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset : lines.offset + len(lines) + 1]


def _line_bytes(lines: pa.Array, offsets: np.ndarray, start: int, stop: int) -> pa.Buffer:
    """The bytes of lines ``start`` to ``stop`` (exclusive), without copying them."""
    begin, end = int(offsets[start]), int(offsets[stop])
    return lines.buffers()[2].slice(begin, end - begin)


def read_json(lines: pa.Array, schema: pa.Schema, unexpected: Literal["infer", "ignore"] = "infer") -> list[pa.Table]:
    """The lines parsed in chunks of whole lines (in parallel), ``schema``'s fields typed and others inferred.

    ``unexpected="ignore"``: fields ``schema`` does not declare, at any depth, are parsed but not built.

    Each chunk is one block of Arrow's JSON reader: across blocks the reader unifies the types it inferred
    for a field, and pyarrow 21 crashes the process when a field holds a string in one block and an object
    or array in another (and turns an object then a string into nulls). Within one block such a conflict
    is a parse error. Fields Arrow reads but orjson (the record path) rejects (bare NaN/Infinity, only ever
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
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior=unexpected),
        )

    try:
        tables = list(_parse_pool().map(parse, chunks)) if len(chunks) > 1 else [parse(chunks[0])]
    except pa.ArrowException as exc:
        decline(f"payloads do not parse with the schema's types: {exc}")
    for (start, stop), table in zip(chunks, tables, strict=True):
        if table.num_rows != stop - start:
            decline("payload rows do not match records")
        if any(_non_finite(column) for column in table.columns):
            decline("a value holds NaN or Infinity")
    return tables


@functools.cache
def _parse_pool() -> concurrent.futures.ThreadPoolExecutor:
    """Threads for parsing chunks (Arrow's reader releases the GIL)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="lane-json")


def parse_envelopes(
    lines: pa.Array, row_type: pa.StructType, inferred: list[pa.Table] | None = None, *, declared: bool = False
) -> pa.Table:
    """Every payload line as ``PARSED_COLUMNS``: op, before and after (of ``row_type``), ts_ms, connector, snapshot.

    Only change events (c/r/u/d) are taken. ``declared``: ``row_type`` is the values' own Connect schema, which
    declares every row column; a payload's other row fields are ignored, as JsonConverter (and the record path)
    ignores them. Otherwise (schemaless JSON) rows holding a column ``row_type`` lacks leave the topic to the
    record path. ``inferred``: the same lines as ``read_json`` parsed them with rows of no declared column (a
    schemaless topic's first batch). When their rows retype to ``row_type`` exactly (``_retyped``) they are used,
    not parsed again: the second parse costs about 1.6 µs per event, some 0.3 CPU-s of a 200,000-event first batch.
    """
    tables = _retyped(inferred, row_type) if inferred is not None else None
    if tables is None:
        # With a schema nothing undeclared needs building: Debezium's source block, transaction and ts_us/ts_ns
        # (about 420 bytes of a Postgres event) cost as much again as the rest when built. Unless a bare NaN or
        # Infinity could hide in them: ``read_json`` finds those only in what it builds.
        ignore = declared and not _may_hold_non_finite(lines)
        tables = read_json(lines, envelope_schema(row_type), "ignore" if ignore else "infer")
        for table in tables:
            for side in ("before", "after"):
                if table.schema.field(side).type != row_type:
                    decline(f"a {side} row has a column its schema does not declare")
    parsed = pa.Table.from_batches(
        [
            pa.RecordBatch.from_arrays(
                [*(table.column(name).combine_chunks() for name in PARSED_COLUMNS[:4])]
                + [pc.struct_field(table.column("source").combine_chunks(), name) for name in PARSED_COLUMNS[4:]],
                names=list(PARSED_COLUMNS),
            )
            for table in tables
        ]
    ).combine_chunks()
    ops = parsed.column("op")
    if ops.null_count or not pc.all(pc.is_in(ops, pa.array([op.value for op in ROW_OPS]))).as_py():
        decline("a record is not a c/r/u/d change event")
    return parsed


def _retyped(tables: list[pa.Table], row_type: pa.StructType) -> list[pa.Table] | None:
    """``tables`` with ``before`` and ``after`` as structs of ``row_type``; None unless that equals parsing with it.

    The other envelope fields are declared alike in both parses, so they are taken as they are.
    """
    retyped = []
    for table in tables:
        for side in ("before", "after"):
            rows = _as_row_type(table.column(side).combine_chunks(), row_type)
            if rows is None:
                return None
            table = table.set_column(table.schema.get_field_index(side), side, rows)
        retyped.append(table)
    return retyped


def _as_row_type(rows: pa.StructArray, row_type: pa.StructType) -> pa.StructArray | None:
    """Inferred ``rows`` as structs of ``row_type``, or None when an explicit parse could differ.

    Exact only when every inferred column is one of ``row_type`` with its type, or all null (Arrow's type
    ``null``): columns absent or all null become nulls of their type. Anything else (a timestamp Arrow took
    from strings, ints where ``row_type`` says double, a column ``row_type`` lacks) is left to the parse.
    """
    names = [field.name for field in rows.type]
    if len(set(names)) != len(names):
        return None
    found = dict(zip(names, rows.flatten(), strict=True))  # flatten: parent nulls and offset applied
    if not set(found) <= set(row_type.names):
        return None
    children = []
    for field in row_type:
        child = found.get(field.name)
        if child is None or pa.types.is_null(child.type):
            child = pa.nulls(len(rows), field.type)
        elif child.type != field.type:
            return None
        children.append(child)
    mask = rows.is_null() if rows.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(row_type), mask=mask)


def first_row_columns(payload: bytes, first: KafkaRecord) -> list[str]:
    """The columns of the first row the record path makes, in order (it orders columns by first appearance)."""
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError:
        decline(f"{first.position}: the first payload does not parse")
    if not isinstance(event, dict):
        decline(f"{first.position}: the first payload is not an object")
    before, after = event.get("before"), event.get("after")
    op = event.get("op")
    row = before if op == Op.DELETE else after
    if op == Op.UPDATE and isinstance(before, dict) and isinstance(after, dict) and list(before) != list(after):
        decline(f"{first.position}: the first update's before and after order their columns differently")
    if not isinstance(row, dict):
        decline(f"{first.position}: the first event has no row")
    return list(row)


def _may_hold_non_finite(lines: pa.Array) -> bool:
    """Whether any line holds the text ``NaN`` or ``Infinity`` (a bare token or inside a string alike).

    One pass over the bytes per token for its first byte, rarely found in JSON, then its next bytes where it is:
    Arrow's ``match_substring`` took 1.1-1.6 µs a 630-byte line, this about 0.3 for both tokens.
    """
    data = np.frombuffer(_line_bytes(lines, _line_offsets(lines), 0, len(lines)), dtype=np.uint8)
    for token in (b"NaN", b"Infinity"):
        found = np.flatnonzero(data[: max(len(data) - len(token) + 1, 0)] == token[0])
        for index, byte in enumerate(token[1:], start=1):
            found = found[data[found + index] == byte]
        if len(found):
            return True
    return False


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
