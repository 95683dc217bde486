"""A schemaless topic's first batch: ``parse_envelopes`` reuses the inferring parse where that is exact.

The lane parses such a batch once with rows of no declared column (Arrow infers them), derives the row
type from it, then needs every line as structs of that type. Each test compares the reuse
(``parse_envelopes(lines, row_type, inferred)``) with the explicit parse (``parse_envelopes(lines,
row_type)``), and says whether the reuse must have been taken or must have fallen back to parsing again,
so a reuse that never happens (or happens where it should not) fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import orjson
import pyarrow as pa
import pytest

from benchmarks.events import generated_events
from connector.debezium import bulk_json
from connector.debezium.bulk_types import parse_type
from connector.debezium.schemaless import arrow_row_columns
from connector.events import KafkaRecord


def lines_of(values: list[bytes]) -> pa.Array:
    """Payloads as the lane joins them (``payload_lines``)."""
    return bulk_json.payload_lines(pa.chunked_array([pa.array(values, pa.binary())]), len(values))


def inferred_and_row_type(values: list[bytes], lines: pa.Array) -> tuple[list[pa.Table], pa.StructType]:
    """The inferring parse and the row type, as ``ColumnarLane._collect_topic`` makes them."""
    inferred = bulk_json.read_json(lines, bulk_json.envelope_schema(pa.struct([])))
    sides = (table.schema.field(side).type for table in inferred for side in ("before", "after"))
    first = KafkaRecord("shop.public.orders", 0, 0, b'{"id":1}', values[0])
    row_columns = arrow_row_columns(sides, bulk_json.first_row_columns(values[0], first))
    row_type = pa.struct([pa.field(name, parse_type(name, ctype)) for name, ctype in row_columns.items()])
    return inferred, row_type


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times ``parse_envelopes`` parsed lines (``read_json`` calls), counted once the fixture is used."""
    calls: list[int] = []
    real = bulk_json.read_json

    def counted(lines: pa.Array, schema: pa.Schema, unexpected: Literal["infer", "ignore"] = "infer") -> list[pa.Table]:
        calls.append(len(lines))
        return real(lines, schema, unexpected)

    monkeypatch.setattr(bulk_json, "read_json", counted)
    return calls


def assert_reuse(values: list[bytes], parses: list[int], *, reused: bool) -> pa.Table:
    """The reuse equals the explicit parse; ``reused``: whether it must have been taken (no parse of its own)."""
    lines = lines_of(values)
    inferred, row_type = inferred_and_row_type(values, lines)
    parses.clear()
    got = bulk_json.parse_envelopes(lines, row_type, inferred)
    assert parses == ([] if reused else [len(values)])
    want = bulk_json.parse_envelopes(lines, row_type)
    assert_same(got, want)
    return got


def assert_same(got: pa.Table, want: pa.Table) -> None:
    """Equal tables, and equal struct children too (``.field`` ignores the struct's own validity)."""
    assert got.schema == want.schema
    assert got.equals(want)
    for side in ("before", "after"):
        rows, expected = got.column(side).combine_chunks(), want.column(side).combine_chunks()
        assert rows.null_count == expected.null_count
        for index in range(expected.type.num_fields):
            assert rows.field(index).equals(expected.field(index)), (side, expected.type[index].name)


def event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, offset: int) -> bytes:
    """A schemaless Debezium payload, source block as Postgres's connector writes it."""
    source = {
        "version": "2.7.3.Final",
        "connector": "postgresql",
        "name": "shop",
        "ts_ms": 1_700_000_000_000 + offset,
        "snapshot": "false",
        "db": "shop",
        "sequence": f'["{offset}","{offset + 1}"]',
        "schema": "public",
        "table": "orders",
        "txId": 700 + offset,
        "lsn": 24_000_000 + offset,
        "xmin": None,
    }
    payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1_700_000_000_100 + offset}
    return orjson.dumps({**payload, "transaction": None})


def changes(count: int, row: Callable[[int], dict[str, Any]]) -> Iterator[bytes]:
    """Creates, updates (with a full ``before``) and deletes (``before`` holding only the key) of ``row(i)``."""
    for offset in range(count):
        if offset % 10 < 6:
            yield event("c", None, row(offset), offset)
        elif offset % 10 < 9:
            yield event("u", row(offset - 1) | {"id": offset // 2}, row(offset) | {"id": offset // 2}, offset)
        else:
            yield event("d", {"id": offset // 3}, None, offset)


def order(offset: int) -> dict[str, Any]:
    return {
        "id": offset,
        "customer": f"customer {offset % 97}",
        "quantity": offset % 13,
        "price": offset * 1.25,
        "paid": offset % 2 == 0,
        "note": None if offset % 4 else f"note {offset}",
    }


def test_benchmark_events_are_reused(parses: list[int]) -> None:
    values = [record.value or b"" for record in generated_events(2_000, with_schema=False)]
    assert_reuse(values, parses, reused=True)


def test_deletes_before_holds_only_the_key(parses: list[int]) -> None:
    got = assert_reuse(list(changes(500, order)), parses, reused=True)
    ops = got.column("op").to_pylist()
    before = got.column("before").to_pylist()
    assert {op: ops.count(op) for op in "cud"} == {"c": 300, "u": 150, "d": 50}
    deleted = [row for op, row in zip(ops, before, strict=True) if op == "d"]
    assert deleted[0] == {"id": 3, "customer": None, "quantity": None, "price": None, "paid": None, "note": None}


def test_a_column_null_in_every_row(parses: list[int]) -> None:
    got = assert_reuse(list(changes(400, lambda i: order(i) | {"comment": None})), parses, reused=True)
    assert got.schema.field("after").type.field("comment").type == pa.string()
    assert got.column("after").combine_chunks().field("comment").null_count == 400


def test_only_deletes_have_a_before_or_only_creates(parses: list[int]) -> None:
    creates = [event("c", None, order(i), i) for i in range(300)]
    deletes = [event("d", {"id": i}, None, i) for i in range(300)]
    assert_reuse(creates, parses, reused=True)  # before: all null, inferred as a struct of no column
    assert_reuse(deletes, parses, reused=True)  # after: the same


def test_an_int_column_holding_a_double_is_promoted(parses: list[int]) -> None:
    def row(offset: int) -> dict[str, Any]:
        # Row 255 is created, then the update at 256 has it as its before: both sides hold the double.
        return order(offset) | {"quantity": 2.5 if offset == 255 else offset % 13, "big": 2**60 + offset}

    values = list(changes(400, row))
    inferred, _ = inferred_and_row_type(values, lines_of(values))
    assert {inferred[0].schema.field(side).type.field("quantity").type for side in ("before", "after")} == {
        pa.float64()
    }
    got = assert_reuse(values, parses, reused=True)
    assert got.schema.field("after").type.field("quantity").type == pa.float64()
    assert got.schema.field("after").type.field("big").type == pa.int64()


def test_a_double_on_one_side_only_falls_back(parses: list[int]) -> None:
    # Only after holds the double: Arrow infers int64 for before's column, where the row type says double.
    values = list(changes(400, lambda i: order(i) | {"quantity": 2.5 if i == 250 else i % 13}))
    inferred, row_type = inferred_and_row_type(values, lines_of(values))
    assert inferred[0].schema.field("before").type.field("quantity").type == pa.int64()
    assert row_type.field("quantity").type == pa.float64()
    assert_reuse(values, parses, reused=False)


def test_several_chunks(monkeypatch: pytest.MonkeyPatch, parses: list[int]) -> None:
    monkeypatch.setattr(bulk_json, "_CHUNK_BYTES", 16 << 10)

    def row(offset: int) -> dict[str, Any]:
        # "coupon" only in the first chunk's rows, "note" null in all of the first chunk's.
        extra = {"coupon": f"C{offset}"} if offset < 20 else {}
        return order(offset) | extra | {"note": None if offset < 100 else f"note {offset}"}

    values = list(changes(1_000, row))
    inferred, _ = inferred_and_row_type(values, lines_of(values))
    assert len(inferred) > 10
    assert any("coupon" not in table.schema.field("after").type.names for table in inferred)
    assert_reuse(values, parses, reused=True)


def test_chunks_beyond_four_mib_by_default(parses: list[int]) -> None:
    values = list(changes(30_000, lambda i: order(i) | {"remark": f"{i:08d} " * 4}))
    assert sum(map(len, values)) > 5 << 20
    assert_reuse(values, parses, reused=True)


def test_chunked_and_offset_inferred_columns() -> None:
    values = list(changes(600, order))
    lines = lines_of(values)
    inferred, row_type = inferred_and_row_type(values, lines)
    [table] = inferred
    split = pa.concat_tables([table.slice(0, 250), table.slice(250, 100), table.slice(350)])
    assert split.column("after").num_chunks == 3
    assert_same(bulk_json.parse_envelopes(lines, row_type, [split]), bulk_json.parse_envelopes(lines, row_type))
    tail = lines.slice(123)
    assert_same(
        bulk_json.parse_envelopes(tail, row_type, [table.slice(123)]), bulk_json.parse_envelopes(tail, row_type)
    )


def test_timestamps_arrow_inferred_from_strings_fall_back(parses: list[int]) -> None:
    def row(offset: int) -> dict[str, Any]:
        return order(offset) | {"placed_at": f"2024-01-02T03:04:{offset % 60:02d}"}

    values = list(changes(300, row))
    inferred, row_type = inferred_and_row_type(values, lines_of(values))
    assert pa.types.is_timestamp(inferred[0].schema.field("after").type.field("placed_at").type)
    assert row_type.field("placed_at").type == pa.string()
    got = assert_reuse(values, parses, reused=False)
    assert got.column("after").combine_chunks().field("placed_at")[0].as_py() == "2024-01-02T03:04:00"


def test_ints_in_one_chunk_doubles_in_another_fall_back(monkeypatch: pytest.MonkeyPatch, parses: list[int]) -> None:
    monkeypatch.setattr(bulk_json, "_CHUNK_BYTES", 16 << 10)
    values = list(changes(1_000, lambda i: order(i) | {"quantity": 0.5 if i == 900 else i % 13}))
    inferred, row_type = inferred_and_row_type(values, lines_of(values))
    assert row_type.field("quantity").type == pa.float64()
    assert inferred[0].schema.field("after").type.field("quantity").type == pa.int64()
    assert_reuse(values, parses, reused=False)
