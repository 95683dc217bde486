"""The audit's delete rows go out through the sink's next batch: numbered after the last file, ahead of its records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from connector.config import MirrorSettings
from connector.publish.batch_plan import BatchInput
from connector.publish.key_deletes import delete_rows, table_ref
from connector.readback.landing_reader import read_data_file
from connector.sink import MirrorSink
from connector.storage.local import LocalStorage
from tests.support.debezium import Topic, field

COLUMNS = [field("id", "int32", optional=False), field("name", "string")]
FOLDER = "public.schema/items"


def _topic() -> Topic:
    return Topic("dbserver1.public.items", COLUMNS, ["id"])


def _rows(landing: LocalStorage) -> list[list[dict[str, Any]]]:
    files = sorted(i.path for i in landing.list_dir(FOLDER) if i.path.rsplit("/", 1)[-1][0].isdigit())
    return [read_data_file(landing, path).to_pylist() for path in files]


def test_queued_deletes_are_published_first_in_the_next_batch(tmp_path: Path) -> None:
    landing = LocalStorage(str(tmp_path / "lz"))
    sink = MirrorSink(landing, LocalStorage(str(tmp_path / "cp")), MirrorSettings())
    topic = _topic()
    sink.process_batch(0, [topic.record("c", None, {"id": i, "name": f"n{i}"}) for i in (1, 2, 3)])
    sink.queue_deletes("public.items", [(2,), (9,)])
    with sink.begin(1) as batch:
        batch.plan(BatchInput(records=[topic.record("c", None, {"id": 9, "name": "again"})]))
    files = _rows(landing)
    # Numbered continuously after the first batch's file: the deletes' file, then the batch's records.
    assert [row for rows in files[1:] for row in rows] == [
        {"id": 2, "name": None, "__rowMarker__": 2},
        {"id": 9, "name": None, "__rowMarker__": 2},
        {"id": 9, "name": "again", "__rowMarker__": 4},  # a key written again after the delete survives it
    ]
    assert sink.state.tables["public.items"].next_number == len(files) + 1
    # Taken once: the batch after publishes only its own records.
    sink.process_batch(2, [topic.record("u", None, {"id": 1, "name": "x"})])
    assert [r["__rowMarker__"] for r in _rows(landing)[-1]] == [1]


def test_delete_rows_carry_the_keys_in_the_established_types(tmp_path: Path) -> None:
    sink = MirrorSink(LocalStorage(str(tmp_path / "lz")), LocalStorage(str(tmp_path / "cp")), MirrorSettings())
    sink.process_batch(0, [_topic().record("c", None, {"id": 1, "name": "a"})])
    table = sink.state.tables["public.items"]
    rows = delete_rows(table, [(7,)])
    assert rows.column_names == ["id", "name", "__rowMarker__"]
    assert rows.to_pylist() == [{"id": 7, "name": None, "__rowMarker__": 2}]
    assert rows.schema.field("id").type == table.arrow_schema().field("id").type  # type: ignore[union-attr]


def test_table_ref_from_the_ledger_folder() -> None:
    assert table_ref("public.items", FOLDER).id == "public.items"
    assert table_ref("items", "items").folder == "items"
