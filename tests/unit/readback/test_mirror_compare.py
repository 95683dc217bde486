"""A table against Fabric's table chunk by chunk: differences that outlast the mirror's lag count, the others not."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from connector.landing_zone.layout import TableRef
from connector.readback.chunk_compare import Key, in_range
from connector.readback.mirror_compare import compare_table

TABLE = TableRef("public", "t")


class FakeSource:
    """The source side in memory: rows by key, a position that moves with each change."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = {row["id"]: row for row in rows}
        self.position = 1
        self.read_ranges: list[tuple[Key | None, Key | None]] = []

    def current_position(self) -> str:
        return str(self.position)

    def captured_through(self, position: str) -> bool:
        return True

    def ranged_rows(self, table: TableRef, keys: list[str], after: Key | None, through: Key | None) -> Iterator[Any]:
        self.read_ranges.append((after, through))
        for key in sorted(self.rows):
            if in_range((key,), after, through):
                yield dict(self.rows[key])

    def columns(self, table: TableRef) -> list[str]:
        return ["id", "name"]


def rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}"} for i in range(1, n + 1)]


def test_equal_tables_read_each_side_once() -> None:
    source = FakeSource(rows(100))
    report = compare_table(source, TABLE, ["id"], lambda: pa.Table.from_pylist(rows(100)), chunk_rows=10)
    assert report.ok, report.examples
    assert (report.source_rows, report.mirror_rows, report.matching) == (100, 100, 100)
    assert source.read_ranges == [(None, None)]  # no chunk differed: no second read


def test_a_persisting_difference_is_compared_row_by_row_in_its_chunk_only() -> None:
    source = FakeSource(rows(100))
    mirror = rows(100)
    mirror[44]["name"] = "wrong"  # id 45
    del mirror[70]  # id 71
    settled: list[str] = []

    def settle(position: str) -> bool:
        settled.append(position)
        return True

    report = compare_table(source, TABLE, ["id"], lambda: pa.Table.from_pylist(mirror), settle=settle, chunk_rows=10)
    assert (report.differing, report.missing, report.extra) == (1, 1, 0)
    assert any("key (45,)" in e for e in report.examples) and any("missing key (71,)" in e for e in report.examples)
    assert settled == ["1"]
    assert source.read_ranges[1:] == [((40,), (50,)), ((70,), (80,))]


def test_a_difference_that_the_mirror_catches_up_with_is_no_difference() -> None:
    source = FakeSource(rows(50))
    source.rows[7]["name"] = "changed a moment ago"
    behind = pa.Table.from_pylist(rows(50))
    caught_up = pa.Table.from_pylist([dict(r) for r in source.rows.values()])
    reads = iter([behind, caught_up])
    report = compare_table(source, TABLE, ["id"], lambda: next(reads), settle=lambda position: True, chunk_rows=10)
    assert report.ok, report.examples


def test_a_difference_found_while_the_mirror_never_caught_up_says_so() -> None:
    source = FakeSource(rows(20))
    mirror = rows(19)
    report = compare_table(source, TABLE, ["id"], lambda: pa.Table.from_pylist(mirror), settle=lambda p: False)
    assert report.missing == 1
    assert any("had not caught up" in e for e in report.examples)


def test_a_mirror_fabric_has_not_created_misses_every_row() -> None:
    report = compare_table(FakeSource(rows(3)), TABLE, ["id"], lambda: None)
    assert report.missing == 3 and not report.ok


def test_a_missing_column_is_reported() -> None:
    mirror = [{"id": r["id"]} for r in rows(5)]
    report = compare_table(FakeSource(rows(5)), TABLE, ["id"], lambda: pa.Table.from_pylist(mirror))
    assert report.missing_columns == ["name"]
