"""Compare a table on two sides by key ranges (chunks): a hash per chunk, rows only where the hashes differ.

A full row-by-row comparison holds one side in a dictionary and compares every value as a Python object. The
audit and ``verify`` against Fabric's tables instead cut the source's keys into ranges of ``chunk_rows`` rows in
key order (as Debezium's incremental snapshot cuts a table into chunks), and give each range a digest on each
side: the sum, modulo 2^128, of a hash of every row's canonical form, and the row count. A sum is a multiset
hash: it does not depend on the order the rows come in (so the mirror's rows need no sort, only their keys'
range), and a duplicated row changes it. Only the chunks whose digests differ are compared row by row, by the
reader's exact rules (``SourceReader``'s comparison).

The canonical form is the caller's: a row is equal by hash only if its canonical forms are equal, so a form
that is too fine (a decimal on one side, its text on the other) only sends a chunk to the row-by-row comparison,
never hides a difference, as long as equal forms mean equal values.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

Key = tuple[Any, ...]
_MODULUS = 1 << 128


def row_hash(row: Sequence[Any]) -> int:
    """A 128-bit hash of a row's canonical form (its ``repr``, which tells types apart: ``1`` from ``'1'``)."""
    return int.from_bytes(hashlib.blake2b(repr(tuple(row)).encode(), digest_size=16).digest(), "big")


@dataclass(frozen=True)
class Chunk:
    """A key range of the source: keys after the previous chunk's ``last`` up to ``last`` (inclusive)."""

    index: int
    first: Key
    last: Key
    rows: int


@dataclass
class Digest:
    """One chunk's digest on one side: row count and the sum of row hashes (a multiset hash)."""

    rows: int = 0
    total: int = 0

    def add(self, row: Sequence[Any]) -> None:
        """Count ``row`` in."""
        self.rows += 1
        self.total = (self.total + row_hash(row)) % _MODULUS


@dataclass
class ChunkedSide:
    """A side's rows summed into the source's chunks; ``tail`` holds rows past the last chunk (source has none)."""

    chunks: list[Chunk]
    digests: list[Digest] = field(default_factory=list)
    tail: Digest = field(default_factory=Digest)

    def __post_init__(self) -> None:
        self.digests = [Digest() for _ in self.chunks]
        self._bounds = [chunk.last for chunk in self.chunks]

    def chunk_of(self, key: Key) -> int:
        """The index of the chunk ``key`` falls into; ``len(chunks)`` past the last (the tail)."""
        return bisect.bisect_left(self._bounds, key)

    def add(self, key: Key, row: Sequence[Any]) -> int:
        """Count a row in its chunk; returns the chunk's index."""
        index = self.chunk_of(key)
        (self.digests[index] if index < len(self.digests) else self.tail).add(row)
        return index


def cut_chunks(rows: Iterable[tuple[Key, Sequence[Any]]], chunk_rows: int) -> tuple[list[Chunk], list[Digest]]:
    """The source side's chunks and digests, from its rows in key order (one pass, one chunk in memory).

    Rows of one key never straddle two chunks (a chunk closes between two different keys).
    """
    if chunk_rows < 1:
        msg = f"chunk_rows must be at least 1, got {chunk_rows}"
        raise ValueError(msg)
    chunks: list[Chunk] = []
    digests: list[Digest] = []
    first: Key | None = None
    last: Key | None = None
    digest = Digest()
    for key, row in rows:
        if first is not None and digest.rows >= chunk_rows and key != last:
            chunks.append(Chunk(len(chunks), first, last if last is not None else first, digest.rows))
            digests.append(digest)
            first, digest = None, Digest()
        if first is None:
            first = key
        last = key
        digest.add(row)
    if first is not None and last is not None:
        chunks.append(Chunk(len(chunks), first, last, digest.rows))
        digests.append(digest)
    return chunks, digests


@dataclass(frozen=True)
class ChunkComparison:
    """Which chunks differ, and how many rows each side held."""

    chunks: list[Chunk]
    differing: list[int]
    """Indexes of chunks whose digests differ; ``len(chunks)`` stands for mirror rows past the last chunk."""
    source_rows: int
    mirror_rows: int

    @property
    def rows_checked(self) -> int:
        """Rows read on both sides."""
        return self.source_rows + self.mirror_rows


def compare_chunks(
    source: Iterable[tuple[Key, Sequence[Any]]],
    mirror: Iterable[tuple[Key, Sequence[Any]]],
    chunk_rows: int,
) -> ChunkComparison:
    """Cut ``source`` (in key order) into chunks, sum ``mirror`` (any order) into them, and name those that differ."""
    chunks, source_digests = cut_chunks(source, chunk_rows)
    side = ChunkedSide(chunks)
    for key, row in mirror:
        side.add(key, row)
    differing = [
        chunk.index
        for chunk, mine, theirs in zip(chunks, source_digests, side.digests, strict=True)
        if (mine.rows, mine.total) != (theirs.rows, theirs.total)
    ]
    if side.tail.rows:
        differing.append(len(chunks))
    return ChunkComparison(
        chunks,
        differing,
        sum(d.rows for d in source_digests),
        sum(d.rows for d in side.digests) + side.tail.rows,
    )


def key_range(chunks: Sequence[Chunk], index: int) -> tuple[Key | None, Key | None]:
    """``(after, through)`` of a chunk: keys greater than ``after`` (``None``: no bound) up to ``through``.

    The first chunk has no lower bound and the tail (``index == len(chunks)``) no upper one, so mirror rows below
    the first source key or past the last one are compared too.
    """
    after = chunks[index - 1].last if index > 0 else None
    through = chunks[index].last if index < len(chunks) else None
    return after, through


def in_range(key: Key, after: Key | None, through: Key | None) -> bool:
    """Whether ``key`` is in ``(after, through]``."""
    return (after is None or key > after) and (through is None or key <= through)


def persisting(first: Iterable[int], again: Callable[[list[int]], Iterable[int]]) -> list[int]:
    """Chunks that differ at the first look and still differ when looked at ``again`` (once the mirror caught up).

    ``again`` gets the chunks that differed and returns those that still do; a chunk that differed only while
    the mirror lagged is dropped.
    """
    suspects = sorted(set(first))
    if not suspects:
        return []
    return sorted(set(again(suspects)) & set(suspects))
