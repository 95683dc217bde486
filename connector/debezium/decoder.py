"""The decoder contract shared by the JSON and Avro paths, and the factory that picks one from config.

The sink only needs ``decode(record) -> ChangeEvent | Noise``: both decoders return the same events for
the same change, so nothing after decoding knows which converter Debezium ran.
"""

from __future__ import annotations

from typing import Protocol

from connector.config import SourceSettings
from connector.debezium.envelope import ChangeEvent, EnvelopeDecoder, KeyLayout, Noise
from connector.debezium.types import DEFAULT_POLICY, TypePolicy
from connector.events import KafkaRecord

__all__ = ["ChangeEvent", "Decoder", "KeyLayout", "Noise", "open_decoder"]


class Decoder(Protocol):
    """Turns one Kafka record into a change event or classified noise.

    Implementations are picklable (settings only; clients and caches are built lazily in the process
    that decodes), because Spark builds and ships them to its Python workers.
    """

    def decode(self, record: KafkaRecord) -> ChangeEvent | Noise:
        """Classify and decode one record.

        Raises:
            DecodeError: the record itself is undecodable (a poison event); names ``topic[partition]@offset``.
            TransientError: a service the decoder needs (the schema registry) is unavailable; retry later.
            ConnectorError: any other error is about the whole job (e.g. ``RegistryError``: credentials
                refused), never about the record.
        """
        ...

    def key_layout(self, record: KafkaRecord) -> KeyLayout:
        """The record's key values, column names and (when its encoding says) column types.

        A tombstone has nothing else: on a compacted topic it is the delete of this key.

        Raises:
            DecodeError: the key does not decode.
            TransientError: as ``decode``.
        """
        ...


def open_decoder(source: SourceSettings, policy: TypePolicy = DEFAULT_POLICY) -> Decoder:
    """The decoder for ``source.value_format``.

    Cheap: no network I/O happens here, so it can run once per Spark task. Call it once on the driver at
    start-up too, so a missing ``source.schema_registry.url`` fails before the stream starts.

    Raises:
        ConfigError: ``value_format`` is avro and ``source.schema_registry.url`` is not set.
    """
    if source.value_format == "avro":
        from connector.debezium.avro import AvroDecoder

        return AvroDecoder(source.schema_registry, policy)
    return EnvelopeDecoder(policy)
