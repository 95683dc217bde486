"""Builders of Debezium JsonConverter records for tests, in both shapes (schemas enabled or not).

The envelope layout follows the real samples in tests/data/debezium-samples (16_*, 18_*): the value is
``{"schema": Envelope, "payload": {...}}`` and the key ``{"schema": Key, "payload": {...}}``.
"""

from __future__ import annotations

import base64
import decimal
from typing import Any

import orjson

from connector.events import KafkaRecord

PLACEHOLDER = "__debezium_unavailable_value"


def decimal_field(name: str, precision: int, scale: int, optional: bool = True) -> dict[str, Any]:
    return {
        "field": name,
        "type": "bytes",
        "optional": optional,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
    }


def field(name: str, ftype: str, semantic: str | None = None, optional: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"field": name, "type": ftype, "optional": optional}
    if semantic:
        out["name"] = semantic
    return out


def encode_decimal(value: str, scale: int) -> str:
    """Connect Decimal wire form: base64 of the big-endian two's-complement unscaled integer."""
    unscaled = int(decimal.Decimal(value).scaleb(scale, context=decimal.Context(prec=100)))
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


class Topic:
    """One Debezium topic: builds records with increasing offsets."""

    def __init__(
        self,
        name: str,
        columns: list[dict[str, Any]],
        key_columns: list[str],
        *,
        with_schema: bool = True,
        partition: int = 0,
        connector: str = "postgresql",
    ) -> None:
        self.name = name
        self.columns = columns
        self.key_columns = key_columns
        self.with_schema = with_schema
        self.partition = partition
        self.offset = 0
        self.connector = connector

    def _value_schema(self) -> dict[str, Any]:
        row = {"type": "struct", "optional": True, "name": f"{self.name}.Value", "fields": self.columns}
        return {
            "type": "struct",
            "name": f"{self.name}.Envelope",
            "optional": False,
            "fields": [
                {**row, "field": "before"},
                {**row, "field": "after"},
                {"type": "struct", "field": "source", "optional": False, "fields": []},
                {"type": "string", "field": "op", "optional": False},
                {"type": "int64", "field": "ts_ms", "optional": True},
            ],
        }

    def _key(self, row: dict[str, Any]) -> bytes:
        payload = {c: row[c] for c in self.key_columns}
        if not self.with_schema:
            return orjson.dumps(payload)
        fields = [c for c in self.columns if c["field"] in self.key_columns]
        return orjson.dumps(
            {"schema": {"type": "struct", "name": f"{self.name}.Key", "fields": fields}, "payload": payload}
        )

    def record(
        self,
        op: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        *,
        key_row: dict[str, Any] | None = None,
        headers: tuple[tuple[str, bytes | None], ...] = (),
        ts_ms: int = 1_700_000_000_000,
        partition: int | None = None,
        snapshot: str | None = None,
    ) -> KafkaRecord:
        """One change event; ``snapshot`` is ``source.snapshot`` (default ``true`` for reads, else ``false``)."""
        if snapshot is None:
            snapshot = "true" if op == "r" else "false"
        payload = {
            "before": before,
            "after": after,
            "source": {"connector": self.connector, "version": "3.0.0.Final", "snapshot": snapshot},
            "op": op,
            "ts_ms": ts_ms,
        }
        value: Any = {"schema": self._value_schema(), "payload": payload} if self.with_schema else payload
        key_source = key_row or after or before
        key = self._key(key_source) if key_source is not None else None
        return self._emit(key, orjson.dumps(value), headers, partition)

    def tombstone(self, key_row: dict[str, Any]) -> KafkaRecord:
        return self._emit(self._key(key_row), None, (), None)

    def truncate(self) -> KafkaRecord:
        payload = {"source": {"connector": self.connector}, "op": "t", "ts_ms": 1_700_000_000_000}
        value: Any = {"schema": None, "payload": payload} if self.with_schema else payload
        return self._emit(None, orjson.dumps(value), (), None)

    def raw(self, value: bytes | None, key: bytes | None = None) -> KafkaRecord:
        return self._emit(key, value, (), None)

    def _emit(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[tuple[str, bytes | None], ...],
        partition: int | None,
    ) -> KafkaRecord:
        record = KafkaRecord(
            self.name, self.partition if partition is None else partition, self.offset, key, value, headers
        )
        self.offset += 1
        return record


def execute_snapshot_signal(
    topic_prefix: str, data_collections: list[str], *, snapshot_type: str = "incremental"
) -> tuple[bytes, bytes]:
    """Key and value of a Kafka signal asking Debezium for an ad hoc snapshot of ``data_collections``.

    Produce it to the stack's ``signal_topic``. The key must equal the connector's ``topic.prefix`` (Debezium
    drops other keys). Collections are regular expressions on fully qualified names: ``schema.table`` on
    Postgres, ``database.table`` on MariaDB/MySQL.
    """
    value = {"type": "execute-snapshot", "data": {"data-collections": data_collections, "type": snapshot_type}}
    return topic_prefix.encode(), orjson.dumps(value)


def notification(value: bytes) -> dict[str, Any]:
    """A Debezium sink notification (``notification_topic``) as a dict, with or without the JsonConverter schema.

    Keys: ``id``, ``aggregate_type`` ("Initial Snapshot" / "Incremental Snapshot"), ``type`` (STARTED,
    IN_PROGRESS, TABLE_SCAN_COMPLETED, COMPLETED, ABORTED, ...), ``additional_data`` (strings: ``data_collections``,
    ``scanned_collection``, ``total_rows_scanned``, ``status``, ...) and ``timestamp`` (epoch ms).
    """
    decoded = orjson.loads(value)
    payload = decoded.get("payload", decoded) if "schema" in decoded else decoded
    assert isinstance(payload, dict)
    return payload
