"""One table against what Fabric holds, chunk by chunk, counting only differences that outlast the mirror's lag.

``verify`` against Fabric's Delta tables (``mirrored_tables``) and the audit compare a source table with a mirror
that is always a little behind: a row changed a second ago differs, and is no fault. So a table is compared in
two looks (``chunk_compare``):

1. the source's position is read (``current_position``: Postgres's ``pg_current_wal_lsn()``), then both sides
   are summed into key ranges; chunks whose digests differ are suspects;
2. when there are suspects, ``settle(position)`` waits until the mirror is past that position (Debezium has
   every change up to it, and Fabric has applied the files published by then), the mirror is read again, and
   only the suspect chunks are compared row by row, by the reader's exact rules (``compare_rows``). A chunk that
   matches now differed only while the mirror lagged.

So a hot row under constant writes, or Fabric applying its files a minute later, is no false alarm; a row the
mirror lacks or holds wrongly still differs once the mirror has caught up, and is reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from connector.landing_zone.layout import TableRef
from connector.readback.chunk_compare import Key, compare_chunks, in_range, key_range, persisting
from connector.readback.database_postgres import compare_rows, normalise
from connector.readback.database_reader import Row
from connector.readback.mirrored_tables import fabric_has_applied
from connector.readback.table_report import TableReport
from connector.storage.base import Storage

DEFAULT_CHUNK_ROWS = 10_000
"""Rows per key range (Debezium's incremental snapshot reads chunks of 1,024 by default; a hash is cheaper)."""
_ABSENT = "<no such column in the mirror>"


class RangedSource(Protocol):
    """A source that reads key ranges in key order and tells its position (``database_postgres.PostgresReader``)."""

    def current_position(self) -> str:
        """The source's position now."""

    def captured_through(self, position: str) -> bool:
        """Whether Debezium has every change up to ``position``."""

    def ranged_rows(
        self, table: TableRef, key_columns: list[str], after: Key | None, through: Key | None
    ) -> Iterator[Row]:
        """Rows with keys in ``(after, through]``, in key order."""

    def columns(self, table: TableRef) -> list[str]:
        """The table's columns, in order."""


class AuditSource(RangedSource, Protocol):
    """A source the audit reads (``PostgresReader``, ``mysql_ranges.MySqlRangedReader``): ranges and single keys."""

    def rows_by_keys(self, table: TableRef, key_columns: list[str], keys: Sequence[Key]) -> list[Row]:
        """The rows of ``keys`` the source still has."""


class CompareRules(Protocol):
    """How one table's values are compared: a form per value (digests, keys) and the exact row comparison."""

    def form(self, column: str, value: Any, arrow: pa.DataType | None, *, source: bool) -> Any:
        """A value of ``column`` in its comparable form (``arrow``: the mirror's type; ``source``: read there)."""

    def compare_rows(self, table: str, key_columns: list[str], source: Iterable[Row], mirror: pa.Table) -> TableReport:
        """Source rows against mirror rows, by key (as ``SourceReader.compare`` does)."""


class PostgresRules:
    """``database_postgres``'s comparison: the rules of a source that names none (``compare_rules``)."""

    def form(self, column: str, value: Any, arrow: pa.DataType | None, *, source: bool) -> Any:
        """``database_postgres.normalise``, the same on both sides."""
        return normalise(value, arrow)

    def compare_rows(self, table: str, key_columns: list[str], source: Iterable[Row], mirror: pa.Table) -> TableReport:
        """``database_postgres.compare_rows``."""
        return compare_rows(table, key_columns, source, mirror)


def rules_of(reader: object, table: TableRef) -> CompareRules:
    """The reader's rules for ``table`` (its ``compare_rules``), else Postgres's (``PostgresRules``)."""
    rules = getattr(reader, "compare_rules", None)
    return rules(table) if callable(rules) else PostgresRules()


Settle = Callable[[str], bool]
"""Waits until the mirror is past a source position; ``False`` when it did not get there in time."""


@dataclass
class _Forms:
    """How rows become keys and canonical forms, in the mirror's types (the forms ``compare_rows`` compares)."""

    keys: list[str]
    columns: list[str]
    types: dict[str, pa.DataType]
    rules: CompareRules

    def key(self, row: Row, *, source: bool) -> Key:
        return tuple(self.rules.form(k, row.get(k), self.types.get(k), source=source) for k in self.keys)

    def canonical(self, row: Row, *, source: bool) -> tuple[Any, ...]:
        return tuple(
            self.rules.form(c, row[c], self.types.get(c), source=source) if c in row else _ABSENT for c in self.columns
        )

    def pairs(self, rows: Iterator[Row], *, source: bool) -> Iterator[tuple[Key, tuple[Any, ...]]]:
        return ((self.key(row, source=source), self.canonical(row, source=source)) for row in rows)


def compare_table(
    reader: RangedSource,
    table: TableRef,
    key_columns: list[str],
    read_mirror: Callable[[], pa.Table | None],
    *,
    settle: Settle | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> TableReport:
    """Compare ``table`` with the mirror ``read_mirror`` gives (Fabric's Delta table), as the module docstring says.

    ``rows_checked`` of the result's counts both sides of the first look.
    """
    position = reader.current_position()
    mirror = read_mirror() or pa.table({})
    rules = rules_of(reader, table)
    forms = _Forms(key_columns, reader.columns(table), {f.name: f.type for f in mirror.schema}, rules)
    if not mirror.num_columns:
        report = rules.compare_rows(table.id, key_columns, reader.ranged_rows(table, key_columns, None, None), mirror)
        report.judge_columns(forms.columns, mirror)
        return report
    mirror_rows = mirror.to_pylist()
    first = compare_chunks(
        forms.pairs(reader.ranged_rows(table, key_columns, None, None), source=True),
        forms.pairs(iter(mirror_rows), source=False),
        chunk_rows,
    )
    reports: dict[int, TableReport] = {}
    caught_up = True

    def look_again(suspects: list[int]) -> list[int]:
        nonlocal mirror, caught_up
        if settle is not None:
            caught_up = settle(position)
            mirror = read_mirror() or mirror
        again = mirror.to_pylist() if settle is not None else mirror_rows
        for index in suspects:
            after, through = key_range(first.chunks, index)
            chunk_mirror = [row for row in again if in_range(forms.key(row, source=False), after, through)]
            source = reader.ranged_rows(table, key_columns, after, through)
            chunk = rules.compare_rows(table.id, key_columns, source, pa.Table.from_pylist(chunk_mirror, mirror.schema))
            if not chunk.ok:
                reports[index] = chunk
        return list(reports)

    differing = persisting(first.differing, look_again)
    report = _merged(table.id, first.source_rows, mirror.num_rows, [reports[i] for i in differing])
    if differing and not caught_up:
        report.add_example(f"(the mirror had not caught up with source position {position} when looked at again)")
    report.judge_columns(forms.columns, mirror)
    return report


def _merged(table: str, source_rows: int, mirror_rows: int, chunks: list[TableReport]) -> TableReport:
    report = TableReport(table, source_rows=source_rows, mirror_rows=mirror_rows)
    for chunk in chunks:
        report.missing += chunk.missing
        report.extra += chunk.extra
        report.differing += chunk.differing
        report.missing_keys += chunk.missing_keys
        report.extra_keys += chunk.extra_keys
        report.differing_keys += chunk.differing_keys
        for example in chunk.examples:
            report.add_example(example)
    report.matching = max(0, source_rows - report.missing - report.differing)
    return report


def fabric_settle(
    reader: RangedSource,
    landing_zone: Storage,
    table: TableRef,
    *,
    timeout_s: float = 120.0,
    poll_s: float = 1.0,
    published_through: Callable[[], int] | None = None,
) -> Settle:
    """The lag gate against Fabric: Debezium has the source up to the position, and Fabric applied what was published.

    ``published_through`` gives the highest file number of ``table`` the mirror has published once Debezium has
    the position (the audit asks its ledger, after the job committed the Kafka offsets Debezium had then); by
    default the highest number in the landing zone at that moment.
    """

    def settle(position: str) -> bool:
        deadline = time.monotonic() + timeout_s
        while not reader.captured_through(position):
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)
        through = published_through() if published_through else _highest_number(landing_zone, table)
        while not fabric_has_applied(landing_zone, table, through):
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)
        return True

    return settle


def _highest_number(storage: Storage, table: TableRef) -> int:
    from connector.readback.landing_reader import list_data_files

    files = list_data_files(storage, table)
    return files[-1].number if files else 0
