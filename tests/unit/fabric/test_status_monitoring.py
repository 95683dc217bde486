"""Reading Fabric's per-table status from the monitoring folder beside the landing zone (``tables.json``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from connector.config import load_settings
from connector.fabric.status import open_fabric_status
from connector.fabric.status_monitoring import MonitoringFabricStatus, monitoring_url_beside
from connector.fabric.status_reader import FabricTableStatus
from connector.storage import LocalStorage
from connector.storage.location import StorageLocation


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "connector.fabric.status" and r.levelno >= logging.WARNING]


def test_entries_without_schema_and_odd_fields() -> None:
    folder_entries = [
        {"sourceTableName": "plain", "status": "Snapshotting"},
        {"sourceSchemaName": "", "sourceTableName": "empty_schema"},
        {"sourceSchemaName": "s", "sourceTableName": "t", "metrics": {"processedRows": True}, "error": "boom"},
        {"sourceSchemaName": "s"},  # no table name: skipped
        "not an object",
    ]
    assert {e.table: e.state for e in _monitoring(folder_entries).values()} == {
        "plain": "Snapshotting",
        "empty_schema": "Unknown",
        "s.t": "Unknown",
    }
    odd = _monitoring(folder_entries)["s.t"]
    assert odd.processed_rows is None and odd.error == "boom" and odd.last_sync is None


def _monitoring(entries: list[Any]) -> dict[str, FabricTableStatus]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "tables.json").write_text(json.dumps({"tables": entries}))
        tables = MonitoringFabricStatus(LocalStorage(folder)).tables()
    assert tables is not None
    return tables


def test_monitoring_reads_tables_json_from_a_local_folder(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    monitoring = tmp_path / "Files" / "Monitoring"
    settings = load_settings(
        None,
        **{"fabric_status.kind": "monitoring", "landing_zone.url": str(tmp_path / "Files" / "LandingZone")},
    )
    reader = open_fabric_status(settings)
    assert isinstance(reader, MonitoringFabricStatus)
    with caplog.at_level(logging.WARNING, logger="connector.fabric.status"):
        assert reader.tables() is None  # mirroring has not written it yet
    [warning] = warnings_of(caplog)
    assert str(monitoring / "tables.json") in warning.getMessage() and "does not exist" in warning.getMessage()

    monitoring.mkdir(parents=True)
    (monitoring / "tables.json").write_text(
        json.dumps(
            {
                "tables": [
                    {
                        "sourceSchemaName": "public",
                        "sourceTableName": "customers",
                        "status": "Replicating",
                        "metrics": {
                            "processedRows": 12,
                            "processedBytes": 3456,
                            "lastSyncDateTime": "2025-01-01T00:00:00Z",
                        },
                    },
                    {"sourceSchemaName": "sales", "sourceTableName": "orders", "status": "Failed"},
                ]
            }
        )
    )
    tables = reader.tables()
    assert tables is not None
    assert tables["public.customers"] == FabricTableStatus(
        "public.customers", "Replicating", 12, 3456, "2025-01-01T00:00:00Z", None
    )
    assert tables["sales.orders"].failed

    (monitoring / "tables.json").write_text("[1, 2]")
    assert reader.tables() is None


def test_monitoring_url_setting_wins(tmp_path: Path) -> None:
    (tmp_path / "tables.json").write_text(json.dumps({"tables": []}))
    settings = load_settings(
        None, **{"fabric_status.kind": "monitoring", "fabric_status.monitoring_url": str(tmp_path)}
    )
    reader = open_fabric_status(settings)
    assert reader is not None and reader.tables() == {}


@pytest.mark.parametrize(
    ("landing_zone", "expected"),
    [
        (
            "https://onelake.dfs.fabric.microsoft.com/ws/db.MountedRelationalDatabase/Files/LandingZone/",
            "https://onelake.dfs.fabric.microsoft.com/ws/db.MountedRelationalDatabase/Files/Monitoring",
        ),
        (
            "abfss://ws@onelake.dfs.fabric.microsoft.com/db/Files/LandingZone",
            "abfss://ws@onelake.dfs.fabric.microsoft.com/db/Files/Monitoring",
        ),
        ("/data/landing-zone", None),
    ],
)
def test_monitoring_folder_beside_the_landing_zone(landing_zone: str, expected: str | None) -> None:
    assert monitoring_url_beside(StorageLocation(landing_zone)) == expected
