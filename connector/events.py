"""The shared vocabulary of the core: records in, change rows out. No I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import NamedTuple


class RowMarker(IntEnum):
    """Open mirroring's ``__rowMarker__`` values (the seed's 0/1/2/4 table)."""

    INSERT = 0
    UPDATE = 1
    DELETE = 2
    UPSERT = 4


ROW_MARKER_COLUMN = "__rowMarker__"

#: The ``__rowMarker__`` values the landing zone accepts, in ascending order.
ROW_MARKER_VALUES: tuple[int, ...] = tuple(int(marker) for marker in RowMarker)


class Op(StrEnum):
    """Debezium's ``op`` codes that change a table (a ``str``: a member equals and hashes as its letter).

    ``Op.X`` is a class-attribute lookup of about 0.1 µs on Python 3.11, so code that runs per record binds
    the members it compares with to module-level names once.
    """

    CREATE = "c"
    READ = "r"  # a snapshot read
    UPDATE = "u"
    DELETE = "d"
    TRUNCATE = "t"


ROW_OPS = frozenset({Op.CREATE, Op.READ, Op.UPDATE, Op.DELETE})
"""The ops that carry a row; a truncate carries none."""


class KafkaRecord(NamedTuple):
    """One Kafka record as the core sees it, whatever read it (Spark, a kcat dump, a consumer).

    A named tuple rather than a dataclass: one is built per record, and tuples build fastest.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None

    @property
    def position(self) -> str:
        """``topic[partition]@offset``, the form every record-level message uses."""
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass
class SkipCounts:
    """Records that carry no row change, by kind (tombstone, heartbeat, transaction, ...)."""

    by_kind: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, count: int = 1) -> None:
        """Count ``count`` more records of ``kind``."""
        self.by_kind[kind] = self.by_kind.get(kind, 0) + count

    def total(self) -> int:
        """All skipped records."""
        return sum(self.by_kind.values())
