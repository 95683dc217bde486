"""Chunked comparison: a hash per key range on each side, only differing ranges named, lag tolerated."""

from __future__ import annotations

import random
from typing import Any

import pytest

from connector.readback.chunk_compare import (
    ChunkedSide,
    compare_chunks,
    cut_chunks,
    in_range,
    key_range,
    persisting,
)

Rows = list[tuple[tuple[Any, ...], tuple[Any, ...]]]


def table(n: int) -> Rows:
    return [((i,), (i, f"name {i}", i * 1.5)) for i in range(1, n + 1)]


def test_equal_sides_in_any_order_have_no_differing_chunk() -> None:
    source = table(1000)
    mirror = list(source)
    random.Random(1).shuffle(mirror)
    result = compare_chunks(source, mirror, chunk_rows=100)
    assert len(result.chunks) == 10
    assert result.differing == []
    assert (result.source_rows, result.mirror_rows, result.rows_checked) == (1000, 1000, 2000)


@pytest.mark.parametrize(
    ("change", "chunk"),
    [
        (lambda rows: rows.__setitem__(250, ((251,), (251, "changed", 376.5))), 2),  # a value differs
        (lambda rows: rows.pop(250), 2),  # a row missing in the mirror
        (lambda rows: rows.append(rows[250]), 2),  # a row twice in the mirror
        (lambda rows: rows.append(((5000,), (5000, "extra", 0.0))), 10),  # past the last source key: the tail
        (lambda rows: rows.append(((0,), (0, "below", 0.0))), 0),  # below the first: the first chunk
        (lambda rows: rows.__setitem__(3, ((4,), (4, "name 4", "6.0"))), 0),  # same text, another type
    ],
)
def test_each_kind_of_difference_names_its_chunk_only(change: Any, chunk: int) -> None:
    source = table(1000)
    mirror = list(source)
    change(mirror)
    assert compare_chunks(source, mirror, chunk_rows=100).differing == [chunk]


def test_a_key_never_straddles_two_chunks() -> None:
    rows = [((1,), (1, "a")), ((1,), (1, "b")), ((1,), (1, "c")), ((2,), (2, "d"))]
    chunks, digests = cut_chunks(rows, chunk_rows=2)
    assert [(c.first, c.last, c.rows) for c in chunks] == [((1,), (1,), 3), ((2,), (2,), 1)]
    assert [d.rows for d in digests] == [3, 1]


def test_key_ranges_cover_every_key() -> None:
    chunks, _ = cut_chunks(table(30), chunk_rows=10)
    side = ChunkedSide(chunks)
    assert [key_range(chunks, i) for i in range(4)] == [
        (None, (10,)),
        ((10,), (20,)),
        ((20,), (30,)),
        ((30,), None),
    ]
    for key in [(-5,), (1,), (10,), (11,), (30,), (31,)]:
        after, through = key_range(chunks, side.chunk_of(key))
        assert in_range(key, after, through)


def test_composite_and_text_keys() -> None:
    source = [
        ((region, name), (region, name, n))
        for n, (region, name) in enumerate(sorted({("eu", "b"), ("eu", "a"), ("us", "a")}))
    ]
    mirror = [source[2], source[0], ((source[1][0]), (*source[1][1][:2], 99))]
    assert compare_chunks(source, mirror, chunk_rows=1).differing == [1]


def test_empty_source_sends_every_mirror_row_to_the_tail() -> None:
    result = compare_chunks([], table(3), chunk_rows=10)
    assert result.chunks == [] and result.differing == [0]


def test_chunk_rows_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        cut_chunks(table(2), 0)


def test_only_differences_that_persist_count() -> None:
    looked_again: list[list[int]] = []

    def again(chunks: list[int]) -> list[int]:
        looked_again.append(chunks)
        return [3, 9]  # 3 still differs; 5 caught up; 9 was never a suspect

    assert persisting([5, 3, 3], again) == [3]
    assert looked_again == [[3, 5]]
    assert persisting([], again) == []
    assert len(looked_again) == 1  # nothing to look at again
