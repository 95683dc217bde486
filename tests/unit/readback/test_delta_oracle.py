"""The Delta oracle: open mirroring's semantics applied to real Delta tables (delta-rs), and Delta's limits."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyarrow import fs

from connector.collect.encoding import FileFormat
from connector.errors import ConfigError, LandingZoneCorrupt
from connector.events import ROW_MARKER_COLUMN
from connector.readback.delta_oracle import TableRefused, apply_to_delta
from connector.readback.replay import replay_landing_zone
from connector.storage.local import LocalStorage

TABLE = "dbo.schema/people"
TABLE_ID = "dbo.people"


@pytest.fixture
def zone(tmp_path: Path) -> LocalStorage:
    storage = LocalStorage(tmp_path / "zone")
    put_json(storage, f"{TABLE}/_metadata.json", {"keyColumns": ["id"]})
    return storage


def put_json(storage: LocalStorage, path: str, content: Any) -> None:
    storage.create(path, json.dumps(content).encode())


def put(
    storage: LocalStorage, number: int, columns: dict[str, Any], folder: str = TABLE, file_format: str = "parquet"
) -> None:
    """One data file written by the project's encoder; ``marker`` (if given) becomes ``__rowMarker__``, last."""
    data = dict(columns)
    if "marker" in data:
        data[ROW_MARKER_COLUMN] = pa.array(data.pop("marker"), pa.int32())
    encoding = FileFormat(file_format)
    storage.create(f"{folder}/{number:020d}.{encoding.extension}", encoding.encode(pa.table(data)))


def oracle(storage: LocalStorage, tmp_path: Path) -> dict[str, pa.Table]:
    return apply_to_delta(str(storage.root), tmp_path / "delta")


def rows(storage: LocalStorage, tmp_path: Path, table: str = TABLE_ID) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = oracle(storage, tmp_path)[table].to_pylist()
    return result


# -- marker semantics ----------------------------------------------------------------------------------


def test_insert_of_an_existing_key_really_duplicates_it(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": [1, 2], "name": ["a", "b"], "marker": [0, 0]})
    put(zone, 2, {"id": [1], "name": ["a again"], "marker": [0]})
    assert rows(zone, tmp_path) == [{"id": 1, "name": "a"}, {"id": 1, "name": "a again"}, {"id": 2, "name": "b"}]
    # The duplicate is in the Delta table itself, not only in what the oracle returns.
    # Arrow's own filesystem, as the oracle reads: deltalake's default hands Arrow Python-owned buffers, whose
    # release on Arrow's I/O threads can abort the interpreter at exit (see delta_oracle.DeltaWriter.read_all).
    folder = str(tmp_path / "delta" / TABLE)
    local = fs.SubTreeFileSystem(folder, fs.LocalFileSystem())
    assert DeltaTable(folder).to_pyarrow_dataset(filesystem=local).count_rows() == 3


@pytest.mark.parametrize("marker", [1, 4])
def test_update_or_upsert_of_a_missing_key_inserts(zone: LocalStorage, tmp_path: Path, marker: int) -> None:
    put(zone, 1, {"id": [1], "name": ["a"], "marker": [0]})
    put(zone, 2, {"id": [5], "name": ["new"], "marker": [marker]})
    assert rows(zone, tmp_path) == [{"id": 1, "name": "a"}, {"id": 5, "name": "new"}]


@pytest.mark.parametrize("marker", [1, 4])
def test_update_replaces_every_row_of_the_key(zone: LocalStorage, tmp_path: Path, marker: int) -> None:
    put(zone, 1, {"id": [1, 1, 2], "name": ["a", "dup", "b"], "marker": [0, 0, 0]})
    put(zone, 2, {"id": [1], "name": ["x"], "marker": [marker]})
    assert rows(zone, tmp_path) == [{"id": 1, "name": "x"}, {"id": 2, "name": "b"}]


def test_delete_of_a_missing_key_is_a_no_op(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": [1], "name": ["a"], "marker": [0]})
    put(zone, 2, {"id": [9], "name": [None], "marker": [2]})
    assert rows(zone, tmp_path) == [{"id": 1, "name": "a"}]


def test_same_key_many_times_in_one_file_applies_row_by_row(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": [1, 3], "name": ["old", "kept"], "marker": [0, 0]})
    put(
        zone,
        2,
        {
            "id": [1, 1, 1, 1, 2, 2, 2, 2, 3, 3],
            "name": ["u1", "u2", None, "ins", "i1", "i2", "up", "i3", "x", None],
            "marker": [1, 4, 2, 0, 0, 0, 4, 0, 0, 2],
        },
    )
    assert rows(zone, tmp_path) == [
        {"id": 1, "name": "ins"},  # updated twice, deleted, inserted again
        {"id": 2, "name": "i3"},  # two inserts replaced by the upsert, then one more insert
        {"id": 2, "name": "up"},
    ]  # 3: the old row, an insert and a delete of every row of the key


def test_key_change_is_a_delete_then_an_insert(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": ["E0001"], "loc": ["Bellevue"], "marker": [0]})
    put(zone, 2, {"id": ["E0001", "E0002"], "loc": [None, "Bellevue"], "marker": [2, 0]})
    assert rows(zone, tmp_path) == [{"id": "E0002", "loc": "Bellevue"}]


def test_initial_load_without_markers_is_all_inserts(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": [1, 1], "name": ["a", "b"]})
    put(zone, 2, {"id": [2], "name": ["c"], "marker": [1]})
    assert rows(zone, tmp_path) == [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}, {"id": 2, "name": "c"}]


def test_files_apply_in_number_order_across_processed_folders(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": [1], "name": ["first"], "marker": [0]}, folder=f"{TABLE}/_FilesReadyToDelete")
    put(zone, 2, {"id": [1], "name": ["second"], "marker": [1]}, folder=f"{TABLE}/_ProcessedFiles")
    for number in range(3, 11):
        put(zone, number, {"id": [1], "name": [str(number)], "marker": [4]})
    assert rows(zone, tmp_path) == [{"id": 1, "name": "10"}]


def test_composite_keys(zone: LocalStorage, tmp_path: Path) -> None:
    put_json(zone, "c/_metadata.json", {"keyColumns": ["a", "B"]})
    put(zone, 1, {"a": [2, 1, 1], "B": ["x", "y", "x"], "v": [1, 2, 3], "marker": [0, 0, 0]}, folder="c")
    put(zone, 2, {"a": [1, 1], "B": ["y", "x"], "v": [20, 30], "marker": [1, 2]}, folder="c")
    assert rows(zone, tmp_path, "c") == [{"a": 1, "B": "y", "v": 20}, {"a": 2, "B": "x", "v": 1}]


# -- schema --------------------------------------------------------------------------------------------


def test_column_added_mid_stream_is_added_to_the_delta_table(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": [1, 2], "name": ["a", "b"], "marker": [0, 0]})
    put(zone, 2, {"id": [3, 1], "name": ["c", "a2"], "age": [30, 11], "marker": [0, 1]})
    put(zone, 3, {"id": [2], "name": ["b2"], "marker": [1]})  # a later file without the column: NULL
    assert rows(zone, tmp_path) == [
        {"id": 1, "name": "a2", "age": 11},
        {"id": 2, "name": "b2", "age": None},
        {"id": 3, "name": "c", "age": 30},
    ]
    assert [f.name for f in DeltaTable(str(tmp_path / "delta" / TABLE)).schema().fields] == ["id", "name", "age"]


def test_type_change_is_refused_naming_table_column_types_and_file(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": [1], "name": ["a"], "marker": [0]})
    put(zone, 2, {"id": [2], "name": [5], "marker": [0]})
    with pytest.raises(TableRefused) as caught:
        oracle(zone, tmp_path)
    message = str(caught.value)
    assert "table dbo.people" in message
    assert f"{TABLE}/{2:020d}.parquet" in message
    assert "column 'name' changes type from string" in message
    assert "to int64" in message


def test_all_null_column_takes_the_type_of_the_first_values(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": [1], "note": pa.nulls(1, pa.timestamp("us", "UTC")), "marker": [0]})
    put(zone, 2, {"id": [2], "note": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us")), "marker": [0]})
    result = oracle(zone, tmp_path)[TABLE_ID]
    assert result.schema.field("note").type == pa.timestamp("us")
    assert result.to_pylist() == [{"id": 1, "note": None}, {"id": 2, "note": dt.datetime(2024, 1, 1)}]


@pytest.mark.parametrize(
    ("column", "shown"),
    [
        (pa.array([dt.time(12, 30, 1, 5)], pa.time64("us")), "time64[us]"),
        (pa.array([Decimal("1.5")], pa.decimal256(65, 30)), "decimal256(65, 30)"),
        (pa.array([1], pa.timestamp("ns")), "timestamp[ns]"),
        (pa.array([2**64 - 1], pa.uint64()), "uint64"),
        (pa.array([{"a": 1}], pa.struct([("a", pa.int64())])), "struct<a: int64>"),
        (pa.array([[1, 2]], pa.list_(pa.int64())), "list<element: int64>"),
    ],
)
def test_types_delta_cannot_hold_are_refused_as_fabric_would(
    zone: LocalStorage, tmp_path: Path, column: pa.Array, shown: str
) -> None:
    put(zone, 1, {"id": [1], "value": column, "marker": [0]})
    with pytest.raises(TableRefused) as caught:
        oracle(zone, tmp_path)
    message = str(caught.value)
    assert "table dbo.people" in message
    assert f"column 'value' has type {shown}, which Delta/Fabric cannot hold" in message


def test_a_refused_table_names_its_file(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": [1], "marker": [0]})
    put(zone, 2, {"id": [2], "at": pa.array([dt.time(1)], pa.time32("s")), "marker": [0]})
    with pytest.raises(TableRefused, match=rf"{TABLE}/{2:020d}\.parquet: column 'at' has type time32\[ms\]"):
        oracle(zone, tmp_path)


def test_exact_values_come_back_from_delta(zone: LocalStorage, tmp_path: Path) -> None:
    instant = dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=dt.UTC)
    put(
        zone,
        1,
        {
            "id": [1, 2],
            "amount": pa.array(
                [Decimal("12345678901234567890.123456789"), Decimal("-0.000000001")], pa.decimal128(38, 9)
            ),
            "at": pa.array([instant, None], pa.timestamp("us", "UTC")),
            "local": pa.array([dt.datetime(2024, 1, 1, 1, 2, 3, 4), None], pa.timestamp("us")),
            "blob": pa.array([b"\x00\xff", None], pa.binary()),
            "day": pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31)], pa.date32()),
            "small": pa.array([-32768, 32767], pa.int16()),
            "real": pa.array([1.5, None], pa.float32()),
            "marker": [0, 0],
        },
    )
    result = oracle(zone, tmp_path)[TABLE_ID]
    assert result.column("amount").to_pylist() == [Decimal("12345678901234567890.123456789"), Decimal("-0.000000001")]
    assert result.schema.field("amount").type == pa.decimal128(38, 9)
    assert result.column("at").to_pylist() == [instant, None]
    assert result.column("local").to_pylist() == [dt.datetime(2024, 1, 1, 1, 2, 3, 4), None]
    assert result.column("blob").to_pylist() == [b"\x00\xff", None]
    assert result.column("day").to_pylist() == [dt.date(1, 1, 1), dt.date(9999, 12, 31)]
    assert result.column("small").to_pylist() == [-32768, 32767]
    assert result.column("real").to_pylist() == [1.5, None]


def test_delimited_text_landing_zone(tmp_path: Path) -> None:
    zone = LocalStorage(tmp_path / "zone")
    first = pa.table(
        {"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"], ROW_MARKER_COLUMN: pa.array([0, 0], pa.int32())}
    )
    encoding = FileFormat("psv")
    put_json(zone, "t/_metadata.json", {"keyColumns": ["id"], **encoding.metadata_properties(first)})
    zone.create(f"t/{1:020d}.psv", encoding.encode(first))
    second = pa.table(
        {"id": pa.array([1, 2], pa.int32()), "name": [None, "b2"], ROW_MARKER_COLUMN: pa.array([2, 1], pa.int32())}
    )
    zone.create(f"t/{2:020d}.psv", encoding.encode(second))
    assert rows(zone, tmp_path, "t") == [{"id": 2, "name": "b2"}]


def test_missing_landing_zone_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        apply_to_delta(str(tmp_path / "nowhere"), tmp_path / "delta")


def test_hidden_and_underscore_folders_are_not_tables(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": [1], "marker": [0]})
    put(zone, 1, {"id": [1], "marker": [0]}, folder=".state")
    put(zone, 1, {"id": [1], "marker": [0]}, folder="_connector")
    assert sorted(oracle(zone, tmp_path)) == [TABLE_ID]


# -- differential: the Delta oracle against the pyarrow replay -----------------------------------------

Scenario = Callable[[LocalStorage], None]


def _many_markers(zone: LocalStorage) -> None:
    count = 5_000
    put(zone, 1, {"id": list(range(count)), "v": list(range(count)), "marker": [0] * count})
    put(zone, 2, {"id": list(range(0, count, 2)), "v": [-1] * (count // 2), "marker": [1] * (count // 2)})
    put(zone, 3, {"id": list(range(1, count, 4)), "marker": [2] * len(range(1, count, 4))})
    put(zone, 4, {"id": [3, 3, 7, 7, 9], "v": [1, 2, 3, 4, 5], "marker": [0, 0, 4, 0, 2]})


def _duplicates_and_updates(zone: LocalStorage) -> None:
    put(zone, 1, {"id": [1, 1, 2], "name": ["a", "dup", "b"], "marker": [0, 0, 0]})
    put(zone, 2, {"id": [1, 1, 3], "name": ["x", "y", "z"], "marker": [1, 1, 4]})
    put(zone, 3, {"id": [2, 2, 3], "name": ["b1", "b2", None], "marker": [0, 0, 2]})


def _schema_evolution(zone: LocalStorage) -> None:
    put(zone, 1, {"id": [1, 2], "name": ["a", "b"], "marker": [0, 0]})
    put(zone, 2, {"id": [3], "age": [30], "name": ["c"], "marker": [0]})
    put(zone, 3, {"id": [1], "name": ["a2"], "marker": [1]})


def _keyless_and_upsert_default(zone: LocalStorage) -> None:
    put(zone, 1, {"v": [2, 1, 2], "marker": [0, 0, 0]}, folder="plain")
    put_json(zone, "u/_metadata.json", {"keyColumns": ["id"], "isUpsertDefaultRowMarker": True})
    put(zone, 1, {"id": [1, 1, 2], "name": ["a", "b", "c"]}, folder="u")


def _csv_zone(zone: LocalStorage) -> None:
    first = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "amount": pa.array([1.5, None, -2.25])})
    encoding = FileFormat("csv")
    put_json(zone, "csv/_metadata.json", {"keyColumns": ["id"], **encoding.metadata_properties(first)})
    zone.create(f"csv/{1:020d}.csv", encoding.encode(first))
    second = first.slice(0, 2).append_column(ROW_MARKER_COLUMN, pa.array([2, 4], pa.int32()))
    zone.create(f"csv/{2:020d}.csv", encoding.encode(second))


def _random_history(zone: LocalStorage) -> None:
    """Few keys, every marker, keys repeating within and across files: where per-file batching could slip."""
    rng = random.Random(14)
    for number in range(1, 16):
        size = rng.randint(0, 25)
        put(
            zone,
            number,
            {
                "id": [rng.randint(1, 6) for _ in range(size)],
                "v": [f"{number}.{i}" for i in range(size)],
                "marker": [rng.choice([0, 0, 1, 2, 4]) for _ in range(size)],
            },
        )


@pytest.mark.parametrize(
    "scenario",
    [
        _many_markers,
        _duplicates_and_updates,
        _schema_evolution,
        _keyless_and_upsert_default,
        _csv_zone,
        _random_history,
    ],
)
def test_delta_oracle_equals_the_pyarrow_replay(zone: LocalStorage, tmp_path: Path, scenario: Scenario) -> None:
    scenario(zone)
    replayed = replay_landing_zone(zone)
    delta = oracle(zone, tmp_path)
    assert sorted(delta) == sorted(replayed)
    for table, expected in replayed.items():
        got = delta[table]
        assert got.column_names == expected.column_names, table
        assert _canonical(got) == _canonical(expected), table


def _canonical(table: pa.Table) -> list[str]:
    """Rows as sorted JSON: the replay keeps application order among duplicates, Delta keeps none."""
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in table.to_pylist())


def test_invalid_marker_is_refused(zone: LocalStorage, tmp_path: Path) -> None:
    put(zone, 1, {"id": [1], "marker": [3]})
    with pytest.raises(LandingZoneCorrupt, match="invalid values"):
        oracle(zone, tmp_path)
