"""Exceptions of the connector.

Every exception carries only strings and ints so it pickles across Spark's process boundary, and its
message names what a person needs to find the problem: topic[partition]@offset, table, column or path.
Whether to retry is a property of the type (dlt's convention): ``TransientError`` may be retried,
everything else is terminal for what it names.
"""

from __future__ import annotations

from typing import NoReturn, Protocol, Self


class ConnectorError(Exception):
    """Root of the connector's own errors."""


class TransientError(ConnectorError):
    """A failure that may succeed when retried (a service unavailable, a timeout).

    The streaming job retries a batch that failed with one (``connector.stream.batch_retry``) before it
    lets the query fail; any other error fails the batch at once.
    """


class ConfigError(ConnectorError):
    """The configuration is invalid; the message says which key and why."""


class RecordPosition(Protocol):
    """Where a Kafka record sits (``connector.events.KafkaRecord`` is one; this layer cannot import it)."""

    @property
    def topic(self) -> str: ...  # noqa: D102 - the protocol's fields, named as on the record

    @property
    def partition(self) -> int: ...  # noqa: D102

    @property
    def offset(self) -> int: ...  # noqa: D102


class DecodeError(ConnectorError):
    """A Kafka record could not be decoded as a Debezium change event."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(topic, partition, offset, reason)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason

    @classmethod
    def at(cls, record: RecordPosition, reason: str) -> Self:
        """The error for ``record``: how every decoder names the record it could not decode."""
        return cls(record.topic, record.partition, record.offset, reason)

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


class SchemaChanged(TableStopped):
    """A table stopped by a change of its schema that Fabric cannot merge: a column's type, or its key columns.

    ``kind`` (``type_changed`` or ``key_changed``) chooses the table's ``mirror.schema_changes`` action.
    """

    def __init__(self, table: str, reason: str, kind: str) -> None:
        super().__init__(table, reason)
        self.kind = kind

    def __reduce__(self) -> tuple[type[SchemaChanged], tuple[str, str, str]]:
        return (SchemaChanged, (self.table, self.reason, self.kind))


class TableReset(TableStopped):
    """The source reset a table (a TRUNCATE, a new Debezium snapshot): the mirror rebuilds it rather than stop it.

    ``cause`` (``truncate``, ``new_snapshot``, ``snapshot_restart``, ``keyless_change``) is the reason label of
    ``cdc_mirror_table_resets_total``; ``reason`` the one log line, naming topic, partition and offset.
    """

    def __init__(self, table: str, reason: str, cause: str) -> None:
        super().__init__(table, reason)
        self.cause = cause

    def __reduce__(self) -> tuple[type[TableReset], tuple[str, str, str]]:
        return (TableReset, (self.table, self.reason, self.cause))

    def __str__(self) -> str:
        return f"table {self.table} reset: {self.reason}"


class LandingZoneCorrupt(ConnectorError):
    """The landing zone or ledger is in a state the connector cannot have produced; it refuses to guess."""


class RegistryUnavailable(TransientError):
    """The schema registry stayed unreachable (connection errors, 408/429/5xx) for the configured time.

    Not a poison event: the record is fine, the registry is not, so the batch fails and is retried by a
    restart instead of sending the record to the dead-letter output. ``url`` never carries credentials.
    """

    def __init__(self, url: str, position: str, waited_s: float, reason: str) -> None:
        super().__init__(url, position, waited_s, reason)
        self.url = url
        self.position = position
        self.waited_s = waited_s
        self.reason = reason

    def __str__(self) -> str:
        return (
            f"{self.position}: schema registry {self.url} unavailable for {self.waited_s:.1f}s "
            f"(source.schema_registry.max_unavailable_s): {self.reason}"
        )


class RegistryError(ConnectorError):
    """The schema registry answered in a way retrying cannot fix (credentials refused, not a registry).

    Terminal for the whole job, not for one record: every record would fail the same way.
    """


class WriterFenced(ConnectorError):
    """Another connector instance is the writer of this checkpoint or landing zone, or this one stopped being it.

    Two writers on one checkpoint or landing zone corrupt each other: both number files, both record
    stops in the ledger, and each one's start-up clean-up deletes the other's uploads in flight. So a
    second instance is refused before it reads or cleans anything, and an instance that lost its hold
    (an expired or broken OneLake lease) refuses to publish. ``holder`` describes the instance that
    holds the fence (host, pid, start time, instance id) as far as it is known; never a secret.
    """

    def __init__(self, location: str, holder: str, reason: str) -> None:
        super().__init__(location, holder, reason)
        self.location = location
        self.holder = holder
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}"


def rebuild_hint(table_id: str) -> str:
    """How to recover a table that must start over, as every stop message says it."""
    return f"rebuild the table (python -m connector rebuild {table_id})"


class BulkDeclined(Exception):  # noqa: N818 - not an error: a routing signal
    """The columnar lane leaves a topic's records to the record path, which handles them (not an error).

    The one exception of the package outside ``ConnectorError``, on purpose: it is control flow between the lane and
    the record path, never a failure, so no ``except ConnectorError`` may swallow it on its way to the lane.

    Raised by the bulk decode, mark and type functions when a topic's records are not exactly what they
    can take; the lane catches it and the record path collects the topic instead.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def decline(reason: str) -> NoReturn:
    """Leave the topic to the record path, saying why (logged at debug level)."""
    raise BulkDeclined(reason)


def first_line(text: str, limit: int = 300) -> str:
    """The first line of ``text``, at most ``limit`` characters: a service's or library's message in one line."""
    stripped = text.strip()
    return stripped.splitlines()[0][:limit] if stripped else ""


def exception_line(exc: BaseException, *, with_type: bool = False) -> str:
    """``exc``'s message in one line (its type's name when it has none; prefixed by it with ``with_type``)."""
    line = first_line(str(exc))
    if not line:
        return type(exc).__name__
    return f"{type(exc).__name__}: {line}" if with_type else line
