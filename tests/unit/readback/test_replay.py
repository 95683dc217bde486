from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyarrow import fs

from connector.commands.cli import main
from connector.errors import LandingZoneCorrupt
from connector.events import ROW_MARKER_COLUMN
from connector.readback.replay import replay_landing_zone, write_replay
from connector.storage.local import LocalStorage

TABLE = "dbo.schema/people"


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    zone = LocalStorage(tmp_path / "zone")
    put_json(zone, f"{TABLE}/_metadata.json", {"keyColumns": ["id"]})
    return zone


def put_json(storage: LocalStorage, path: str, content: Any) -> None:
    storage.create(path, json.dumps(content).encode())


def put(storage: LocalStorage, number: int, columns: dict[str, Any], folder: str = TABLE) -> None:
    """One data file; ``marker`` (if given) becomes ``__rowMarker__``, the last column."""
    data = dict(columns)
    if "marker" in data:
        data[ROW_MARKER_COLUMN] = pa.array(data.pop("marker"), pa.int32())
    sink = io.BytesIO()
    pq.write_table(pa.table(data), sink)
    storage.create(f"{folder}/{number:020d}.parquet", sink.getvalue())


def state(storage: LocalStorage, table: str = "dbo.people") -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = replay_landing_zone(storage)[table].to_pylist()
    return result


def test_insert_does_not_check_for_duplicates(storage: LocalStorage) -> None:
    put(storage, 1, {"id": [1, 2], "name": ["a", "b"], "marker": [0, 0]})
    put(storage, 2, {"id": [1], "name": ["a again"], "marker": [0]})
    assert state(storage) == [
        {"id": 1, "name": "a"},
        {"id": 1, "name": "a again"},
        {"id": 2, "name": "b"},
    ]


@pytest.mark.parametrize("marker", [1, 4])
def test_update_and_upsert_replace_every_row_of_the_key(storage: LocalStorage, marker: int) -> None:
    put(storage, 1, {"id": [1, 1, 2], "name": ["a", "dup", "b"], "marker": [0, 0, 0]})
    put(storage, 2, {"id": [1, 1], "name": ["x", "y"], "marker": [marker, marker]})
    assert state(storage) == [{"id": 1, "name": "y"}, {"id": 2, "name": "b"}]


@pytest.mark.parametrize("marker", [1, 4])
def test_update_and_upsert_of_an_absent_key_insert(storage: LocalStorage, marker: int) -> None:
    put(storage, 1, {"id": [5], "name": ["new"], "marker": [marker]})
    assert state(storage) == [{"id": 5, "name": "new"}]


def test_delete_removes_every_row_of_the_key(storage: LocalStorage) -> None:
    put(storage, 1, {"id": [1, 1, 2], "name": ["a", "dup", "b"], "marker": [0, 0, 0]})
    put(storage, 2, {"id": [1], "name": [None], "marker": [2]})
    assert state(storage) == [{"id": 2, "name": "b"}]


def test_delete_of_an_absent_key_is_a_no_op(storage: LocalStorage) -> None:
    put(storage, 1, {"id": [1, 9], "name": ["a", None], "marker": [0, 2]})
    assert state(storage) == [{"id": 1, "name": "a"}]


def test_rows_apply_in_file_order_within_a_file(storage: LocalStorage) -> None:
    put(storage, 1, {"id": [1, 1, 1, 2, 2], "name": ["a", "b", None, "c", "d"], "marker": [0, 1, 2, 4, 1]})
    assert state(storage) == [{"id": 2, "name": "d"}]


def test_key_change_is_a_delete_then_an_insert(storage: LocalStorage) -> None:
    # The seed's example: E0001 becomes E0002.
    put(storage, 1, {"id": ["E0001"], "loc": ["Bellevue"], "marker": [0]})
    put(storage, 2, {"id": ["E0001", "E0002"], "loc": [None, "Bellevue"], "marker": [2, 0]})
    assert state(storage) == [{"id": "E0002", "loc": "Bellevue"}]


def test_files_apply_in_number_order_across_processed_folders(storage: LocalStorage) -> None:
    put(storage, 1, {"id": [1], "name": ["first"], "marker": [0]}, folder=f"{TABLE}/_FilesReadyToDelete")
    put(storage, 2, {"id": [1], "name": ["second"], "marker": [1]}, folder=f"{TABLE}/_ProcessedFiles")
    put(storage, 10, {"id": [1], "name": ["tenth"], "marker": [1]})
    for number in range(3, 10):
        put(storage, number, {"id": [2], "name": [str(number)], "marker": [4]})
    assert state(storage) == [{"id": 1, "name": "tenth"}, {"id": 2, "name": "9"}]


def test_files_without_marker_are_inserts(storage: LocalStorage) -> None:
    put(storage, 1, {"id": [1, 1], "name": ["a", "b"]})
    put(storage, 2, {"id": [2], "name": ["c"], "marker": [1]})
    assert state(storage) == [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}, {"id": 2, "name": "c"}]


def test_files_without_marker_are_upserts_when_metadata_says_so(tmp_path: Path) -> None:
    zone = LocalStorage(tmp_path)
    put_json(zone, "t/_metadata.json", {"keyColumns": ["id"], "isUpsertDefaultRowMarker": True})
    put(zone, 1, {"id": [1, 1], "name": ["a", "b"]}, folder="t")
    assert state(zone, "t") == [{"id": 1, "name": "b"}]


def test_columns_are_unioned_in_first_seen_order(storage: LocalStorage) -> None:
    put(storage, 1, {"id": [1, 2], "name": ["a", "b"], "marker": [0, 0]})
    put(storage, 2, {"id": [3], "age": [30], "name": ["c"], "marker": [0]})
    result = replay_landing_zone(storage)["dbo.people"]
    assert result.column_names == ["id", "name", "age"]
    assert result.to_pylist() == [
        {"id": 1, "name": "a", "age": None},
        {"id": 2, "name": "b", "age": None},
        {"id": 3, "name": "c", "age": 30},
    ]


def test_update_from_a_file_without_a_column_makes_it_null(storage: LocalStorage) -> None:
    put(storage, 1, {"id": [1, 2], "name": ["a", "b"], "age": [10, 20], "marker": [0, 0]})
    put(storage, 2, {"id": [1], "name": ["a2"], "marker": [1]})
    assert state(storage) == [{"id": 1, "name": "a2", "age": None}, {"id": 2, "name": "b", "age": 20}]


def test_composite_keys_and_sorting(storage: LocalStorage) -> None:
    put_json(storage, "c/_metadata.json", {"keyColumns": ["a", "b"]})
    put(storage, 1, {"a": [2, 1, 1], "b": ["x", "y", "x"], "v": [1, 2, 3], "marker": [0, 0, 0]}, folder="c")
    put(storage, 2, {"a": [1, 1], "b": ["y", "z"], "v": [20, 30], "marker": [1, 2]}, folder="c")
    assert state(storage, "c") == [
        {"a": 1, "b": "x", "v": 3},
        {"a": 1, "b": "y", "v": 20},
        {"a": 2, "b": "x", "v": 1},
    ]


def test_decimals_and_timestamps_are_exact(storage: LocalStorage) -> None:
    instant = dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=dt.UTC)
    columns = {
        "id": [1, 2],
        "amount": pa.array([Decimal("12345678901234567890.123456789"), Decimal("-0.000000001")], pa.decimal128(38, 9)),
        "at": pa.array([instant, None], pa.timestamp("us", "UTC")),
        "nanos": pa.array([1_700_000_000_123_456_789, 1], pa.timestamp("ns")),
        "marker": [0, 0],
    }
    put(storage, 1, columns)
    put(
        storage,
        2,
        {
            **columns,
            "id": [2],
            "amount": columns["amount"][1:],
            "at": columns["at"][1:],
            "nanos": columns["nanos"][1:],
            "marker": [1],
        },
    )
    result = replay_landing_zone(storage)["dbo.people"]
    assert result.schema == pa.schema(
        [
            ("id", pa.int64()),
            ("amount", pa.decimal128(38, 9)),
            ("at", pa.timestamp("us", "UTC")),
            ("nanos", pa.timestamp("ns")),
        ]
    )
    assert result.column("amount").to_pylist() == [Decimal("12345678901234567890.123456789"), Decimal("-0.000000001")]
    assert result.column("at").to_pylist() == [instant, None]
    assert result.column("nanos").cast(pa.int64()).to_pylist() == [1_700_000_000_123_456_789, 1]


def test_column_null_in_one_file_takes_the_type_of_the_others(storage: LocalStorage) -> None:
    put(storage, 1, {"id": [1], "note": pa.nulls(1), "marker": [0]})
    put(storage, 2, {"id": [2], "note": ["x"], "marker": [0]})
    result = replay_landing_zone(storage)["dbo.people"]
    assert result.schema.field("note").type == pa.string()
    assert result.to_pylist() == [{"id": 1, "note": None}, {"id": 2, "note": "x"}]


def test_column_type_change_stops_the_replay(storage: LocalStorage) -> None:
    put(storage, 1, {"id": [1], "name": ["a"], "marker": [0]})
    put(storage, 2, {"id": [2], "name": [5], "marker": [0]})
    with pytest.raises(LandingZoneCorrupt, match="column 'name' changes type from string"):
        replay_landing_zone(storage)


@pytest.mark.parametrize("markers", [[3], [None]])
def test_invalid_marker_stops_the_replay(storage: LocalStorage, markers: list[int | None]) -> None:
    put(storage, 1, {"id": [1], "marker": markers})
    with pytest.raises(LandingZoneCorrupt, match="invalid values"):
        replay_landing_zone(storage)


def test_missing_key_column_stops_the_replay(storage: LocalStorage) -> None:
    put(storage, 1, {"name": ["a"], "marker": [0]})
    with pytest.raises(LandingZoneCorrupt, match=r"lacks key columns \['id'\]"):
        replay_landing_zone(storage)


def test_table_without_keys_accepts_inserts_only(tmp_path: Path) -> None:
    zone = LocalStorage(tmp_path)
    put(zone, 1, {"v": [2, 1, 2], "marker": [0, 0, 0]}, folder="t")
    assert state(zone, "t") == [{"v": 2}, {"v": 1}, {"v": 2}]
    put(zone, 2, {"v": [2], "marker": [2]}, folder="t")
    with pytest.raises(LandingZoneCorrupt, match="declares no keyColumns"):
        replay_landing_zone(zone)


def test_table_without_files_is_empty(storage: LocalStorage) -> None:
    assert replay_landing_zone(storage)["dbo.people"].num_rows == 0


def test_delimited_text_table(tmp_path: Path) -> None:
    zone = LocalStorage(tmp_path)
    metadata = {
        "keyColumns": ["id"],
        "SchemaDefinition": {
            "Columns": [
                {"Name": "id", "DataType": "Int32"},
                {"Name": "amount", "DataType": "String"},
                {"Name": "at", "DataType": "DateTime"},
                {"Name": ROW_MARKER_COLUMN, "DataType": "Int32"},
            ]
        },
        "FileFormat": "DelimitedText",
        "FileExtension": "psv",
        "FileFormatTypeProperties": {"ColumnSeparator": "|", "NullValue": "null"},
    }
    put_json(zone, "t/_metadata.json", metadata)
    zone.create(f"t/{1:020d}.psv", b"id|amount|at|__rowMarker__\n1|1.10|2024-01-01 00:00:00Z|0\n2|2.00|null|0\n")
    zone.create(f"t/{2:020d}.psv", b"id|amount|__rowMarker__\n1|null|2\n2|3.50|1\n")
    assert state(zone, "t") == [{"id": 2, "amount": "3.50", "at": None}]


def test_write_replay_mirrors_the_layout(storage: LocalStorage, tmp_path: Path) -> None:
    put(storage, 1, {"id": [1, 2], "marker": [0, 0]})
    put(storage, 1, {"id": [7]}, folder="plain")
    out = tmp_path / "out"
    assert write_replay(storage, out) == {"dbo.people": 2, "plain": 1}
    assert pq.read_table(out / "dbo.schema" / "people.parquet").column("id").to_pylist() == [1, 2]
    assert pq.read_table(out / "plain.parquet").column("id").to_pylist() == [7]
    assert write_replay(storage, out) == {"dbo.people": 2, "plain": 1}  # a second run replaces the files


def test_large_table_with_every_marker(storage: LocalStorage) -> None:
    count = 50_000
    put(storage, 1, {"id": list(range(count)), "v": list(range(count)), "marker": [0] * count})
    put(storage, 2, {"id": list(range(0, count, 2)), "v": [-1] * (count // 2), "marker": [1] * (count // 2)})
    put(storage, 3, {"id": list(range(1, count, 4)), "marker": [2] * len(range(1, count, 4))})
    result = replay_landing_zone(storage)["dbo.people"]
    assert result.num_rows == count - len(range(1, count, 4))
    assert result.column("v").to_pylist()[:3] == [-1, -1, 3]


def test_replay_of_a_missing_landing_zone_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-zone"
    assert main(["replay", str(missing), "--output", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == f"error: landing zone {missing} does not exist"
    assert not (tmp_path / "out").exists()


def test_replay_skips_hidden_and_underscore_folders(storage: LocalStorage) -> None:
    put(storage, 1, {"id": [1], "marker": [0]})
    put(storage, 1, {"id": [5], "marker": [0]}, folder=".state")
    put(storage, 1, {"id": [6], "marker": [0]}, folder="_connector")
    assert sorted(replay_landing_zone(storage)) == ["dbo.people"]


@pytest.mark.parametrize("output_format", ["parquet", "delta"])
def test_replay_command_prints_row_counts_in_either_format(
    storage: LocalStorage, tmp_path: Path, capsys: pytest.CaptureFixture[str], output_format: str
) -> None:
    put(storage, 1, {"id": [1, 2, 3], "name": ["a", "b", "c"], "marker": [0, 0, 0]})
    put(storage, 2, {"id": [2], "name": [None], "marker": [2]})
    out_dir = tmp_path / "out"
    code = main(["replay", str(storage.root), "--output", str(out_dir), "--format", output_format, "--show", "5"])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.startswith("dbo.people: 2 rows\n")
    if output_format == "delta":
        folder = str(out_dir / "dbo.schema" / "people")
        # Arrow's own filesystem, as the oracle reads (delta_oracle.DeltaWriter.read_all says why).
        table = (
            DeltaTable(folder)
            .to_pyarrow_dataset(filesystem=fs.SubTreeFileSystem(folder, fs.LocalFileSystem()))
            .to_table()
        )
    else:
        table = pq.read_table(out_dir / "dbo.schema" / "people.parquet")
    assert sorted(table.column("id").to_pylist()) == [1, 3]


def test_replay_delta_refuses_a_time_column(
    storage: LocalStorage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(storage, 1, {"id": [1], "at": pa.array([dt.time(12)], pa.time64("us")), "marker": [0]})
    assert main(["replay", str(storage.root), "--output", str(tmp_path / "out"), "--format", "delta"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: table dbo.people: dbo.schema/people/00000000000000000001.parquet: column 'at'")
    assert "time64[us], which Delta/Fabric cannot hold" in err
    # The pyarrow replay still shows what the connector wrote.
    assert main(["replay", str(storage.root), "--output", str(tmp_path / "out")]) == 0
