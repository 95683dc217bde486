"""Debezium change events in Avro (Confluent wire format, schema registry) → the JSON path's change events.

Each key and value is ``0x00``, a 4-byte big-endian schema id, then Avro binary written with that
schema. Writer schemas are fetched by id from a Confluent-compatible registry (confluent-kafka's
``SchemaRegistryClient``; Apicurio's ``ccompat`` API works too), parsed once per id per process, and read
with ``fastavro.schemaless_reader``.

The output is exactly what ``EnvelopeDecoder`` yields for the same change sent through JsonConverter, so
everything downstream (row markers, TOAST placeholders, the keep-last store, ``arrow_values.to_arrow``) has one
input form:

- Column types: each Avro field is mapped back to the Kafka Connect field it came from (the reverse of
  Confluent's ``AvroData``: ``connect.name``, ``connect.parameters``, ``connect.type``, else the Avro
  logical type), then typed by the JSON path's own ``column_type_from_schema``.
- Values: fastavro's logical-type conversion is switched off (``logicalType`` is removed from the schema
  it reads with), so dates, times and timestamps stay the integers JsonConverter sends, and bytes
  (``bytes``, ``Decimal``, ``VariableScaleDecimal.value``) become base64 text as JsonConverter writes
  them. A bytea TOAST placeholder is then recognised exactly like in JSON.

A registry that cannot be reached is not a poison event: requests are retried with exponential backoff
and jitter for ``max_unavailable_s``, then ``RegistryUnavailable`` (transient) fails the batch. Only what
is wrong with the record itself (bad magic byte, a schema id the registry does not know, bytes that do
not decode with the writer schema) raises ``DecodeError``.

Modules: the Avro → Connect shape walk and value normalisers are in ``avro_shape``, the registry client
in ``schema_registry``; this module reads the wire format and turns records into change events.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from connector.config import SchemaRegistrySettings
from connector.debezium.avro_shape import WriterSchema
from connector.debezium.confluent_wire import HEADER_SIZE, MAGIC_BYTE
from connector.debezium.envelope import ChangeEvent, KeyLayout, Noise, event_from_payload, value_or_noise
from connector.debezium.schema_registry import SchemaRegistry
from connector.debezium.types import DEFAULT_POLICY, ColumnType, TypePolicy, column_type_from_schema
from connector.errors import DecodeError
from connector.events import KafkaRecord

# -- the decoder -------------------------------------------------------------------------------------


class AvroDecoder:
    """Decodes Debezium records written by an Avro converter (Confluent's, or Apicurio's in Confluent mode).

    Picklable and cheap to build: it holds only settings until the first record, then the registry
    client and the per-id column types of this process.
    """

    def __init__(
        self,
        registry: SchemaRegistrySettings,
        policy: TypePolicy = DEFAULT_POLICY,
    ) -> None:
        self._registry_settings = registry
        self._policy = policy
        self._registry = SchemaRegistry(registry)
        self._writers: dict[int, WriterSchema] = {}
        self._columns: dict[int, Mapping[str, ColumnType] | None] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"registry": self._registry_settings, "policy": self._policy}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["registry"], state["policy"])  # type: ignore[misc]

    def decode(self, record: KafkaRecord) -> ChangeEvent | Noise:
        """Classify and decode one record, exactly as ``EnvelopeDecoder.decode`` does for JSON.

        Raises:
            DecodeError: the record is neither a change event nor known noise (the message names
                ``topic[partition]@offset``).
            RegistryUnavailable: the registry stayed unreachable; the record is not at fault.
            RegistryError: the registry refused the credentials or is no registry.
        """
        value = value_or_noise(record)
        if isinstance(value, Noise):
            return value
        writer = self._writer(record, value, "value")
        payload = self._read(record, writer, value, "value")
        if payload is None:
            raise DecodeError.at(record, "value is Avro null")
        if not isinstance(payload, dict):
            raise DecodeError.at(record, f"value is a {type(payload).__name__}, not a record")
        return event_from_payload(record, payload, lambda: self._row_columns(record, writer), lambda: self._key(record))

    def _writer(self, record: KafkaRecord, data: bytes, part: str) -> WriterSchema:
        if len(data) < HEADER_SIZE:
            raise DecodeError.at(
                record,
                f"{part} has {len(data)} bytes, fewer than the 5-byte Confluent wire-format header",
            )
        if data[0] != MAGIC_BYTE:
            raise DecodeError.at(
                record,
                f"{part} starts with byte 0x{data[0]:02x}, not the Confluent wire-format magic byte 0x00 "
                "(is source.value_format right?)",
            )
        schema_id = int.from_bytes(data[1:HEADER_SIZE], "big")
        writer = self._writers.get(schema_id)
        if writer is None:
            writer = self._writers[schema_id] = self._registry.writer_schema(schema_id, record, part)
        return writer

    @staticmethod
    def _read(record: KafkaRecord, writer: WriterSchema, data: bytes, part: str) -> Any:
        try:
            return writer.read(data)
        except ValueError as exc:
            raise DecodeError.at(record, f"{part} {exc}") from exc

    def _key(self, record: KafkaRecord) -> tuple[dict[str, Any] | None, tuple[str, ...] | None]:
        values, fields, _ = self.key_layout(record)
        return values, fields

    def key_layout(self, record: KafkaRecord) -> KeyLayout:
        """The record's key, its column names and their types (from the key's writer schema).

        Raises:
            DecodeError: the key is not Avro of a schema the registry knows, or not a record.
        """
        if not record.key:
            return KeyLayout(None, None, None)
        writer = self._writer(record, record.key, "key")
        parsed = self._read(record, writer, record.key, "key")
        if parsed is None:
            return KeyLayout(None, None, None)
        if not isinstance(parsed, dict):
            raise DecodeError.at(record, f"key is a {type(parsed).__name__}, not an object")
        fields = tuple(name for name, _ in writer.shape.fields)
        try:
            types = {
                name: column_type_from_schema(shape.field_schema(name), self._policy)
                for name, shape in writer.shape.fields
            }
        except ValueError as exc:
            raise DecodeError.at(record, f"key schema id {writer.schema_id}: {exc}") from exc
        return KeyLayout(parsed, fields or tuple(parsed), types or None)

    def _row_columns(self, record: KafkaRecord, writer: WriterSchema) -> Mapping[str, ColumnType] | None:
        """The row type: the fields of the Envelope's ``after`` (else ``before``) record, as in JSON."""
        if writer.schema_id in self._columns:
            return self._columns[writer.schema_id]
        row = None
        for name in ("after", "before"):
            shape = writer.shape.field(name)
            if shape is not None and shape.type == "struct" and shape.fields:
                row = shape
                break
        columns: Mapping[str, ColumnType] | None = None
        if row is not None:
            try:
                columns = {
                    name: replace(
                        column_type_from_schema(shape.field_schema(name), self._policy), filled=name in row.filled
                    )
                    for name, shape in row.fields
                }
            except ValueError as exc:
                raise DecodeError.at(record, f"value schema id {writer.schema_id}: {exc}") from exc
        self._columns[writer.schema_id] = columns
        return columns
