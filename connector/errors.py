"""Exceptions of the connector.

Every exception carries only strings and ints so it pickles across Spark's process boundary, and its
message names what a person needs to find the problem: topic[partition]@offset, table, column or path.
Whether to retry is a property of the type (dlt's convention): ``TransientError`` may be retried,
everything else is terminal for what it names.
"""

from __future__ import annotations


class ConnectorError(Exception):
    """Root of the connector's own errors."""


class TransientError(ConnectorError):
    """A failure that may succeed when retried (a service unavailable, a timeout)."""


class ConfigError(ConnectorError):
    """The configuration is invalid; the message says which key and why."""


class DecodeError(ConnectorError):
    """A Kafka record could not be decoded as a Debezium change event."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(topic, partition, offset, reason)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}: {self.reason}"


class TableStopped(ConnectorError):
    """A table cannot go on; other tables are not affected.

    Raised for a poison event, a column type change, a truncate under the ``fail`` policy, an unfillable
    TOAST placeholder or a conflicting ``_metadata.json``.
    """

    def __init__(self, table: str, reason: str) -> None:
        super().__init__(table, reason)
        self.table = table
        self.reason = reason

    def __str__(self) -> str:
        return f"table {self.table} stopped: {self.reason}"


class LandingZoneCorrupt(ConnectorError):
    """The landing zone or ledger is in a state the connector cannot have produced; it refuses to guess."""
