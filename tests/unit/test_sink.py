"""The sink: Debezium records → numbered landing-zone files, one table's problem never stopping others."""

from __future__ import annotations

import decimal
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from typing_extensions import override

from connector.config import MirrorSettings, TableSettings
from connector.events import KafkaRecord
from connector.landing.sink import MirrorSink
from connector.storage.local import LocalStorage
from tests.support.debezium import PLACEHOLDER, Topic, decimal_field, encode_decimal, field

COLUMNS = [
    field("id", "int32", optional=False),
    field("name", "string"),
    decimal_field("price", 10, 2),
    field("updated", "int64", "io.debezium.time.MicroTimestamp"),
]


def customers(**kwargs: Any) -> Topic:
    return Topic("dbserver1.public.customers", COLUMNS, ["id"], **kwargs)


def row(i: int, name: str = "n", price: str = "1.00") -> dict[str, Any]:
    return {"id": i, "name": name, "price": encode_decimal(price, 2), "updated": 1_700_000_000_000_000 + i}


def make_sink(tmp_path: Path, **mirror: Any) -> MirrorSink:
    return MirrorSink(LocalStorage(tmp_path / "lz"), LocalStorage(tmp_path / "cp"), MirrorSettings(**mirror))


def table_files(tmp_path: Path, folder: str = "public.schema/customers") -> list[Path]:
    return sorted(p for p in (tmp_path / "lz" / folder).iterdir() if p.name[0].isdigit())


def read_rows(tmp_path: Path, folder: str = "public.schema/customers") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in table_files(tmp_path, folder):
        out.extend(pq.read_table(path).to_pylist())
    return out


def markers(tmp_path: Path, folder: str = "public.schema/customers") -> list[tuple[int, int]]:
    return [(r["id"], r["__rowMarker__"]) for r in read_rows(tmp_path, folder)]


# -- row markers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_schema", [True, False])
def test_ops_map_to_row_markers(tmp_path: Path, with_schema: bool) -> None:
    t = customers(with_schema=with_schema)
    sink = make_sink(tmp_path)
    sink.process_batch(
        0,
        [
            t.record("r", None, row(1)),
            t.record("c", None, row(2)),
            t.record("u", row(2), row(2, "m")),
            t.record("d", row(1), None),
        ],
    )
    assert markers(tmp_path) == [(1, 0), (2, 0), (2, 1), (1, 2)]
    schema = pq.read_schema(table_files(tmp_path)[0])
    assert schema.names[-1] == "__rowMarker__"
    assert schema.names[:-1] == ["id", "name", "price", "updated"]


def test_replay_safe_inserts_write_upserts(tmp_path: Path) -> None:
    t = customers()
    make_sink(tmp_path, replay_safe_inserts=True).process_batch(
        0, [t.record("r", None, row(1)), t.record("c", None, row(2)), t.record("u", None, row(2, "x"))]
    )
    assert markers(tmp_path) == [(1, 4), (2, 4), (2, 1)]


def test_update_changing_the_key_is_delete_then_insert(tmp_path: Path) -> None:
    t = customers()
    make_sink(tmp_path).process_batch(0, [t.record("u", row(1, "a"), row(5, "a"))])
    rows = read_rows(tmp_path)
    assert [(r["id"], r["__rowMarker__"]) for r in rows] == [(1, 2), (5, 0)]
    assert rows[1]["name"] == "a" and rows[1]["price"] == decimal.Decimal("1.00")


def test_debezium_key_change_sequence_passes_through(tmp_path: Path) -> None:
    """Postgres PK update: delete(old, newkey header), tombstone(old), create(new, oldkey header)."""
    t = customers()
    records = [
        t.record("c", None, row(1)),
        t.record("d", {"id": 1}, None, headers=(("__debezium.newkey", b'{"id":7}'),)),
        t.tombstone({"id": 1}),
        t.record("c", None, row(7), headers=(("__debezium.oldkey", b'{"id":1}'),)),
    ]
    result = make_sink(tmp_path).process_batch(0, records)
    assert markers(tmp_path) == [(1, 0), (1, 2), (7, 0)]
    assert result.skipped.by_kind == {"tombstone": 1}


def test_delete_rows_carry_the_key(tmp_path: Path) -> None:
    t = customers()
    make_sink(tmp_path).process_batch(
        0,
        [
            t.record("d", {"id": 3}, None),  # DEFAULT identity: before has the key only
            t.record("d", None, None, key_row={"id": 4}),  # no before at all: the Kafka key
            t.record("d", row(5, "full"), None),  # FULL identity: whole row
        ],
    )
    rows = read_rows(tmp_path)
    assert [(r["id"], r["__rowMarker__"]) for r in rows] == [(3, 2), (4, 2), (5, 2)]
    assert rows[0]["name"] is None and rows[2]["name"] == "full"


# -- noise, truncate ----------------------------------------------------------------------------------------


def test_noise_makes_no_rows_and_no_folders(tmp_path: Path) -> None:
    t = customers()
    noise = [
        KafkaRecord("__debezium-heartbeat.dbserver1", 0, 0, None, b'{"ts_ms":1}'),
        KafkaRecord("dbserver1.transaction", 0, 0, b'{"id":"1"}', b'{"status":"BEGIN","id":"1","event_count":null}'),
        KafkaRecord("dbserver1", 0, 0, None, b'{"source":{},"databaseName":"inventory","ddl":"CREATE TABLE t"}'),
        t.raw(None, b'{"id":1}'),
        t.raw(b'{"schema":null,"payload":null}', b'{"id":1}'),
        t.raw(b'{"op":"m","message":{"prefix":"p","content":"eA=="}}'),
    ]
    result = make_sink(tmp_path).process_batch(0, noise)
    assert result.skipped.by_kind == {
        "heartbeat": 1,
        "transaction": 1,
        "schema_change": 1,
        "tombstone": 2,
        "message": 1,
    }
    assert result.files == 0
    assert not (tmp_path / "lz").exists() or not any((tmp_path / "lz").iterdir())


def test_truncate_fail_stops_that_table_only(tmp_path: Path) -> None:
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    sink = make_sink(tmp_path)
    result = sink.process_batch(
        0, [t.record("c", None, row(1)), t.truncate(), t.record("c", None, row(2)), other.record("c", None, row(9))]
    )
    assert "public.customers" in result.stopped and "truncated" in result.stopped["public.customers"]
    assert markers(tmp_path) == [(1, 0)]  # rows before the truncate are kept
    assert markers(tmp_path, "public.schema/orders") == [(9, 0)]
    later = sink.process_batch(1, [t.record("c", None, row(3)), other.record("c", None, row(10))])
    assert later.skipped.by_kind == {"table_stopped": 1}
    assert markers(tmp_path, "public.schema/orders") == [(9, 0), (10, 0)]
    assert sink.stopped_tables.keys() == {"public.customers"}


def test_truncate_ignore_and_recreate(tmp_path: Path) -> None:
    t = customers()
    ignore = make_sink(tmp_path / "a", truncate_policy="ignore")
    result = ignore.process_batch(0, [t.record("c", None, row(1)), t.truncate(), t.record("c", None, row(2))])
    assert result.skipped.by_kind == {"truncate": 1}
    assert markers(tmp_path / "a") == [(1, 0), (2, 0)]

    t2 = customers()
    sink = make_sink(tmp_path / "b", truncate_policy="recreate")
    sink.process_batch(0, [t2.record("c", None, row(1)), t2.record("c", None, row(2))])
    sink.process_batch(1, [t2.record("c", None, row(3)), t2.truncate(), t2.record("c", None, row(4))])
    files = table_files(tmp_path / "b")
    assert [f.name for f in files] == ["00000000000000000001.parquet"]
    assert markers(tmp_path / "b") == [(4, 0)]
    assert (tmp_path / "b" / "lz" / "public.schema" / "customers" / "_metadata.json").exists()


# -- TOAST ------------------------------------------------------------------------------------------------------


def test_toast_placeholder_filled_from_before(tmp_path: Path) -> None:
    t = customers()
    make_sink(tmp_path).process_batch(0, [t.record("u", row(1, "old"), {**row(1), "name": PLACEHOLDER})])
    assert read_rows(tmp_path)[0]["name"] == "old"


def test_toast_placeholder_fail_policy_names_table_key_column(tmp_path: Path) -> None:
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    result = make_sink(tmp_path).process_batch(
        0, [t.record("u", None, {**row(1), "name": PLACEHOLDER}), other.record("c", None, row(2))]
    )
    reason = result.stopped["public.customers"]
    assert "'name'" in reason and "{'id': 1}" in reason and "dbserver1.public.customers[0]@0" in reason
    assert markers(tmp_path, "public.schema/orders") == [(2, 0)]
    for path in (tmp_path / "lz").rglob("*.parquet"):
        assert PLACEHOLDER not in str(pq.read_table(path).to_pylist())


def test_toast_keep_last_fills_from_last_written_value_across_restarts(tmp_path: Path) -> None:
    t = customers()
    make_sink(tmp_path, toast_policy="keep-last").process_batch(0, [t.record("c", None, row(1, "first"))])
    sink = make_sink(tmp_path, toast_policy="keep-last")  # a restart: the store comes from the checkpoint
    sink.process_batch(
        1,
        [
            t.record("u", None, {**row(1), "name": PLACEHOLDER}),
            t.record("u", None, {**row(1), "name": "second"}),
            t.record("u", None, {**row(1), "name": PLACEHOLDER}),
        ],
    )
    assert [r["name"] for r in read_rows(tmp_path)] == ["first", "first", "second", "second"]


def test_toast_bytes_and_array_placeholders_are_detected(tmp_path: Path) -> None:
    cols = [field("id", "int32", optional=False), field("blob", "bytes"), field("tags", "array")]
    t = Topic("dbserver1.public.docs", cols, ["id"])
    import base64

    placeholder_b64 = base64.b64encode(PLACEHOLDER.encode()).decode()
    result = make_sink(tmp_path).process_batch(
        0,
        [
            t.record(
                "u", {"id": 1, "blob": "AA==", "tags": ["x"]}, {"id": 1, "blob": placeholder_b64, "tags": [PLACEHOLDER]}
            ),
        ],
    )
    assert not result.stopped
    rows = read_rows(tmp_path, "public.schema/docs")
    assert rows[0]["blob"] == b"\x00" and rows[0]["tags"] == '["x"]'


# -- ordering, layout, metadata --------------------------------------------------------------------------------


def test_partition_order_is_restored_and_kept_per_key(tmp_path: Path) -> None:
    t = customers()
    r0 = t.record("c", None, row(1, "a"), partition=0)
    r1 = t.record("u", None, row(1, "b"), partition=0)
    r2 = t.record("c", None, row(2, "x"), partition=1)
    # kcat dump that interleaves partitions and lists partition 0 backwards
    make_sink(tmp_path).process_batch(0, [r1, r2, r0])
    rows = read_rows(tmp_path)
    names_of_1 = [r["name"] for r in rows if r["id"] == 1]
    assert names_of_1 == ["a", "b"]


def test_layout_metadata_and_partner_events(tmp_path: Path) -> None:
    t = customers()
    plain = Topic("mysqlserver.orders", COLUMNS, ["id"])
    mapped = Topic("dbserver1.public.legacy_name", COLUMNS, ["id", "name"])
    settings = {"tables": {"dbserver1.public.legacy_name": TableSettings(schema_name="sales", table="clients")}}
    make_sink(tmp_path, partner_name="acme", **settings).process_batch(
        0, [t.record("c", None, row(1)), plain.record("c", None, row(2)), mapped.record("c", None, row(3))]
    )
    lz = tmp_path / "lz"
    assert orjson.loads((lz / "public.schema/customers/_metadata.json").read_bytes()) == {"keyColumns": ["id"]}
    assert (lz / "orders" / "00000000000000000001.parquet").exists()
    assert orjson.loads((lz / "sales.schema/clients/_metadata.json").read_bytes()) == {"keyColumns": ["id", "name"]}
    partner = orjson.loads((lz / "_partnerEvents.json").read_bytes())
    assert partner["partnerName"] == "acme" and partner["sourceInfo"]["sourceType"] == "postgresql"


def test_conflicting_metadata_stops_that_table_only(tmp_path: Path) -> None:
    folder = tmp_path / "lz" / "public.schema" / "customers"
    folder.mkdir(parents=True)
    (folder / "_metadata.json").write_text('{"keyColumns": ["other"]}')
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    result = make_sink(tmp_path).process_batch(0, [t.record("c", None, row(1)), other.record("c", None, row(2))])
    assert "keyColumns" in result.stopped["public.customers"]
    assert table_files(tmp_path) == []
    assert not [p for p in folder.iterdir() if p.name.startswith("_staged_")]
    assert markers(tmp_path, "public.schema/orders") == [(2, 0)]


def test_key_without_columns_needs_config(tmp_path: Path) -> None:
    t = Topic("dbserver1.public.nokey", COLUMNS, [])
    record = t.record("c", None, row(1), key_row=None)
    keyless = KafkaRecord(record.topic, 0, 0, None, record.value)
    result = make_sink(tmp_path).process_batch(0, [keyless])
    assert "no key" in result.stopped["public.nokey"]
    ok = make_sink(tmp_path / "b", tables={"dbserver1.public.nokey": TableSettings(key_columns=["id"])})
    assert not ok.process_batch(0, [keyless]).stopped


# -- files ----------------------------------------------------------------------------------------------------


def test_numbers_continue_after_files_already_there(tmp_path: Path) -> None:
    folder = tmp_path / "lz" / "public.schema" / "customers"
    (folder / "_ProcessedFiles").mkdir(parents=True)
    (folder / "_ProcessedFiles" / "00000000000000000041.parquet").write_bytes(b"x")
    (folder / "00000000000000000040.parquet").write_bytes(b"x")
    (folder / "_metadata.json").write_text('{"keyColumns": ["id"]}')
    t = customers()
    make_sink(tmp_path).process_batch(0, [t.record("c", None, row(1))])
    assert (folder / "00000000000000000042.parquet").exists()
    assert (folder / "00000000000000000040.parquet").read_bytes() == b"x"


def test_files_are_continuous_and_split_by_max_rows(tmp_path: Path) -> None:
    t = customers()
    sink = make_sink(tmp_path, max_rows_per_file=3)
    sink.process_batch(0, [t.record("c", None, row(i)) for i in range(7)])
    sink.process_batch(1, [t.record("c", None, row(i)) for i in range(7, 9)])
    names = [p.name for p in table_files(tmp_path)]
    assert names == [f"{n:020d}.parquet" for n in range(1, 5)]
    assert [r["id"] for r in read_rows(tmp_path)] == list(range(9))


def test_max_bytes_per_file_splits(tmp_path: Path) -> None:
    t = customers()
    make_sink(tmp_path, max_bytes_per_file=200).process_batch(0, [t.record("c", None, row(i)) for i in range(20)])
    assert len(table_files(tmp_path)) > 1
    assert [r["id"] for r in read_rows(tmp_path)] == list(range(20))


@pytest.mark.parametrize("compression", ["snappy", "zstd", "gzip", "none"])
def test_parquet_compression(tmp_path: Path, compression: str) -> None:
    t = customers()
    make_sink(tmp_path, compression=compression).process_batch(0, [t.record("c", None, row(1))])
    meta = pq.ParquetFile(table_files(tmp_path)[0]).metadata
    expected = "UNCOMPRESSED" if compression == "none" else compression.upper()
    assert meta.row_group(0).column(0).compression == expected


@pytest.mark.parametrize(("fmt", "delimiter"), [("csv", ","), ("tsv", "\t"), ("psv", "|")])
def test_delimited_text_with_full_metadata(tmp_path: Path, fmt: str, delimiter: str) -> None:
    t = customers()
    make_sink(tmp_path, file_format=fmt).process_batch(
        0, [t.record("c", None, row(1, "a,b|c")), t.record("d", row(1), None)]
    )
    folder = tmp_path / "lz" / "public.schema" / "customers"
    meta = orjson.loads((folder / "_metadata.json").read_bytes())
    assert meta["keyColumns"] == ["id"] and meta["FileFormat"] == "DelimitedText" and meta["FileExtension"] == fmt
    assert [c["Name"] for c in meta["SchemaDefinition"]["Columns"]][-1] == "__rowMarker__"
    assert {c["Name"]: c["DataType"] for c in meta["SchemaDefinition"]["Columns"]}["id"] == "Int32"
    data = pacsv.read_csv(
        folder / f"00000000000000000001.{fmt}", parse_options=pacsv.ParseOptions(delimiter=delimiter)
    ).to_pylist()
    assert data[0]["name"] == "a,b|c" and data[0]["__rowMarker__"] == 0 and data[1]["__rowMarker__"] == 2
    assert str(data[0]["price"]) in ("1.00", "1.0", "1")


def test_snapshot_only_first_files_may_omit_the_marker(tmp_path: Path) -> None:
    t = customers()
    sink = make_sink(tmp_path, omit_row_marker_for_snapshot=True)
    sink.process_batch(0, [t.record("r", None, row(1)), t.record("r", None, row(2))])
    sink.process_batch(1, [t.record("u", None, row(1, "x"))])
    sink.process_batch(2, [t.record("r", None, row(3))])  # a later snapshot read: the marker stays
    files = table_files(tmp_path)
    assert "__rowMarker__" not in pq.read_schema(files[0]).names
    assert pq.read_schema(files[1]).names[-1] == "__rowMarker__"
    assert pq.read_schema(files[2]).names[-1] == "__rowMarker__"


# -- schema evolution -------------------------------------------------------------------------------------------


def test_new_column_is_added(tmp_path: Path) -> None:
    t = customers()
    sink = make_sink(tmp_path)
    sink.process_batch(0, [t.record("c", None, row(1))])
    t.columns = [*COLUMNS, field("email", "string")]
    sink.process_batch(1, [t.record("c", None, {**row(2), "email": "e@x"})])
    files = table_files(tmp_path)
    assert pq.read_schema(files[1]).names == ["id", "name", "price", "updated", "email", "__rowMarker__"]
    assert read_rows(tmp_path)[1]["email"] == "e@x"


def test_type_change_stops_that_table_with_column_and_types(tmp_path: Path) -> None:
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    sink = make_sink(tmp_path)
    sink.process_batch(0, [t.record("c", None, row(1))])
    t.columns = [field("id", "int32", optional=False), field("name", "int64"), *COLUMNS[2:]]
    result = sink.process_batch(1, [t.record("c", None, {**row(2), "name": 5}), other.record("c", None, row(3))])
    reason = result.stopped["public.customers"]
    assert "'name'" in reason and "string" in reason and "int64" in reason
    assert markers(tmp_path, "public.schema/orders") == [(3, 0)]
    assert len(table_files(tmp_path)) == 1


def test_declared_decimal_columns_without_schema(tmp_path: Path) -> None:
    t = customers(with_schema=False)
    sink = make_sink(tmp_path, decimal_columns={"public.customers.price": "10,2"})
    sink.process_batch(0, [t.record("c", None, {"id": 1, "name": "a", "price": "12.30", "updated": 5})])
    table = pq.read_table(table_files(tmp_path)[0])
    assert table.schema.field("price").type == pa.decimal128(10, 2)
    assert table.column("price").to_pylist() == [decimal.Decimal("12.30")]


# -- poison events -------------------------------------------------------------------------------------------


def test_poison_event_stops_its_table_and_keeps_earlier_rows(tmp_path: Path) -> None:
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    result = make_sink(tmp_path).process_batch(
        0,
        [
            t.record("c", None, row(1)),
            t.raw(b"{garbage", b'{"id":2}'),
            t.record("c", None, row(3)),
            other.record("c", None, row(4)),
        ],
    )
    assert result.stopped["public.customers"].startswith("dbserver1.public.customers[0]@1: ")
    assert result.skipped.by_kind == {"malformed": 1, "table_stopped": 1}
    assert markers(tmp_path) == [(1, 0)]
    assert markers(tmp_path, "public.schema/orders") == [(4, 0)]


def test_unconvertible_value_names_record_and_column(tmp_path: Path) -> None:
    t = customers()
    result = make_sink(tmp_path).process_batch(0, [t.record("c", None, {**row(1), "price": "%%%"})])
    assert "dbserver1.public.customers[0]@0" in result.stopped["public.customers"]
    assert "'price'" in result.stopped["public.customers"]


# -- exactly once -----------------------------------------------------------------------------------------------


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs."""


class CrashingStorage(LocalStorage):
    """Local storage that dies at the n-th call of one operation (a crash at that instant)."""

    def __init__(self, root: Path, operation: str, at: int) -> None:
        super().__init__(root)
        self.operation = operation
        self.at = at
        self.calls = 0

    def _tick(self, operation: str) -> None:
        if operation == self.operation:
            self.calls += 1
            if self.calls == self.at:
                raise Crash(operation)

    @override
    def rename_new(self, source: str, destination: str) -> None:
        self._tick("rename_new")
        super().rename_new(source, destination)

    @override
    def replace(self, path: str, data: bytes) -> None:
        self._tick(f"replace:{path.split('/')[1]}")
        super().replace(path, data)


def batch_records() -> list[list[KafkaRecord]]:
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    return [
        [t.record("c", None, row(i)) for i in range(5)] + [other.record("c", None, row(i)) for i in range(3)],
        [t.record("u", None, row(i, "v2")) for i in range(5)] + [other.record("d", row(0), None)],
    ]


def landing_snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_clean(tmp_path: Path) -> dict[str, bytes]:
    sink = make_sink(tmp_path, max_rows_per_file=2)
    for batch_id, records in enumerate(batch_records()):
        sink.process_batch(batch_id, records)
    return landing_snapshot(tmp_path / "lz")


@pytest.mark.parametrize(
    ("operation", "at"),
    [
        ("rename_new", 1),  # before the first rename of batch 0
        ("rename_new", 3),  # between files
        ("rename_new", 6),  # in batch 1
        ("replace:state.json", 1),  # after every rename, before the commit of batch 0
        ("replace:state.json", 2),  # same, batch 1
        ("replace:plans", 2),  # staged, before the plan of batch 1 is written
    ],
)
def test_crash_at_any_instant_then_replay_publishes_exactly_once(tmp_path: Path, operation: str, at: int) -> None:
    expected = run_clean(tmp_path / "clean")
    lz = tmp_path / "crash" / "lz"
    crashing = MirrorSink(
        CrashingStorage(lz, operation, at),
        CrashingStorage(tmp_path / "crash" / "cp", operation, at),
        MirrorSettings(max_rows_per_file=2),
    )
    batches = batch_records()
    crashed_at = None
    for batch_id, records in enumerate(batches):
        try:
            crashing.process_batch(batch_id, records)
        except Crash:
            crashed_at = batch_id
            break
    assert crashed_at is not None
    # Restart: Spark re-runs the batch that did not commit, then goes on.
    restarted = make_sink(tmp_path / "crash", max_rows_per_file=2)
    for batch_id in range(crashed_at, len(batches)):
        restarted.process_batch(batch_id, batch_records()[batch_id])
    assert landing_snapshot(lz) == expected


def test_committed_batch_id_publishes_nothing_again(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    batches = batch_records()
    sink.process_batch(0, batches[0])
    before = landing_snapshot(tmp_path / "lz")
    again = make_sink(tmp_path).process_batch(0, batches[0])
    assert again.already_committed and again.files == 0
    assert landing_snapshot(tmp_path / "lz") == before


def test_foreign_file_ahead_of_the_ledger_stops_the_table(tmp_path: Path) -> None:
    t = customers()
    sink = make_sink(tmp_path)
    sink.process_batch(0, [t.record("c", None, row(1))])
    folder = tmp_path / "lz" / "public.schema" / "customers"
    (folder / "00000000000000000002.parquet").write_bytes(b"someone else")
    result = make_sink(tmp_path).process_batch(1, [t.record("c", None, row(2))])
    assert "another writer" in result.stopped["public.customers"]
    assert (folder / "00000000000000000002.parquet").read_bytes() == b"someone else"


def test_keep_last_follows_a_primary_key_update(tmp_path: Path) -> None:
    """Real Postgres: the create for the new key has the unchanged TOASTed column as a placeholder."""
    t = customers()
    sink = make_sink(tmp_path, toast_policy="keep-last")
    sink.process_batch(0, [t.record("c", None, row(1, "kept"))])
    sink.process_batch(
        1,
        [
            t.record("d", {"id": 1}, None, headers=(("__debezium.newkey", b'{"id":2}'),)),
            t.tombstone({"id": 1}),
        ],
    )
    make_sink(tmp_path, toast_policy="keep-last").process_batch(
        2, [t.record("c", None, {**row(2), "name": PLACEHOLDER}, headers=(("__debezium.oldkey", b'{"id":1}'),))]
    )
    assert [(r["id"], r["name"], r["__rowMarker__"]) for r in read_rows(tmp_path)] == [
        (1, "kept", 0),
        (1, None, 2),
        (2, "kept", 0),
    ]
