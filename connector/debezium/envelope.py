"""Debezium JSON envelopes (JsonConverter, ``schemas.enable`` true or false) → change events.

A record is either a change event (``op`` c/u/d/r, or t for truncate) or noise that carries no row:
a tombstone, heartbeat, transaction marker, schema-change record or logical-decoding message. Noise is
classified here and counted by the caller; anything else that does not decode raises ``DecodeError``
naming ``topic[partition]@offset``. A tombstone is noise only after its key's delete: on a compacted topic it
may be the delete's only trace, and the caller then makes it the delete (``tombstone_delete``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from connector.debezium.confluent_wire import HEADER_SIZE, MAGIC_BYTE
from connector.debezium.types import DEFAULT_POLICY, ColumnType, TypePolicy, column_type_from_schema
from connector.errors import DecodeError
from connector.events import KafkaRecord, Op

_OPS: dict[str, Op] = {op.value: op for op in Op}
_NEEDS_AFTER = frozenset({Op.CREATE, Op.READ, Op.UPDATE})
_DELETE = Op.DELETE
_MESSAGE_OP = "m"  # a logical-decoding message: noise, not a change

_SCHEMA_PREFIX = b'{"schema":'
_PAYLOAD_SEPARATOR = b',"payload":'
_SCHEMA_CACHE_LIMIT = 512


class ChangeEvent(NamedTuple):
    """One decoded Debezium change event (a named tuple: one is built per record).

    ``columns`` is the row type from the embedded schema, in the source's column order, or ``None``
    when the converter ran with ``schemas.enable=false``.
    """

    record: KafkaRecord
    op: Op
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    key: dict[str, Any] | None
    key_fields: tuple[str, ...] | None
    columns: Mapping[str, ColumnType] | None
    source: Mapping[str, Any]
    ts_ms: int | None


@dataclass(frozen=True)
class Noise:
    """A record that carries no row change; ``kind`` is the metric label it is counted under."""

    record: KafkaRecord
    kind: str
    # A schema change event's payload (MySQL/MariaDB's schema change topic): the DDL the sink may act on.
    payload: Mapping[str, Any] | None = None


HEARTBEAT_TOPIC_PREFIX = "__debezium-heartbeat"
"""Debezium's heartbeat topics (``__debezium-heartbeat.<prefix>``): noise, never a table's."""


def value_or_noise(record: KafkaRecord) -> bytes | Noise:
    """The record's value, or the noise it is whatever the converter: a heartbeat topic's record or a tombstone."""
    if record.topic.startswith(HEARTBEAT_TOPIC_PREFIX):
        return Noise(record, "heartbeat")
    value = record.value
    if value is None or len(value) == 0:
        return Noise(record, "tombstone")
    return value


class EnvelopeDecoder:
    """Decodes records, caching parsed value schemas.

    JsonConverter repeats the full schema in every record; parsing it each time would dominate the cost.
    When a value is laid out as JsonConverter writes it (``{"schema":S,"payload":P}``, compact), the
    bytes of ``S`` are the cache key and only ``P`` is parsed. Any other layout takes the general path.
    """

    def __init__(self, policy: TypePolicy = DEFAULT_POLICY) -> None:
        self._policy = policy
        self._schemas: dict[bytes, Mapping[str, ColumnType] | None] = {}

    def decode(self, record: KafkaRecord) -> ChangeEvent | Noise:
        """Classify and decode one record.

        Raises:
            DecodeError: the record is neither a change event nor known noise.
        """
        value = value_or_noise(record)
        if isinstance(value, Noise):
            return value
        try:
            payload, columns, has_schema = self._parse_value(value)
        except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
            reason = f"value is not valid JSON: {exc}{_avro_hint(value)}"
            raise DecodeError.at(record, reason) from exc
        except (KeyError, AttributeError) as exc:  # valid JSON, but its schema is no Connect schema
            reason = f"value schema is not a Connect schema: {type(exc).__name__}: {exc}"
            raise DecodeError.at(record, reason) from exc
        if payload is None:
            if has_schema:
                return Noise(record, "tombstone")  # pre-KAFKA-3832 JsonConverter: {"schema":null,"payload":null}
            raise DecodeError.at(record, "value is JSON null")
        if not isinstance(payload, dict):
            raise DecodeError.at(
                record,
                f"payload is a {type(payload).__name__}, not an object",
            )
        return event_from_payload(record, payload, lambda: columns, lambda: self.parse_key(record))

    def _parse_value(self, value: bytes) -> tuple[Any, Mapping[str, ColumnType] | None, bool]:
        """Return (payload, columns, whether the value had the schema/payload wrapper)."""
        if value.startswith(_SCHEMA_PREFIX) and value.endswith(b"}"):
            split = value.find(_PAYLOAD_SEPARATOR)
            if split > 0:
                schema_bytes = value[len(_SCHEMA_PREFIX) : split]
                if schema_bytes in self._schemas:
                    payload = orjson.loads(value[split + len(_PAYLOAD_SEPARATOR) : -1])
                    return payload, self._schemas[schema_bytes], True
                parsed = orjson.loads(value)
                columns = self._columns(parsed.get("schema"))
                # Cache only when the split really is the top-level boundary.
                if _parses_to(schema_bytes, parsed.get("schema")):
                    if len(self._schemas) >= _SCHEMA_CACHE_LIMIT:
                        self._schemas.clear()
                    self._schemas[schema_bytes] = columns
                return parsed.get("payload"), columns, True
        parsed = orjson.loads(value)
        if isinstance(parsed, dict) and "payload" in parsed and "schema" in parsed and len(parsed) == 2:
            return parsed["payload"], self._columns(parsed["schema"]), True
        return parsed, None, False

    def payload_layout(self, value: bytes) -> tuple[int, Mapping[str, ColumnType] | None] | None:
        """Where the payload starts in a value laid out as JsonConverter writes it, and its schema's columns.

        ``None`` when the value is not in that layout, or its schema does not decode (the row path then
        reports it). Every value starting with the same bytes up to the payload has the same columns.
        """
        if not (value.startswith(_SCHEMA_PREFIX) and value.endswith(b"}")):
            return None
        split = value.find(_PAYLOAD_SEPARATOR)
        if split <= 0:
            return None
        schema_bytes = value[len(_SCHEMA_PREFIX) : split]
        if schema_bytes not in self._schemas:
            try:
                self._parse_value(value)
            except (orjson.JSONDecodeError, ValueError, TypeError, KeyError, AttributeError):
                return None
            if schema_bytes not in self._schemas:
                return None  # the split is not the top-level boundary
        return split + len(_PAYLOAD_SEPARATOR), self._schemas[schema_bytes]

    def _columns(self, schema: Any) -> Mapping[str, ColumnType] | None:
        """Row columns from an Envelope schema: the fields of its ``after`` (or ``before``) struct."""
        if not isinstance(schema, dict):
            return None
        row_struct = None
        for field in schema.get("fields") or ():
            if field.get("field") == "after" and field.get("fields"):
                row_struct = field
                break
            if field.get("field") == "before" and field.get("fields"):
                row_struct = field
        if row_struct is None:
            return None
        return {f["field"]: column_type_from_schema(f, self._policy) for f in row_struct["fields"]}

    @staticmethod
    def parse_key(record: KafkaRecord) -> tuple[dict[str, Any] | None, tuple[str, ...] | None]:
        """The record's key values and key column names (``None, None`` for a record without a key).

        Raises:
            DecodeError: the key is not JSON, or not an object.
        """
        values, fields, _ = _read_json_key(record)
        return values, fields

    def key_layout(self, record: KafkaRecord) -> KeyLayout:
        """The record's key with its columns' types when the key carries its schema: what a tombstone deletes.

        Raises:
            DecodeError: the key is not JSON, not an object, or its schema is no Connect schema.
        """
        values, fields, schema = _read_json_key(record)
        types: dict[str, ColumnType] | None = None
        if schema is not None:
            try:
                types = {f["field"]: column_type_from_schema(f, self._policy) for f in schema}
            except (KeyError, TypeError, ValueError) as exc:
                raise DecodeError.at(record, f"key schema: {type(exc).__name__}: {exc}") from exc
        return KeyLayout(values, fields, types)


class KeyLayout(NamedTuple):
    """A record's key: its values and column names (``None`` without a key), and its columns' types if known."""

    values: dict[str, Any] | None
    fields: tuple[str, ...] | None
    types: Mapping[str, ColumnType] | None


def _read_json_key(record: KafkaRecord) -> tuple[dict[str, Any] | None, tuple[str, ...] | None, list[Any] | None]:
    """A JSON key's values, column names and (when it carries its Connect schema) the schema's fields."""
    if not record.key:
        return None, None, None
    try:
        parsed = orjson.loads(record.key)
    except orjson.JSONDecodeError as exc:
        reason = f"key is not valid JSON: {exc}{_avro_hint(record.key)}"
        raise DecodeError.at(record, reason) from exc
    fields: tuple[str, ...] | None = None
    schema_fields: list[Any] | None = None
    if isinstance(parsed, dict) and "payload" in parsed and "schema" in parsed and len(parsed) == 2:
        schema = parsed["schema"]
        parsed = parsed["payload"]
        if isinstance(schema, dict) and schema.get("fields"):
            schema_fields = schema["fields"]
            try:
                fields = tuple(f["field"] for f in schema["fields"])
            except (KeyError, TypeError) as exc:
                reason = f"key schema is not a Connect schema: {type(exc).__name__}: {exc}"
                raise DecodeError.at(record, reason) from exc
    if parsed is None:
        return None, None, None
    if not isinstance(parsed, dict):
        raise DecodeError.at(
            record,
            f"key is a {type(parsed).__name__}, not an object",
        )
    return parsed, fields or tuple(parsed), schema_fields


def tombstone_delete(record: KafkaRecord, key: KeyLayout) -> ChangeEvent:
    """The delete a tombstone stands for once compaction removed the key's delete event: the key, no row."""
    return ChangeEvent(record, _DELETE, None, None, key.values, key.fields, None, {}, None)


KeyReader = Callable[[], tuple[dict[str, Any] | None, tuple[str, ...] | None]]


def event_from_payload(
    record: KafkaRecord,
    payload: Mapping[str, Any],
    columns: Callable[[], Mapping[str, ColumnType] | None],
    read_key: KeyReader,
) -> ChangeEvent | Noise:
    """Classify a decoded Envelope payload (whatever converter wrote it) and build its event.

    ``columns`` and ``read_key`` are only called for change events, so noise never fails on them.

    Raises:
        DecodeError: the payload is neither a change event nor known noise.
    """
    raw_op = payload.get("op")
    if raw_op is None:
        kind = _classify_opless(record, payload)
        return Noise(record, kind, payload if kind == "schema_change" else None)
    if raw_op == _MESSAGE_OP:
        return Noise(record, "message")
    try:
        op = _OPS.get(raw_op)
    except TypeError:  # an unhashable op (a list or an object) is as unknown as any other
        op = None
    if op is None:
        raise DecodeError.at(record, f"unknown op {raw_op!r}")
    before = payload.get("before")
    after = payload.get("after")
    if op in _NEEDS_AFTER and not isinstance(after, dict):
        raise DecodeError.at(record, f"op {raw_op!r} without an 'after' row")
    if op is _DELETE and not isinstance(before, dict) and record.key is None:
        raise DecodeError.at(record, "delete with neither 'before' nor a key")
    key, key_fields = read_key()
    source = payload.get("source") or {}
    ts_ms = payload.get("ts_ms")
    row_columns = columns()
    return ChangeEvent(
        record=record,
        op=op,
        before=_declared_fields(before, row_columns),
        after=_declared_fields(after, row_columns),
        key=key,
        key_fields=key_fields,
        columns=row_columns,
        source=source if isinstance(source, dict) else {},
        ts_ms=ts_ms if isinstance(ts_ms, int) else None,
    )


def _declared_fields(row: Any, columns: Mapping[str, ColumnType] | None) -> dict[str, Any] | None:
    """``row`` with the fields its schema declares only (every field without a schema; ``None`` for no row).

    Kafka Connect's JsonConverter builds a struct from its schema's fields and ignores the payload's others; so
    do both collecting paths (the columnar lane does not even build them).
    """
    if not isinstance(row, dict):
        return None
    if columns is None or row.keys() <= columns.keys():
        return row
    return {name: value for name, value in row.items() if name in columns}


def _avro_hint(data: bytes) -> str:
    """What to do when undecodable JSON looks like the Confluent Avro wire format (magic byte 0, schema id)."""
    if len(data) > HEADER_SIZE and data[0] == MAGIC_BYTE:
        return (
            "; it starts like the Confluent Avro wire format (byte 0 and a 4-byte schema id): if Debezium writes "
            "Avro, set source.value_format: avro and source.schema_registry.url"
        )
    return ""


def wrapped_payload_start(document: bytes) -> int | None:
    """Where the payload starts in a compact ``{"schema":S,"payload":P}`` document (a key or a value).

    ``None`` unless the document is exactly that object and ``S`` ends at the first ``,"payload":``.
    """
    if not (document.startswith(_SCHEMA_PREFIX) and document.endswith(b"}")):
        return None
    split = document.find(_PAYLOAD_SEPARATOR)
    if split <= 0:
        return None
    try:
        parsed = orjson.loads(document)
    except orjson.JSONDecodeError:
        return None
    if not (isinstance(parsed, dict) and len(parsed) == 2 and "payload" in parsed):
        return None
    if not _parses_to(document[len(_SCHEMA_PREFIX) : split], parsed.get("schema")):
        return None
    return split + len(_PAYLOAD_SEPARATOR)


def _parses_to(raw: bytes, expected: Any) -> bool:
    try:
        return bool(orjson.loads(raw) == expected)
    except orjson.JSONDecodeError:
        return False


def _classify_opless(record: KafkaRecord, payload: Mapping[str, Any]) -> str:
    if "ddl" in payload or "tableChanges" in payload:
        return "schema_change"
    if payload.get("status") in ("BEGIN", "END") or record.topic.endswith(".transaction"):
        return "transaction"
    if set(payload) <= {"ts_ms", "databaseName"}:
        return "heartbeat"
    raise DecodeError.at(record, "payload has no 'op' and is no known control record")
