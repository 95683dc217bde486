"""The sink: Debezium records → numbered landing-zone files, one table's problem never stopping others.

Every test runs against each landing-zone backend (a local folder, and OneLake on the DFS test double:
the ``zone`` fixture); the ledger (checkpoint) is a local folder, as in production.
"""

from __future__ import annotations

import ast
import decimal
import inspect
import itertools
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
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
from connector.publish.batch_plan import BatchInput
from connector.publish.ledger_state import TableState
from connector.publish.lifecycle import Phase
from connector.readback.landing_reader import arrow_owned, read_data_file
from connector.readback.validate import validate_landing_zone
from connector.sink import MirrorSink
from connector.storage.base import FileInfo, Storage, WriterIdentity, WriterLease
from connector.storage.local import LocalStorage
from tests.support.debezium import PLACEHOLDER, Topic, decimal_field, encode_decimal, field
from tests.support.landing import Landing

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


CUSTOMERS = "public.schema/customers"


@dataclass(frozen=True)
class Zone:
    """A landing zone on the test's backend, and the local checkpoint of the sinks that write to it."""

    landing: Landing
    checkpoint: Path

    @property
    def storage(self) -> Storage:
        return self.landing.storage

    def sink(self, **mirror: Any) -> MirrorSink:
        """A sink as the job starts it (a second call is a restart: same landing zone and ledger).

        These tests check Debezium's op → marker mapping itself, so creates stay inserts (0) unless a test asks
        for the default, replay-safe upserts, and snapshot reads carry the marker like every row unless a test asks
        for the default marker-free initial load.
        """
        mirror.setdefault("replay_safe_inserts", False)
        mirror.setdefault("initial_load", "upsert")
        return MirrorSink(self.storage, LocalStorage(self.checkpoint), MirrorSettings(**mirror))

    def write(self, path: str, data: bytes) -> None:
        """Put a file there the way another writer (or the mirroring service) would."""
        self.storage.create(path, data)

    def read(self, path: str) -> bytes:
        return self.storage.read_bytes(path)

    def table_files(self, folder: str = CUSTOMERS) -> list[str]:
        return sorted(i.path for i in self.storage.list_dir(folder) if name(i.path)[0].isdigit())

    def read_rows(self, folder: str = CUSTOMERS) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path in self.table_files(folder):
            out.extend(read_data_file(self.storage, path).to_pylist())
        return out

    def markers(self, folder: str = CUSTOMERS) -> list[tuple[int, int]]:
        return [(r["id"], r["__rowMarker__"]) for r in self.read_rows(folder)]

    def parquet(self, path: str) -> pq.ParquetFile:
        return pq.ParquetFile(pa.BufferReader(arrow_owned(self.read(path))))

    def schema(self, path: str) -> pa.Schema:
        return self.parquet(path).schema_arrow

    def snapshot(self) -> dict[str, bytes]:
        return self.landing.snapshot()


def name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


@pytest.fixture
def zones(make_landing: Callable[[], Landing], tmp_path: Path) -> Callable[[], Zone]:
    """``zones()``: a new, empty landing zone with its own checkpoint, on the test's backend."""
    numbers = itertools.count()
    return lambda: Zone(make_landing(), tmp_path / f"checkpoint-{next(numbers)}")


@pytest.fixture
def zone(zones: Callable[[], Zone]) -> Zone:
    return zones()


# -- row markers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_schema", [True, False])
def test_ops_map_to_row_markers(zone: Zone, with_schema: bool) -> None:
    t = customers(with_schema=with_schema)
    sink = zone.sink()
    sink.process_batch(
        0,
        [
            t.record("r", None, row(1)),
            t.record("c", None, row(2)),
            t.record("u", row(2), row(2, "m")),
            t.record("d", row(1), None),
        ],
    )
    assert zone.markers() == [(1, 0), (2, 0), (2, 1), (1, 2)]
    schema = zone.schema(zone.table_files()[0])
    assert schema.names[-1] == "__rowMarker__"
    assert schema.names[:-1] == ["id", "name", "price", "updated"]


def test_replay_safe_inserts_write_upserts_by_default(zone: Zone) -> None:
    assert MirrorSettings().replay_safe_inserts is True
    t = customers()
    zone.sink(replay_safe_inserts=MirrorSettings().replay_safe_inserts).process_batch(
        0, [t.record("r", None, row(1)), t.record("c", None, row(2)), t.record("u", None, row(2, "x"))]
    )
    assert zone.markers() == [(1, 4), (2, 4), (2, 1)]


def test_update_changing_the_key_is_delete_then_insert(zone: Zone) -> None:
    t = customers()
    zone.sink().process_batch(0, [t.record("u", row(1, "a"), row(5, "a"))])
    rows = zone.read_rows()
    assert [(r["id"], r["__rowMarker__"]) for r in rows] == [(1, 2), (5, 0)]
    assert rows[1]["name"] == "a" and rows[1]["price"] == decimal.Decimal("1.00")


def test_debezium_key_change_sequence_passes_through(zone: Zone) -> None:
    """Postgres PK update: delete(old, newkey header), tombstone(old), create(new, oldkey header)."""
    t = customers()
    records = [
        t.record("c", None, row(1)),
        t.record("d", {"id": 1}, None, headers=(("__debezium.newkey", b'{"id":7}'),)),
        t.tombstone({"id": 1}),
        t.record("c", None, row(7), headers=(("__debezium.oldkey", b'{"id":1}'),)),
    ]
    result = zone.sink().process_batch(0, records)
    assert zone.markers() == [(1, 0), (1, 2), (7, 0)]
    assert result.skipped.by_kind == {"tombstone": 1}


def test_delete_rows_carry_the_key(zone: Zone) -> None:
    t = customers()
    zone.sink().process_batch(
        0,
        [
            t.record("d", {"id": 3}, None),  # DEFAULT identity: before has the key only
            t.record("d", None, None, key_row={"id": 4}),  # no before at all: the Kafka key
            t.record("d", row(5, "full"), None),  # FULL identity: whole row
        ],
    )
    rows = zone.read_rows()
    assert [(r["id"], r["__rowMarker__"]) for r in rows] == [(3, 2), (4, 2), (5, 2)]
    assert rows[0]["name"] is None and rows[2]["name"] == "full"


# -- noise, truncate ----------------------------------------------------------------------------------------


def test_noise_makes_no_rows_and_no_folders(zone: Zone) -> None:
    t = customers()
    noise = [
        KafkaRecord("__debezium-heartbeat.dbserver1", 0, 0, None, b'{"ts_ms":1}'),
        KafkaRecord("dbserver1.transaction", 0, 0, b'{"id":"1"}', b'{"status":"BEGIN","id":"1","event_count":null}'),
        KafkaRecord("dbserver1", 0, 0, None, b'{"source":{},"databaseName":"inventory","ddl":"CREATE TABLE t"}'),
        t.raw(None, b'{"id":1}'),
        t.raw(b'{"schema":null,"payload":null}', b'{"id":1}'),
        t.raw(b'{"op":"m","message":{"prefix":"p","content":"eA=="}}'),
    ]
    result = zone.sink().process_batch(0, noise)
    assert result.skipped.by_kind == {
        "heartbeat": 1,
        "transaction": 1,
        "schema_change": 1,
        # The first tombstone may stand for a compacted-away delete, of a table whose types nothing gave yet:
        # counted apart (and logged); the second follows it, so it is plain noise.
        "tombstone_unwritable": 1,
        "tombstone": 1,
        "message": 1,
    }
    assert result.files == 0
    assert zone.landing.files() == []


def test_truncate_fail_stops_that_table_only(zone: Zone) -> None:
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    sink = zone.sink(truncate_policy="fail")
    result = sink.process_batch(
        0, [t.record("c", None, row(1)), t.truncate(), t.record("c", None, row(2)), other.record("c", None, row(9))]
    )
    assert "public.customers" in result.stopped and "truncated" in result.stopped["public.customers"]
    assert zone.markers() == [(1, 0)]  # rows before the truncate are kept
    assert zone.markers("public.schema/orders") == [(9, 0)]
    later = sink.process_batch(1, [t.record("c", None, row(3)), other.record("c", None, row(10))])
    assert later.skipped.by_kind == {"table_stopped": 1}
    assert zone.markers("public.schema/orders") == [(9, 0), (10, 0)]
    assert sink.stopped_tables.keys() == {"public.customers"}


def test_truncate_ignore_and_recreate(zones: Callable[[], Zone]) -> None:
    t = customers()
    a = zones()
    ignore = a.sink(truncate_policy="ignore")
    result = ignore.process_batch(0, [t.record("c", None, row(1)), t.truncate(), t.record("c", None, row(2))])
    assert result.skipped.by_kind == {"truncate": 1}
    assert a.markers() == [(1, 0), (2, 0)]

    t2 = customers()
    b = zones()
    sink = b.sink(truncate_policy="recreate")
    sink.process_batch(0, [t2.record("c", None, row(1)), t2.record("c", None, row(2))])
    sink.process_batch(1, [t2.record("c", None, row(3)), t2.truncate(), t2.record("c", None, row(4))])
    files = b.table_files()
    assert [name(f) for f in files] == ["00000000000000000001.parquet"]
    assert b.markers() == [(4, 0)]
    assert b.storage.exists(f"{CUSTOMERS}/_metadata.json")


# -- TOAST ------------------------------------------------------------------------------------------------------


def test_toast_placeholder_filled_from_before(zone: Zone) -> None:
    t = customers()
    zone.sink().process_batch(0, [t.record("u", row(1, "old"), {**row(1), "name": PLACEHOLDER})])
    assert zone.read_rows()[0]["name"] == "old"


def test_toast_placeholder_fail_policy_names_table_key_column(zone: Zone) -> None:
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    result = zone.sink().process_batch(
        0, [t.record("u", None, {**row(1), "name": PLACEHOLDER}), other.record("c", None, row(2))]
    )
    reason = result.stopped["public.customers"]
    assert "'name'" in reason and "{'id': 1}" in reason and "dbserver1.public.customers[0]@0" in reason
    assert zone.markers("public.schema/orders") == [(2, 0)]
    for path in zone.landing.files():
        if path.endswith(".parquet"):
            assert PLACEHOLDER not in str(read_data_file(zone.storage, path).to_pylist())


def test_toast_keep_last_fills_from_last_written_value_across_restarts(zone: Zone) -> None:
    t = customers()
    zone.sink(toast_policy="keep-last").process_batch(0, [t.record("c", None, row(1, "first"))])
    sink = zone.sink(toast_policy="keep-last")  # a restart: the store comes from the checkpoint
    sink.process_batch(
        1,
        [
            t.record("u", None, {**row(1), "name": PLACEHOLDER}),
            t.record("u", None, {**row(1), "name": "second"}),
            t.record("u", None, {**row(1), "name": PLACEHOLDER}),
        ],
    )
    assert [r["name"] for r in zone.read_rows()] == ["first", "first", "second", "second"]


def test_toast_bytes_and_array_placeholders_are_detected(zone: Zone) -> None:
    cols = [field("id", "int32", optional=False), field("blob", "bytes"), field("tags", "array")]
    t = Topic("dbserver1.public.docs", cols, ["id"])
    import base64

    placeholder_b64 = base64.b64encode(PLACEHOLDER.encode()).decode()
    result = zone.sink().process_batch(
        0,
        [
            t.record(
                "u", {"id": 1, "blob": "AA==", "tags": ["x"]}, {"id": 1, "blob": placeholder_b64, "tags": [PLACEHOLDER]}
            ),
        ],
    )
    assert not result.stopped
    rows = zone.read_rows("public.schema/docs")
    assert rows[0]["blob"] == b"\x00" and rows[0]["tags"] == '["x"]'


# -- ordering, layout, metadata --------------------------------------------------------------------------------


def test_partition_order_is_restored_and_kept_per_key(zone: Zone) -> None:
    t = customers()
    r0 = t.record("c", None, row(1, "a"), partition=0)
    r1 = t.record("u", None, row(1, "b"), partition=0)
    r2 = t.record("c", None, row(2, "x"), partition=1)
    # kcat dump that interleaves partitions and lists partition 0 backwards
    zone.sink().process_batch(0, [r1, r2, r0])
    rows = zone.read_rows()
    names_of_1 = [r["name"] for r in rows if r["id"] == 1]
    assert names_of_1 == ["a", "b"]


def test_layout_metadata_and_partner_events(zone: Zone) -> None:
    t = customers()
    plain = Topic("mysqlserver.orders", COLUMNS, ["id"])
    mapped = Topic("dbserver1.public.legacy_name", COLUMNS, ["id", "name"])
    settings = {"tables": {"dbserver1.public.legacy_name": TableSettings(schema_name="sales", table="clients")}}
    zone.sink(partner_name="acme", **settings).process_batch(
        0, [t.record("c", None, row(1)), plain.record("c", None, row(2)), mapped.record("c", None, row(3))]
    )
    assert orjson.loads(zone.read("public.schema/customers/_metadata.json")) == {"keyColumns": ["id"]}
    assert zone.storage.exists("orders/00000000000000000001.parquet")
    assert orjson.loads(zone.read("sales.schema/clients/_metadata.json")) == {"keyColumns": ["id", "name"]}
    partner = orjson.loads(zone.read("_partnerEvents.json"))
    assert partner["partnerName"] == "acme" and partner["sourceInfo"]["sourceType"] == "postgresql"


def test_conflicting_metadata_stops_that_table_only(zone: Zone) -> None:
    zone.write(f"{CUSTOMERS}/_metadata.json", b'{"keyColumns": ["other"]}')
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    result = zone.sink().process_batch(0, [t.record("c", None, row(1)), other.record("c", None, row(2))])
    assert "keyColumns" in result.stopped["public.customers"]
    assert zone.table_files() == []
    assert not [p for p in zone.landing.files(CUSTOMERS) if name(p).startswith("_staged_")]
    assert zone.markers("public.schema/orders") == [(2, 0)]


def test_a_table_without_a_key_is_mirrored_without_key_columns(zones: Callable[[], Zone]) -> None:
    """Before, its first event stopped it ("the event has no key"); now its rows arrive, identical ones all."""
    t = Topic("dbserver1.public.nokey", COLUMNS, [])
    made = [t.record("r", None, row(1)), t.record("c", None, row(1)), t.record("c", None, row(2))]
    keyless = [KafkaRecord(r.topic, 0, r.offset, None, r.value) for r in made]
    zone = zones()
    result = zone.sink().process_batch(0, keyless)
    assert not result.stopped
    folder = "public.schema/nokey"
    assert "keyColumns" not in orjson.loads(zone.read(f"{folder}/_metadata.json"))
    rows = zone.read_rows(folder)
    assert [r["id"] for r in rows] == [1, 1, 2]
    # Parquet: marker-free, whole-file inserts (delimited text always carries the marker: inserts, 0).
    assert {r.get("__rowMarker__", 0) for r in rows} == {0}
    keyed = zones().sink(tables={"dbserver1.public.nokey": TableSettings(key_columns=["id"])})
    assert not keyed.process_batch(0, keyless).stopped


# -- files ----------------------------------------------------------------------------------------------------


def test_numbers_continue_after_files_already_there(zone: Zone) -> None:
    zone.write(f"{CUSTOMERS}/_ProcessedFiles/00000000000000000041.parquet", b"x")
    zone.write(f"{CUSTOMERS}/00000000000000000040.parquet", b"x")
    zone.write(f"{CUSTOMERS}/_metadata.json", b'{"keyColumns": ["id"]}')
    t = customers()
    zone.sink().process_batch(0, [t.record("c", None, row(1))])
    assert zone.storage.exists(f"{CUSTOMERS}/00000000000000000042.parquet")
    assert zone.read(f"{CUSTOMERS}/00000000000000000040.parquet") == b"x"


def test_files_are_continuous_and_split_by_max_rows(zone: Zone) -> None:
    t = customers()
    sink = zone.sink(max_rows_per_file=3)
    sink.process_batch(0, [t.record("c", None, row(i)) for i in range(7)])
    sink.process_batch(1, [t.record("c", None, row(i)) for i in range(7, 9)])
    names = [name(p) for p in zone.table_files()]
    assert names == [f"{n:020d}.parquet" for n in range(1, 5)]
    assert [r["id"] for r in zone.read_rows()] == list(range(9))


def test_max_bytes_per_file_splits(zone: Zone) -> None:
    t = customers()
    zone.sink(max_bytes_per_file=200).process_batch(0, [t.record("c", None, row(i)) for i in range(20)])
    assert len(zone.table_files()) > 1
    assert [r["id"] for r in zone.read_rows()] == list(range(20))


@pytest.mark.parametrize("compression", ["snappy", "zstd", "gzip", "none"])
def test_parquet_compression(zone: Zone, compression: str) -> None:
    t = customers()
    zone.sink(compression=compression).process_batch(0, [t.record("c", None, row(1))])
    meta = zone.parquet(zone.table_files()[0]).metadata
    expected = "UNCOMPRESSED" if compression == "none" else compression.upper()
    assert meta.row_group(0).column(0).compression == expected


@pytest.mark.parametrize(("fmt", "delimiter"), [("csv", ","), ("tsv", "\t"), ("psv", "|")])
def test_delimited_text_with_full_metadata(zone: Zone, fmt: str, delimiter: str) -> None:
    t = customers()
    zone.sink(file_format=fmt).process_batch(0, [t.record("c", None, row(1, "a,b|c")), t.record("d", row(1), None)])
    meta = orjson.loads(zone.read(f"{CUSTOMERS}/_metadata.json"))
    assert meta["keyColumns"] == ["id"] and meta["FileFormat"] == "DelimitedText" and meta["FileExtension"] == fmt
    assert [c["Name"] for c in meta["SchemaDefinition"]["Columns"]][-1] == "__rowMarker__"
    assert {c["Name"]: c["DataType"] for c in meta["SchemaDefinition"]["Columns"]}["id"] == "Int32"
    data = pacsv.read_csv(
        pa.BufferReader(arrow_owned(zone.read(f"{CUSTOMERS}/00000000000000000001.{fmt}"))),
        parse_options=pacsv.ParseOptions(delimiter=delimiter),
    ).to_pylist()
    assert data[0]["name"] == "a,b|c" and data[0]["__rowMarker__"] == 0 and data[1]["__rowMarker__"] == 2
    assert str(data[0]["price"]) in ("1.00", "1.0", "1")


def _only_table(sink: MirrorSink) -> TableState:
    (state,) = sink.state.tables.values()
    return state


def test_initial_load_is_marker_free_until_the_first_change_and_never_again(zone: Zone) -> None:
    t = customers()
    sink = zone.sink(initial_load=MirrorSettings().initial_load, replay_safe_inserts=True)
    assert MirrorSettings().initial_load == "marker-free"
    sink.process_batch(0, [t.record("r", None, row(1), snapshot="first"), t.record("r", None, row(2))])
    # One batch holding the end of the snapshot and the first change: split into a marker-free and a marked file.
    sink.process_batch(1, [t.record("r", None, row(3), snapshot="last"), t.record("u", row(1), row(1, "x"))])
    # An incremental snapshot's read after the first change: the marker stays.
    sink.process_batch(2, [t.record("r", None, row(4), snapshot="incremental")])
    files = zone.table_files()
    assert ["__rowMarker__" in zone.schema(f).names for f in files] == [False, False, True, True]
    assert [r["id"] for r in zone.read_rows()] == [1, 2, 3, 1, 4]
    state = _only_table(sink)
    assert (state.initial_load_ended, state.marker_free_rows, state.incremental) == (True, 3, True)


def test_initial_load_upsert_writes_the_marker_on_snapshot_reads(zone: Zone) -> None:
    t = customers()
    sink = zone.sink(initial_load="upsert", replay_safe_inserts=True)
    sink.process_batch(0, [t.record("r", None, row(1), snapshot="first"), t.record("r", None, row(2))])
    assert zone.markers() == [(1, 4), (2, 4)]
    assert _only_table(sink).marker_free_rows == 0


def test_an_incremental_snapshot_read_ends_the_initial_load(zone: Zone) -> None:
    t = customers()
    sink = zone.sink(initial_load="marker-free", replay_safe_inserts=True)
    sink.process_batch(0, [t.record("r", None, row(1)), t.record("r", None, row(2), snapshot="incremental")])
    files = zone.table_files()
    assert ["__rowMarker__" in zone.schema(f).names for f in files] == [False, True]
    assert _only_table(sink).initial_load_ended


def test_old_setting_omit_row_marker_for_snapshot_names_its_replacement() -> None:
    with pytest.raises(ValueError, match=r"replaced by mirror\.initial_load"):
        MirrorSettings(omit_row_marker_for_snapshot=True)  # type: ignore[call-arg]


@pytest.mark.parametrize("initial_load", ["marker-free", "upsert"])
@pytest.mark.parametrize(
    "batches",
    [
        # Killed mid-table: the second pass starts again at the first row, in a later batch.
        [[("first", 1), ("true", 2)], [("first", 1)]],
        # ... or in the same batch.
        [[("first", 1), ("true", 2), ("first", 1), ("true", 2)]],
        # A table done in the first pass (its last read), read again: a one-row table's only read is "last...".
        [[("last_in_data_collection", 1)], [("last_in_data_collection", 1)]],
        [[("first_in_data_collection", 1), ("last_in_data_collection", 2)], [("true", 1)]],
    ],
)
def test_a_second_snapshot_pass_in_the_initial_load_rebuilds_the_table(
    zone: Zone, batches: list[list[tuple[str, int]]], initial_load: str
) -> None:
    t = customers()
    sink = zone.sink(initial_load=initial_load, replay_safe_inserts=True)
    for batch_id, reads in enumerate(batches):
        sink.process_batch(batch_id, [t.record("r", None, row(key), snapshot=mark) for mark, key in reads])
    state = _only_table(sink)
    assert state.lifecycle.phase == "deleting" and "second snapshot pass" in (state.lifecycle.stop_reason or "")
    assert not [p for p in zone.storage.list_dir(CUSTOMERS) if p.path.rsplit("/", 1)[-1].startswith("_staged")]


@pytest.mark.parametrize(
    "batches",
    [
        [[("first", 1), ("true", 2)], [("true", 3), ("last", 4)]],
        [[("first_in_data_collection", 1)], [("last_in_data_collection", 2)]],
        [[("last", 1)]],
    ],
)
def test_one_snapshot_pass_is_no_second_pass(zone: Zone, batches: list[list[tuple[str, int]]]) -> None:
    t = customers()
    sink = zone.sink(initial_load="marker-free", replay_safe_inserts=True)
    for batch_id, reads in enumerate(batches):
        sink.process_batch(batch_id, [t.record("r", None, row(key), snapshot=mark) for mark, key in reads])
    last = len(batches)
    sink.process_batch(last, [t.record("c", None, row(9))])
    sink.process_batch(last + 1, [t.record("r", None, row(1), snapshot="incremental")])  # asked for: upserted
    state = _only_table(sink)
    assert state.lifecycle.phase in (Phase.RUNNING, Phase.STOPPED) and not state.lifecycle.stop_reason
    last = zone.read_rows()[-1]
    assert (last["id"], last["__rowMarker__"]) == (1, 4)


# -- schema evolution -------------------------------------------------------------------------------------------


def test_new_column_is_added(zone: Zone) -> None:
    t = customers()
    sink = zone.sink()
    sink.process_batch(0, [t.record("c", None, row(1))])
    t.columns = [*COLUMNS, field("email", "string")]
    sink.process_batch(1, [t.record("c", None, {**row(2), "email": "e@x"})])
    files = zone.table_files()
    assert zone.schema(files[1]).names == ["id", "name", "price", "updated", "email", "__rowMarker__"]
    assert zone.read_rows()[1]["email"] == "e@x"


def test_type_change_stops_that_table_with_column_and_types(zone: Zone) -> None:
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    sink = zone.sink()
    sink.process_batch(0, [t.record("c", None, row(1))])
    t.columns = [field("id", "int32", optional=False), field("name", "int64"), *COLUMNS[2:]]
    result = sink.process_batch(1, [t.record("c", None, {**row(2), "name": 5}), other.record("c", None, row(3))])
    reason = result.stopped["public.customers"]
    assert "'name'" in reason and "string" in reason and "int64" in reason
    # Where, and the command that recovers this very table (it said `rebuild TABLE`, without a position).
    assert reason.startswith("dbserver1.public.customers[0]@"), reason
    assert reason.endswith("rebuild the table (python -m connector rebuild public.customers)"), reason
    assert zone.markers("public.schema/orders") == [(3, 0)]
    assert len(zone.table_files()) == 1


def test_schemaless_ints_then_fractions_make_a_double_column_and_later_fractions_stop_an_int_one(
    zone: Zone,
) -> None:
    t = customers(with_schema=False)
    sink = zone.sink()
    sink.process_batch(0, [t.record("c", None, {"id": 1, "price": 2}), t.record("c", None, {"id": 2, "price": 2.5})])
    table = read_data_file(zone.storage, zone.table_files()[0])
    assert table.schema.field("price").type == pa.float64()
    assert table.column("price").to_pylist() == [2.0, 2.5]
    # The id column is int64 from now on: a fraction there is not silently truncated.
    result = sink.process_batch(1, [t.record("c", None, {"id": 3.5, "price": 1.5})])
    assert "'id'" in result.stopped["public.customers"] and "3.5" in result.stopped["public.customers"]
    assert len(zone.table_files()) == 1


def test_declared_decimal_columns_without_schema(zone: Zone) -> None:
    t = customers(with_schema=False)
    sink = zone.sink(decimal_columns={"public.customers.price": "10,2"})
    sink.process_batch(0, [t.record("c", None, {"id": 1, "name": "a", "price": "12.30", "updated": 5})])
    table = read_data_file(zone.storage, zone.table_files()[0])
    assert table.schema.field("price").type == pa.decimal128(10, 2)
    assert table.column("price").to_pylist() == [decimal.Decimal("12.30")]


# -- poison events -------------------------------------------------------------------------------------------


def test_poison_event_stops_its_table_and_keeps_earlier_rows(zone: Zone) -> None:
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    result = zone.sink().process_batch(
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
    assert zone.markers() == [(1, 0)]
    assert zone.markers("public.schema/orders") == [(4, 0)]


def test_unconvertible_value_names_record_and_column(zone: Zone) -> None:
    t = customers()
    result = zone.sink().process_batch(0, [t.record("c", None, {**row(1), "price": "%%%"})])
    assert "dbserver1.public.customers[0]@0" in result.stopped["public.customers"]
    assert "'price'" in result.stopped["public.customers"]


# -- exactly once -----------------------------------------------------------------------------------------------


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs."""


class CrashingStorage(Storage):
    """A backend (local or OneLake) that dies at the n-th call of one operation (a crash at that instant)."""

    def __init__(self, inner: Storage, operation: str, at: int) -> None:
        self.inner = inner
        self.url = inner.url
        self.operation = operation
        self.at = at
        self.calls = 0

    def _tick(self, operation: str) -> None:
        if operation == self.operation:
            self.calls += 1
            if self.calls == self.at:
                raise Crash(operation)

    @override
    def rename_new(self, source: str, destination: str, *, size: int | None = None) -> None:
        self._tick("rename_new")
        self.inner.rename_new(source, destination, size=size)

    @override
    def replace(self, path: str, data: bytes) -> None:
        self._tick(f"replace:{path.split('/')[1] if '/' in path else path}")
        self.inner.replace(path, data)

    @override
    def read_bytes(self, path: str) -> bytes:
        return self.inner.read_bytes(path)

    @override
    def create(self, path: str, data: bytes) -> None:
        self.inner.create(path, data)

    @override
    def size(self, path: str) -> int | None:
        return self.inner.size(path)

    @override
    def list_dir(self, path: str) -> list[FileInfo]:
        return self.inner.list_dir(path)

    @override
    def delete(self, path: str) -> None:
        self.inner.delete(path)

    @override
    def delete_tree(self, path: str) -> None:
        self.inner.delete_tree(path)

    @override
    def cleanup_temporary(self, prefix: str = "", *, older_than: timedelta | None = None) -> list[str]:
        return self.inner.cleanup_temporary(prefix, older_than=older_than)

    @override
    def acquire_lease(self, path: str, holder: WriterIdentity) -> WriterLease:
        return self.inner.acquire_lease(path, holder)


def batch_records() -> list[list[KafkaRecord]]:
    t = customers()
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
    return [
        [t.record("c", None, row(i)) for i in range(5)] + [other.record("c", None, row(i)) for i in range(3)],
        [t.record("u", None, row(i, "v2")) for i in range(5)] + [other.record("d", row(0), None)],
    ]


def run_clean(zone: Zone) -> dict[str, bytes]:
    sink = zone.sink(max_rows_per_file=2)
    for batch_id, records in enumerate(batch_records()):
        sink.process_batch(batch_id, records)
    return zone.snapshot()


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
@pytest.mark.parametrize("retry", ["restart", "in-process"])
def test_crash_at_any_instant_then_replay_publishes_exactly_once(
    zones: Callable[[], Zone], operation: str, at: int, retry: str
) -> None:
    """``restart``: a new process; ``in-process``: the same sink is handed the failed batch again."""
    expected = run_clean(zones())
    crash = zones()
    crashing = MirrorSink(
        CrashingStorage(crash.storage, operation, at),
        CrashingStorage(LocalStorage(crash.checkpoint), operation, at),
        MirrorSettings(max_rows_per_file=2, replay_safe_inserts=False),
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
    # Spark re-runs the batch that did not commit, then goes on.
    restarted = crash.sink(max_rows_per_file=2) if retry == "restart" else crashing
    for batch_id in range(crashed_at, len(batches)):
        restarted.process_batch(batch_id, batch_records()[batch_id])
    assert crash.snapshot() == expected


def test_uploads_a_crash_left_behind_are_removed_on_start_and_published_files_kept(zone: Zone) -> None:
    t = customers()
    zone.sink().process_batch(0, [t.record("c", None, row(1)), t.record("c", None, row(2))])
    published = zone.snapshot()
    # What a process killed mid-upload leaves: the backend's write-aside file, in a table folder and
    # at the root (where _partnerEvents.json is written). Open mirroring ignores them; we must not
    # leave them for ever, and must touch nothing else.
    zone.write(f"{CUSTOMERS}/_tmp_3f2a9c0d1e.part", b"half an upload")
    zone.write("_tmp_77aa01.part", b"")
    restarted = zone.sink()  # the sink recovers when it is built, as the job and convert build it on start
    assert zone.snapshot() == published
    assert validate_landing_zone(zone.storage) == []
    restarted.process_batch(1, [t.record("c", None, row(3))])
    assert zone.markers() == [(1, 0), (2, 0), (3, 0)]
    assert {k: v for k, v in zone.snapshot().items() if k in published} == published


def test_committed_batch_id_publishes_nothing_again(zone: Zone) -> None:
    sink = zone.sink()
    batches = batch_records()
    sink.process_batch(0, batches[0])
    before = zone.snapshot()
    again = zone.sink().process_batch(0, batches[0])
    assert again.already_committed and again.files == 0
    assert zone.snapshot() == before


def test_foreign_file_ahead_of_the_ledger_stops_the_table(zone: Zone) -> None:
    t = customers()
    sink = zone.sink()
    sink.process_batch(0, [t.record("c", None, row(1))])
    zone.write(f"{CUSTOMERS}/00000000000000000002.parquet", b"someone else")
    result = zone.sink().process_batch(1, [t.record("c", None, row(2))])
    assert "another writer" in result.stopped["public.customers"]
    assert zone.read(f"{CUSTOMERS}/00000000000000000002.parquet") == b"someone else"


def test_keep_last_follows_a_primary_key_update(zone: Zone) -> None:
    """Real Postgres: the create for the new key has the unchanged TOASTed column as a placeholder."""
    t = customers()
    sink = zone.sink(toast_policy="keep-last")
    sink.process_batch(0, [t.record("c", None, row(1, "kept"))])
    sink.process_batch(
        1,
        [
            t.record("d", {"id": 1}, None, headers=(("__debezium.newkey", b'{"id":2}'),)),
            t.tombstone({"id": 1}),
        ],
    )
    zone.sink(toast_policy="keep-last").process_batch(
        2, [t.record("c", None, {**row(2), "name": PLACEHOLDER}, headers=(("__debezium.oldkey", b'{"id":1}'),))]
    )
    assert [(r["id"], r["name"], r["__rowMarker__"]) for r in zone.read_rows()] == [
        (1, "kept", 0),
        (1, None, 2),
        (2, "kept", 0),
    ]


def key_move(t: Topic, old: int, new: int) -> list[KafkaRecord]:
    """Postgres's events for a primary-key update old→new of a row whose TOASTed ``name`` did not change."""
    return [
        t.record("d", {"id": old}, None, headers=(("__debezium.newkey", f'{{"id":{new}}}'.encode()),)),
        t.tombstone({"id": old}),
        t.record(
            "c", None, {**row(new), "name": PLACEHOLDER}, headers=(("__debezium.oldkey", f'{{"id":{old}}}'.encode()),)
        ),
    ]


def final_rows(rows: list[dict[str, Any]]) -> dict[int, str | None]:
    """The mirror's state after applying marked rows in order (id → name)."""
    state: dict[int, str | None] = {}
    for r in rows:
        if r["__rowMarker__"] == 2:
            state.pop(r["id"], None)
        else:
            state[r["id"]] = r["name"]
    return state


def test_keep_last_fills_debezium_resends_of_chained_key_moves_after_a_restart(zone: Zone) -> None:
    """1→2 then 2→3; Debezium restarts and re-sends both moves: the re-sent create of 2 still gets 'kept'."""
    t = customers()
    zone.sink(toast_policy="keep-last").process_batch(0, [t.record("c", None, row(1, "kept"))])
    zone.sink(toast_policy="keep-last").process_batch(1, [*key_move(t, 1, 2), *key_move(t, 2, 3)])
    resent = [*key_move(t, 1, 2), *key_move(t, 2, 3)]
    result = zone.sink(toast_policy="keep-last").process_batch(2, resent)  # a restart, then the re-sends
    assert result.stopped == {}
    rows = zone.read_rows()
    written = [(r["id"], r["name"]) for r in rows if r["__rowMarker__"] != 2]
    assert written == [(1, "kept"), *[(2, "kept"), (3, "kept")] * 2]
    assert final_rows(rows) == {3: "kept"}


def test_keep_last_forgets_the_oldest_removed_keys_beyond_its_limit(zone: Zone) -> None:
    """With room for one removed key, a re-sent move of an evicted key stops the table instead of guessing."""
    t = customers()
    sink = zone.sink(toast_policy="keep-last", keep_last_removed_keys=1)
    sink.process_batch(0, [t.record("c", None, row(1, "kept")), t.record("c", None, row(5, "other"))])
    sink.process_batch(1, [*key_move(t, 1, 2), t.record("d", {"id": 2}, None), t.record("d", {"id": 5}, None)])
    result = zone.sink(toast_policy="keep-last", keep_last_removed_keys=1).process_batch(2, key_move(t, 1, 2))
    assert "keep_last_removed_keys" in result.stopped["public.customers"]
    assert final_rows(zone.read_rows()) == {}


def test_an_in_process_retry_after_a_failed_batch_still_numbers_after_an_earlier_writers_files(
    zones: Callable[[], Zone], tmp_path: Path
) -> None:
    """The first touch of a table scans the landing zone; a batch that fails must not leave that scan
    half-applied (before, the retry numbered from 1 over the earlier files and stopped the table)."""
    zone = zones()
    t = customers()
    zone.sink(max_rows_per_file=2).process_batch(0, [t.record("c", None, row(i)) for i in range(5)])
    earlier = zone.table_files()
    assert len(earlier) == 3
    # A new checkpoint (a new writer) on the same landing zone; its first batch dies before its plan is written.
    other = tmp_path / "other-checkpoint"
    sink = MirrorSink(
        CrashingStorage(zone.storage, "replace:plans", 1),
        CrashingStorage(LocalStorage(other), "replace:plans", 1),
        MirrorSettings(max_rows_per_file=2),
    )
    records = [t.record("u", None, row(i, "v2")) for i in range(3)]
    with pytest.raises(Crash):
        sink.process_batch(0, records)
    result = sink.process_batch(0, records)
    assert result.stopped == {}
    assert zone.table_files()[: len(earlier)] == earlier
    assert [name(p) for p in zone.table_files()[len(earlier) :]] == [
        "00000000000000000004.parquet",
        "00000000000000000005.parquet",
    ]


def test_recovering_a_plan_whose_files_mirroring_already_processed_and_deleted_stops_nothing(
    zones: Callable[[], Zone],
) -> None:
    """A crash after the renames, before the commit; then the mirroring service processes the files and deletes
    all but the last (as it does). Recovery finds neither staged nor final names for the others: published."""
    zone = zones()
    t = customers()
    crashing = MirrorSink(
        CrashingStorage(zone.storage, "replace:state.json", 1),
        CrashingStorage(LocalStorage(zone.checkpoint), "replace:state.json", 1),
        MirrorSettings(max_rows_per_file=2),
    )
    with pytest.raises(Crash):
        crashing.process_batch(0, [t.record("c", None, row(i)) for i in range(5)])
    files = zone.table_files()
    assert [name(p) for p in files] == [f"{n:020d}.parquet" for n in (1, 2, 3)]
    for path in files[:-1]:
        zone.storage.delete(path)  # processed and deleted by the mirroring service, which keeps the last
    restarted = zone.sink(max_rows_per_file=2)
    restarted.process_batch(1, [t.record("u", None, row(1, "v2"))])
    assert restarted.stopped_tables == {}
    assert [name(p) for p in zone.table_files()] == [f"{n:020d}.parquet" for n in (3, 4)]


# -- a batch as one object ----------------------------------------------------------------------------------


def test_a_batch_is_begun_planned_and_finished_in_that_order_once(zone: Zone) -> None:
    t = customers()
    sink = zone.sink()
    with sink.begin(0) as batch:
        with pytest.raises(RuntimeError, match="batch 0 is begun, it cannot be finished now"):
            batch.finish()
        batch.plan(BatchInput(records=[t.record("c", None, row(1))]))
        with pytest.raises(RuntimeError, match="batch 0 is planned, it cannot be planned now"):
            batch.plan(BatchInput(records=[t.record("c", None, row(2))]))
        assert batch.finish().files == 1
        with pytest.raises(RuntimeError, match="batch 0 is finished, it cannot be finished now"):
            batch.finish()
    assert zone.markers() == [(1, 0)]
    # The same batch id again (Spark's replay after a crash before its own commit) publishes nothing.
    with zone.sink().begin(0) as again:
        assert again.published
        assert again.plan(BatchInput(records=[t.record("c", None, row(2))])).finish().already_committed
    assert zone.markers() == [(1, 0)]


def test_a_batchs_steps_call_down_and_never_back_into_the_sink() -> None:
    """``MirrorSink.steps`` enters ``sink.py`` once: no step is a method of the sink, called or handed on."""
    steps = ast.parse(textwrap.dedent(inspect.getsource(MirrorSink.steps)))
    methods = {name for name, member in vars(MirrorSink).items() if callable(member) or isinstance(member, property)}
    back = sorted(
        node.attr
        for node in ast.walk(steps)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr in methods
    )
    assert back == []
