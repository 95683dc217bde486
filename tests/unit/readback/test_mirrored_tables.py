"""Fabric's mirrored tables: their paths, reading them, and the tests' replicator double that writes them.

The double (``tests.support.fabric_replicator_double``) stands in for Fabric: these tests pin what it must do as
Fabric does (order, markers, ``_ProcessedFiles``, retention, the last file kept, a gap blocking), since the e2e
tests and ``verify``'s tests rely on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from connector.collect.encoding import FileFormat
from connector.errors import ConfigError
from connector.events import ROW_MARKER_COLUMN
from connector.landing_zone.layout import TableRef
from connector.readback.mirrored_tables import (
    MirroredTables,
    fabric_has_applied,
    table_path,
    tables_url,
    waiting_files,
)
from connector.readback.replay import replay_table
from connector.storage.local import LocalStorage
from connector.storage.location import StorageLocation
from tests.support.fabric_replicator_double import FabricReplicatorDouble

PEOPLE = TableRef("sales", "people")
PLAIN = TableRef(None, "plain")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def put(zone: Path, table: TableRef, number: int, columns: dict[str, Any]) -> None:
    data = dict(columns)
    if "marker" in data:
        data[ROW_MARKER_COLUMN] = pa.array(data.pop("marker"), pa.int32())
    folder = zone / table.folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{number:020d}.parquet").write_bytes(FileFormat("parquet").encode(pa.table(data)))


def metadata(zone: Path, table: TableRef, content: dict[str, Any]) -> None:
    (zone / table.folder).mkdir(parents=True, exist_ok=True)
    (zone / table.folder / "_metadata.json").write_text(json.dumps(content))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fabric(tmp_path: Path, clock: Clock) -> FabricReplicatorDouble:
    return FabricReplicatorDouble(tmp_path / "item", retention_s=30, clock=clock)


def held(fabric: FabricReplicatorDouble, table: TableRef, keys: tuple[str, ...] = ("id",)) -> list[dict[str, Any]]:
    state = MirroredTables(str(fabric.tables)).read(table, keys)
    return [] if state is None else state.to_pylist()


# -- paths ---------------------------------------------------------------------------------------------


def test_tables_url_is_the_items_tables_folder() -> None:
    lz = "https://onelake.dfs.fabric.microsoft.com/ws-id/db-id/Files/LandingZone"
    assert tables_url(lz) == "https://onelake.dfs.fabric.microsoft.com/ws-id/db-id/Tables"
    assert tables_url(lz + "/") == "https://onelake.dfs.fabric.microsoft.com/ws-id/db-id/Tables"
    assert tables_url(StorageLocation(lz)) == "https://onelake.dfs.fabric.microsoft.com/ws-id/db-id/Tables"
    abfss = "abfss://ws@onelake.dfs.fabric.microsoft.com/Sales.MountedRelationalDatabase/Files/LandingZone"
    assert tables_url(abfss) == "abfss://ws@onelake.dfs.fabric.microsoft.com/Sales.MountedRelationalDatabase/Tables"


@pytest.mark.parametrize("url", ["/tmp/lz", "https://acct.dfs.core.windows.net/c/lz", "https://x/ws/db/Files/Other"])
def test_tables_url_refuses_what_is_no_mirrored_database(url: str) -> None:
    with pytest.raises(ConfigError, match="--tables-path"):
        tables_url(url)


def test_table_path_and_delta_uri() -> None:
    assert table_path(PEOPLE) == "sales/people"
    assert table_path(PLAIN) == "dbo/plain"
    https = MirroredTables("https://onelake.dfs.fabric.microsoft.com/ws/db/Tables")
    assert https.uri(PEOPLE) == "abfss://ws@onelake.dfs.fabric.microsoft.com/db/Tables/sales/people"
    abfss = MirroredTables("abfss://ws@onelake.dfs.fabric.microsoft.com/db/Tables")
    assert abfss.uri(PLAIN) == "abfss://ws@onelake.dfs.fabric.microsoft.com/db/Tables/dbo/plain"
    assert MirroredTables("/x/Tables").uri(PEOPLE) == "/x/Tables/sales/people"


# -- the double: Fabric's order and rules ----------------------------------------------------------------


def test_double_applies_files_in_order_with_marker_semantics(fabric: FabricReplicatorDouble) -> None:
    zone = fabric.landing_zone
    metadata(zone, PEOPLE, {"keyColumns": ["id"]})
    put(zone, PEOPLE, 1, {"id": [1, 2, 3], "name": ["a", "b", "c"]})  # initial load: marker-free, inserts
    put(zone, PEOPLE, 2, {"id": [1, 2, 4], "name": ["A", None, "d"], "marker": [1, 2, 4]})
    assert fabric.poll() == 2
    assert held(fabric, PEOPLE) == [
        {"id": 1, "name": "A"},
        {"id": 3, "name": "c"},
        {"id": 4, "name": "d"},
    ]
    assert held(fabric, PEOPLE) == replay_table(LocalStorage(str(zone)), PEOPLE).to_pylist()


def test_double_upsert_default_and_insert_without_duplicate_check(fabric: FabricReplicatorDouble) -> None:
    zone = fabric.landing_zone
    metadata(zone, PEOPLE, {"keyColumns": ["id"], "isUpsertDefaultRowMarker": True})
    put(zone, PEOPLE, 1, {"id": [1], "name": ["a"]})
    put(zone, PEOPLE, 2, {"id": [1], "name": ["b"]})  # marker-free: an upsert here
    put(zone, PEOPLE, 3, {"id": [2, 2], "name": ["x", "y"], "marker": [0, 0]})  # two inserts: two rows
    fabric.poll()
    assert held(fabric, PEOPLE) == [{"id": 1, "name": "b"}, {"id": 2, "name": "x"}, {"id": 2, "name": "y"}]


def test_double_waits_at_a_gap_and_moves_processed_files(fabric: FabricReplicatorDouble) -> None:
    zone = fabric.landing_zone
    metadata(zone, PEOPLE, {"keyColumns": ["id"]})
    put(zone, PEOPLE, 1, {"id": [1], "name": ["a"]})
    put(zone, PEOPLE, 3, {"id": [3], "name": ["c"], "marker": [0]})
    assert fabric.poll() == 1
    storage = LocalStorage(str(zone))
    assert waiting_files(storage, PEOPLE) == [3]  # number 2 is missing: 3 waits, as in Fabric
    assert fabric_has_applied(storage, PEOPLE, 1)
    assert not fabric_has_applied(storage, PEOPLE, 3)
    assert (zone / PEOPLE.folder / "_ProcessedFiles" / f"{1:020d}.parquet").exists()
    put(zone, PEOPLE, 2, {"id": [2], "name": ["b"], "marker": [0]})
    assert fabric.poll() == 2
    assert [row["id"] for row in held(fabric, PEOPLE)] == [1, 2, 3]
    assert fabric_has_applied(storage, PEOPLE, 3)


def test_double_deletes_processed_files_after_retention_but_keeps_the_last(
    fabric: FabricReplicatorDouble, clock: Clock
) -> None:
    zone = fabric.landing_zone
    metadata(zone, PLAIN, {"keyColumns": ["id"]})
    put(zone, PLAIN, 1, {"id": [1], "name": ["a"]})
    put(zone, PLAIN, 2, {"id": [2], "name": ["b"], "marker": [0]})
    fabric.poll()
    processed = zone / PLAIN.folder / "_ProcessedFiles"
    clock.now = 29
    fabric.poll()
    assert sorted(p.name for p in processed.iterdir()) == [f"{1:020d}.parquet", f"{2:020d}.parquet"]
    clock.now = 30
    fabric.poll()
    assert sorted(p.name for p in processed.iterdir()) == [f"{2:020d}.parquet"]
    assert (fabric.tables / "dbo" / "plain" / "_delta_log").is_dir()
    assert [row["id"] for row in held(fabric, PLAIN)] == [1, 2]  # what Fabric holds outlives the files


def test_double_drops_a_deleted_folder_and_reapplies_a_recreated_one(fabric: FabricReplicatorDouble) -> None:
    zone = fabric.landing_zone
    metadata(zone, PEOPLE, {"keyColumns": ["id"]})
    put(zone, PEOPLE, 1, {"id": [1, 2], "name": ["a", "b"]})
    fabric.poll()
    folder = zone / PEOPLE.folder
    for path in sorted(folder.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    folder.rmdir()
    fabric.poll()
    assert held(fabric, PEOPLE) == []
    metadata(zone, PEOPLE, {"keyColumns": ["id"]})
    put(zone, PEOPLE, 1, {"id": [7], "name": ["g"]})
    fabric.poll()
    assert held(fabric, PEOPLE) == [{"id": 7, "name": "g"}]


def test_double_stops_a_table_whose_file_is_refused(fabric: FabricReplicatorDouble) -> None:
    zone = fabric.landing_zone
    metadata(zone, PEOPLE, {"keyColumns": ["id"]})
    put(zone, PEOPLE, 1, {"id": [1], "name": ["a"]})
    put(zone, PEOPLE, 2, {"id": [1], "name": [5], "marker": [1]})  # a type change: Fabric stops the table
    metadata(zone, PLAIN, {"keyColumns": ["id"]})
    put(zone, PLAIN, 1, {"id": [1], "name": ["p"]})
    fabric.poll()
    assert "changes type" in fabric.stopped[PEOPLE.id]
    assert held(fabric, PLAIN) == [{"id": 1, "name": "p"}]


def test_read_of_a_table_fabric_has_not_created_is_none(tmp_path: Path) -> None:
    assert MirroredTables(str(tmp_path)).read(PEOPLE, ("id",)) is None
