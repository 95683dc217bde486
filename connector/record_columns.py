"""Kafka records as Arrow columns (Spark's Kafka source, a file source's kcat lines) → ``KafkaRecord`` objects.

The record-by-record path (``SliceCollector``) reads ``KafkaRecord``s; Spark gives a micro-batch as Arrow
columns ``topic, partition, offset, key, value[, headers]``, and the file source as ``line, file``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from connector.events import KafkaRecord
from connector.kcat import parse_kcat_line


def records_from_arrow(table: pa.Table) -> tuple[list[KafkaRecord], list[str]]:
    """Records of one micro-batch, and the problems of lines that are not kcat records (file source)."""
    if "line" in table.column_names:
        return _records_from_lines(table)
    count = table.num_rows
    topics: Iterable[str] = _repeated_or_list(table.column("topic"))
    headers: Iterable[tuple[tuple[str, bytes | None], ...]]
    header_column = table.column("headers") if "headers" in table.column_names else None
    if header_column is not None and (pc.sum(pc.list_value_length(header_column)).as_py() or 0):
        headers = _header_tuples(header_column)
    else:
        headers = itertools.repeat((), count)  # the common case: no header kept on any record
    # Kafka timestamps: selected only for dead letters (``connector.spark.source``).
    timestamps: Iterable[int | None] = (
        table.column("timestamp_ms").to_pylist() if "timestamp_ms" in table.column_names else itertools.repeat(None)
    )
    # map() over the columns builds the named tuples without a Python-level loop body.
    records = list(
        map(
            KafkaRecord,
            topics,
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            headers,
            timestamps,
        )
    )
    return records, []


def _header_tuples(column: pa.ChunkedArray) -> list[tuple[tuple[str, bytes | None], ...]]:
    """Each record's headers as ``(name, value)`` pairs, in Kafka's order (a null list: none).

    Reads names and values as flat lists (names through a dictionary: the same few on every record) and
    slices one tuple of all pairs by the list offsets: about a quarter of the time ``to_pylist`` of the
    structs takes, which matters because dead letters keep every header of every record (Debezium alone
    adds four).
    """
    out: list[tuple[tuple[str, bytes | None], ...]] = []
    for chunk in column.chunks:
        if not len(chunk):
            continue
        names, values = chunk.values.flatten()
        if names.null_count:  # never from Kafka; kept correct rather than fast
            name_list = names.to_pylist()
        else:
            encoded = pc.dictionary_encode(names)
            name_list = list(map(encoded.dictionary.to_pylist().__getitem__, encoded.indices.to_pylist()))
        pairs = tuple(zip(name_list, values.to_pylist(), strict=True))
        offsets = chunk.offsets.to_pylist()
        headers: Iterable[tuple[tuple[str, bytes | None], ...]] = map(
            pairs.__getitem__, map(slice, offsets, offsets[1:])
        )
        if chunk.null_count:
            headers = (h if ok else () for h, ok in zip(headers, chunk.is_valid().to_pylist(), strict=True))
        out.extend(headers)
    return out


def _repeated_or_list(column: pa.ChunkedArray) -> Iterable[str]:
    """A column of topic names: one repeated string when the batch holds a single topic."""
    if pc.count_distinct(column).as_py() == 1 and column.null_count == 0:
        return itertools.repeat(column[0].as_py(), len(column))
    return column.to_pylist()  # type: ignore[no-any-return]


def _records_from_lines(table: pa.Table) -> tuple[list[KafkaRecord], list[str]]:
    records: list[KafkaRecord] = []
    problems: list[str] = []
    for line, file in zip(table.column("line").to_pylist(), table.column("file").to_pylist(), strict=True):
        if not line or not line.strip():
            continue
        try:
            records.append(parse_kcat_line(line))
        except ValueError as exc:
            problems.append(f"{file}: line is not a kcat -J record ({exc}): {line[:80]!r}")
    return records, problems
