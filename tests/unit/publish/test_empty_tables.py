"""An empty captured table gets its folder, ``_metadata.json`` and a zero-row file through the ledger (issue 55)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.config import MirrorSettings
from connector.landing_zone.layout import TableRef
from connector.publish.empty_tables import EmptyTable
from connector.publish.ledger import BatchLedger
from connector.sink import MirrorSink
from connector.storage.local import LocalStorage
from tests.support.debezium import Topic, field

EMPTY = EmptyTable(
    TableRef("public", "empty"),
    "dbserver1.public.empty",
    pa.schema([pa.field("id", pa.int32()), pa.field("name", pa.string())]),
    ("id",),
)
KEYLESS = EmptyTable(TableRef("public", "log"), "dbserver1.public.log", pa.schema([pa.field("line", pa.string())]), ())
EMPTY_FOLDER = "public.schema/empty"


def other() -> Topic:
    return Topic("dbserver1.public.other", [field("id", "int32", optional=False)], ["id"])


def empty_topic() -> Topic:
    return Topic(EMPTY.topic, [field("id", "int32", optional=False), field("name", "string")], ["id"])


def sink(tmp_path: Path, **mirror: Any) -> MirrorSink:
    return MirrorSink(LocalStorage(tmp_path / "zone"), LocalStorage(tmp_path / "cp"), MirrorSettings(**mirror))


def files(tmp_path: Path, folder: str) -> list[str]:
    return sorted(p.name for p in (tmp_path / "zone" / folder).iterdir() if not p.name.startswith("_"))


def metadata(tmp_path: Path, folder: str) -> dict[str, Any]:
    return json.loads((tmp_path / "zone" / folder / "_metadata.json").read_text())  # type: ignore[no-any-return]


def test_an_empty_table_gets_metadata_and_a_zero_row_file_with_the_next_batch(tmp_path: Path) -> None:
    mirror = sink(tmp_path)
    mirror.queue_empty_tables([EMPTY, KEYLESS])
    mirror.process_batch(0, [other().record("r", None, {"id": 1})])
    assert files(tmp_path, EMPTY_FOLDER) == [f"{1:020d}.parquet"]
    assert metadata(tmp_path, EMPTY_FOLDER)["keyColumns"] == ["id"]
    assert "keyColumns" not in metadata(tmp_path, "public.schema/log")
    data = pq.read_table(tmp_path / "zone" / EMPTY_FOLDER / f"{1:020d}.parquet")
    assert data.num_rows == 0
    assert data.schema.field("id").type == pa.int32() and data.schema.field("name").type == pa.string()
    assert mirror.state.tables["public.empty"].next_number == 2
    assert mirror.state.tables["public.empty"].topic == EMPTY.topic


def test_rows_that_arrive_later_continue_with_the_next_number_and_a_restart_publishes_nothing_again(
    tmp_path: Path,
) -> None:
    first = sink(tmp_path)
    first.queue_empty_tables([EMPTY])
    first.process_batch(0, [other().record("r", None, {"id": 1})])
    restarted = sink(tmp_path)
    restarted.queue_empty_tables([EMPTY])  # found again at start: the ledger knows it now
    restarted.process_batch(1, [other().record("c", None, {"id": 2})])
    assert files(tmp_path, EMPTY_FOLDER) == [f"{1:020d}.parquet"]
    restarted.process_batch(2, [empty_topic().record("c", None, {"id": 7, "name": "first"})])
    assert files(tmp_path, EMPTY_FOLDER) == [f"{1:020d}.parquet", f"{2:020d}.parquet"]
    rows = pq.read_table(tmp_path / "zone" / EMPTY_FOLDER / f"{2:020d}.parquet")
    assert rows.column("id").to_pylist() == [7]
    assert "public.empty" not in restarted.stopped_tables


def test_a_table_with_events_in_the_batch_is_left_to_them(tmp_path: Path) -> None:
    mirror = sink(tmp_path)
    mirror.queue_empty_tables([EMPTY])
    mirror.process_batch(0, [empty_topic().record("r", None, {"id": 1, "name": "a"})])
    assert files(tmp_path, EMPTY_FOLDER) == [f"{1:020d}.parquet"]
    assert pq.read_table(tmp_path / "zone" / EMPTY_FOLDER / f"{1:020d}.parquet").num_rows == 1


def test_a_folder_with_a_numbered_file_is_never_published_again(tmp_path: Path) -> None:
    zone = LocalStorage(tmp_path / "zone")
    zone.create(f"{EMPTY_FOLDER}/_ProcessedFiles/{3:020d}.parquet", b"processed by Fabric")
    mirror = sink(tmp_path)
    mirror.queue_empty_tables([EMPTY])
    mirror.process_batch(0, [other().record("r", None, {"id": 1})])
    assert files(tmp_path, EMPTY_FOLDER) == []
    assert "public.empty" not in mirror.state.tables


def test_a_crash_before_the_commit_publishes_the_zero_row_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashing = sink(tmp_path)
    crashing.queue_empty_tables([EMPTY])

    def crash(self: BatchLedger, plan: object) -> None:
        raise OSError("killed after the renames, before the commit")

    with monkeypatch.context() as patch:
        patch.setattr(BatchLedger, "commit", crash)
        with pytest.raises(OSError, match="killed"):
            crashing.process_batch(0, [other().record("r", None, {"id": 1})])
    restarted = sink(tmp_path)  # completes the written plan
    assert restarted.completed_at_start == 1
    restarted.queue_empty_tables([EMPTY])
    restarted.process_batch(0, [other().record("r", None, {"id": 1})])  # Spark replays the batch
    restarted.process_batch(1, [other().record("c", None, {"id": 2})])
    assert files(tmp_path, EMPTY_FOLDER) == [f"{1:020d}.parquet"]
    assert restarted.state.tables["public.empty"].next_number == 2


def test_the_zero_row_file_has_the_marker_when_the_initial_load_has_it(tmp_path: Path) -> None:
    mirror = sink(tmp_path, initial_load="upsert")
    mirror.queue_empty_tables([EMPTY])
    mirror.process_batch(0, [other().record("r", None, {"id": 1})])
    data = pq.read_table(tmp_path / "zone" / EMPTY_FOLDER / f"{1:020d}.parquet")
    assert data.column_names == ["id", "name", "__rowMarker__"]
