"""The file applier: open mirroring's rules written once, for the replay's and the Delta oracle's back ends."""

from __future__ import annotations

import datetime as dt
import io
import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.errors import LandingZoneCorrupt
from connector.events import ROW_MARKER_COLUMN
from connector.landing_zone.layout import TableRef
from connector.readback.file_applier import FileApplier, FileChange, TableRefused, conformed, file_effect
from connector.storage.local import LocalStorage

TABLE = TableRef("dbo", "people")


class Recorder:
    """A back end that keeps every change it is given."""

    def __init__(self) -> None:
        self.changes: list[FileChange] = []

    def apply(self, change: FileChange) -> None:
        self.changes.append(change)


@pytest.fixture
def zone(tmp_path: Path) -> LocalStorage:
    storage = LocalStorage(tmp_path / "zone")
    metadata(storage, {"keyColumns": ["id"]})
    return storage


def metadata(storage: LocalStorage, content: dict[str, Any]) -> None:
    path = storage.root / TABLE.folder / "_metadata.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def put(storage: LocalStorage, number: int, columns: dict[str, Any], folder: str = TABLE.folder) -> None:
    data = dict(columns)
    if "marker" in data:
        data[ROW_MARKER_COLUMN] = pa.array(data.pop("marker"), pa.int32())
    sink = io.BytesIO()
    pq.write_table(pa.table(data), sink)
    storage.create(f"{folder}/{number:020d}.parquet", sink.getvalue())


def applied(storage: LocalStorage, *, delta_types: bool = False) -> list[FileChange]:
    recorder = Recorder()
    FileApplier.open(storage, TABLE, delta_types=delta_types).apply_to(storage, recorder)
    return recorder.changes


def test_files_come_in_number_order_across_processed_folders(zone: LocalStorage) -> None:
    put(zone, 3, {"id": [3], "marker": [0]})
    put(zone, 1, {"id": [1], "marker": [0]}, folder=f"{TABLE.folder}/_FilesReadyToDelete")
    put(zone, 2, {"id": [2], "marker": [0]}, folder=f"{TABLE.folder}/_ProcessedFiles")
    zone.create(f"{TABLE.folder}/{4:020d}.csv", b"id\n4\n")  # not the table's extension: not applied
    assert [change.data_file.number for change in applied(zone)] == [1, 2, 3]


def test_a_change_names_the_rows_removed_and_kept(zone: LocalStorage) -> None:
    put(zone, 1, {"id": [1, 2, 1, 3, 2], "marker": [0, 4, 0, 2, 0]})
    (change,) = applied(zone)
    assert change.keys == [1, 2, 1, 3, 2]
    assert change.removed == [1, 3]  # one row per key touched by an update, upsert or delete
    assert change.kept == [0, 1, 2, 4]


def test_composite_keys_are_tuples(zone: LocalStorage) -> None:
    metadata(zone, {"keyColumns": ["id", "part"]})
    put(zone, 1, {"id": [1, 1], "part": ["a", "b"], "marker": [0, 2]})
    (change,) = applied(zone)
    assert change.keys == [(1, "a"), (1, "b")]


@pytest.mark.parametrize(("upsert_default", "kept"), [(False, [0, 1]), (True, [1])])
def test_a_file_without_markers_takes_the_default_marker(
    zone: LocalStorage, upsert_default: bool, kept: list[int]
) -> None:
    metadata(zone, {"keyColumns": ["id"], "isUpsertDefaultRowMarker": upsert_default})
    put(zone, 1, {"id": [1, 1], "name": ["a", "b"]})
    (change,) = applied(zone)
    assert change.kept == kept


def test_columns_are_the_union_in_first_seen_order(zone: LocalStorage) -> None:
    put(zone, 1, {"id": [1], "name": ["a"], "marker": [0]})
    put(zone, 2, {"age": [3], "id": [2], "marker": [0]})
    first, second = applied(zone)
    assert first.schema.names == ["id", "name"]
    assert second.schema.names == ["id", "name", "age"]
    assert conformed(second.data, second.schema, every_column=True).to_pylist() == [{"id": 2, "name": None, "age": 3}]
    assert conformed(second.data, second.schema).column_names == ["age", "id"]  # the file's own, no marker


def test_an_all_null_column_takes_its_type_from_the_first_values(zone: LocalStorage) -> None:
    put(zone, 1, {"id": [1], "note": pa.nulls(1, pa.timestamp("us", "UTC")), "marker": [0]})
    put(zone, 2, {"id": [2], "note": pa.nulls(1, pa.string()), "marker": [0]})  # still no value: no type
    put(zone, 3, {"id": [3], "note": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us")), "marker": [0]})
    put(zone, 4, {"id": [4], "note": pa.nulls(1, pa.int64()), "marker": [0]})
    changes = applied(zone)
    assert [change.retyped for change in changes] == [[], [], ["note"], []]
    assert changes[-1].schema.field("note").type == pa.timestamp("us")
    assert conformed(changes[0].data, changes[-1].schema).column("note").type == pa.timestamp("us")


def test_a_type_change_refuses_the_table_naming_both_files(zone: LocalStorage) -> None:
    put(zone, 1, {"id": [1], "name": ["a"], "marker": [0]})
    put(zone, 2, {"id": [2], "name": [5], "marker": [0]})
    with pytest.raises(TableRefused) as caught:
        applied(zone)
    assert str(caught.value) == (
        f"table dbo.people: {TABLE.folder}/{2:020d}.parquet: column 'name' changes type from string "
        f"(in {1:020d}.parquet) to int64: open mirroring stops replicating a table whose column type changes"
    )


def test_types_delta_cannot_hold_are_refused_only_for_delta(zone: LocalStorage) -> None:
    put(zone, 1, {"id": [1], "at": pa.array([dt.time(12)], pa.time64("us")), "marker": [0]})
    assert len(applied(zone)) == 1
    with pytest.raises(TableRefused, match=r"column 'at' has type time64\[us\], which Delta/Fabric cannot hold"):
        applied(zone, delta_types=True)


@pytest.mark.parametrize(
    ("marker", "reason"),
    [
        (pa.array([3], pa.int32()), r"__rowMarker__ has invalid values \[3\]"),
        (pa.array([None], pa.int32()), r"__rowMarker__ has invalid values \[None\]"),
        (pa.array(["0"]), "__rowMarker__ has type string, not an integer"),
    ],
)
def test_invalid_markers_refuse_the_table(zone: LocalStorage, marker: pa.Array, reason: str) -> None:
    put(zone, 1, {"id": [1], ROW_MARKER_COLUMN: marker})
    with pytest.raises(TableRefused, match=reason):
        applied(zone)


def test_a_file_without_a_key_column_refuses_the_table(zone: LocalStorage) -> None:
    put(zone, 1, {"name": ["a"], "marker": [0]})
    with pytest.raises(TableRefused, match=r"lacks key columns \['id'\]"):
        applied(zone)


def test_a_table_without_keys_takes_inserts_only(zone: LocalStorage) -> None:
    metadata(zone, {})
    put(zone, 1, {"v": [2, 2], "marker": [0, 0]})
    (change,) = applied(zone)
    assert (change.keys, change.removed, change.kept) == ([None, None], [], [0, 1])
    put(zone, 2, {"v": [2], "marker": [2]})
    with pytest.raises(TableRefused, match="declares no keyColumns"):
        applied(zone)


def test_an_unreadable_file_refuses_the_table(zone: LocalStorage) -> None:
    zone.create(f"{TABLE.folder}/{1:020d}.parquet", b"not parquet")
    with pytest.raises(TableRefused, match=f"table dbo.people: {TABLE.folder}/{1:020d}.parquet: cannot be read"):
        applied(zone)


def test_metadata_that_is_not_an_object_is_corrupt(zone: LocalStorage) -> None:
    (zone.root / TABLE.folder / "_metadata.json").write_text("[]")
    with pytest.raises(LandingZoneCorrupt, match="is not a JSON object"):
        FileApplier.open(zone, TABLE)


def _row_by_row(state: dict[Any, list[int]], keys: list[Any], markers: list[int]) -> None:
    """The semantics as documented, one row at a time: what ``file_effect`` must equal."""
    for index, (key, marker) in enumerate(zip(keys, markers, strict=True)):
        if marker == 0:
            state.setdefault(key, []).append(index)
        elif marker in (1, 4):
            state[key] = [index]
        else:
            state.pop(key, None)


def test_file_effect_equals_applying_row_by_row() -> None:
    rng = random.Random(31)
    for _ in range(500):
        before = {key: [-1] for key in rng.sample(range(6), rng.randint(0, 6))}
        size = rng.randint(0, 12)
        keys = [rng.randint(0, 5) for _ in range(size)]
        markers = [rng.choice([0, 1, 2, 4]) for _ in range(size)]
        expected = {key: list(rows) for key, rows in before.items()}
        _row_by_row(expected, keys, markers)
        removed, kept = file_effect(keys, markers)
        assert len({keys[index] for index in removed}) == len(removed)
        state = {key: list(rows) for key, rows in before.items()}
        for index in removed:
            state.pop(keys[index], None)
        for index in kept:
            state.setdefault(keys[index], []).append(index)
        assert state == expected, (before, keys, markers)
