"""``compare_as_multiset``: a table without a key judged as a Counter of rows, never by key."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from connector.readback.table_report import compare_as_multiset


def judged(source: list[dict[str, Any]], mirror: list[dict[str, Any]]) -> Any:
    def form(row: dict[str, Any]) -> tuple[Any, ...]:
        return (row.get("who"), row.get("n"))

    table = pa.Table.from_pylist(mirror, schema=pa.schema([("who", pa.string()), ("n", pa.int64())]))
    return compare_as_multiset("public.logs", source, table, source_form=form, mirror_form=form)


A, B = {"who": "a", "n": 1}, {"who": "b", "n": 2}


def test_identical_rows_are_counted_one_by_one() -> None:
    report = judged([A, A, B], [A, B, A])
    assert report.ok and (report.source_rows, report.mirror_rows, report.matching) == (3, 3, 3)
    short = judged([A, A, B], [A, B])
    assert (short.missing, short.extra, short.matching) == (1, 0, 2) and not short.ok
    assert short.examples == ["missing row ('a', 1) (1 of 2)"]
    extra = judged([A], [A, A, A])
    assert (extra.missing, extra.extra) == (0, 2)
    assert extra.examples == ["extra row ('a', 1) (2 more than the source's 1)"]


def test_a_changed_row_is_missing_and_extra_and_no_key_is_listed() -> None:
    """Nothing tells which mirror row stands for a changed source row: the audit repairs nothing by key here."""
    report = judged([A], [{"who": "a", "n": 9}])
    assert (report.missing, report.extra, report.differing) == (1, 1, 0)
    assert report.missing_keys == report.extra_keys == report.differing_keys == []
