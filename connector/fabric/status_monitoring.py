"""Fabric's status from the files mirroring writes beside the landing zone: ``Files/Monitoring/tables.json``.

``monitoring``: the status files mirroring writes into the mirrored database's OneLake item, beside the
landing zone: ``<item>/Files/Monitoring/replicator.json`` (the database) and
``<item>/Files/Monitoring/tables.json`` (the tables). Provenance: Microsoft's open-mirroring Python SDK
(github.com/microsoft/fabric-toolbox, ``tools/OpenMirroringPythonSDK/openmirroring_operations.py``,
``get_mirrored_database_status`` and ``get_table_status``), which reads exactly these two files and
filters ``tables.json`` as ``{"tables": [{"sourceSchemaName": ..., "sourceTableName": ..., ...}]}``.
That much is confirmed; the other fields of an entry are not documented anywhere we found, so an entry is
read with the REST API's field names (``status``, ``metrics.processedRows`` …, ``error``) and whatever is
absent stays ``None`` (a missing ``status`` reads as ``Unknown``). The fields of ``replicator.json`` are not
documented at all, so this source reports no database status (``database()`` is ``None``).
"""

from __future__ import annotations

from connector.errors import first_line
from connector.fabric.status_reader import (
    FabricStatusReader,
    FabricStatusUnreadable,
    FabricTableStatus,
    add_entries,
    json_object,
)
from connector.storage import Storage
from connector.storage.errors import StorageError
from connector.storage.location import StorageLocation

#: The table file of the monitoring folder.
MONITORING_TABLES_FILE = "tables.json"


class MonitoringFabricStatus(FabricStatusReader):
    """``tables.json`` of the mirrored database's ``Files/Monitoring`` folder, through a ``Storage``."""

    def __init__(self, folder: Storage) -> None:
        super().__init__()
        self._folder = folder
        self.location = f"{folder.url.rstrip('/')}/{MONITORING_TABLES_FILE}"

    def _read(self) -> dict[str, FabricTableStatus]:
        try:
            raw = self._folder.read_bytes(MONITORING_TABLES_FILE)
        except FileNotFoundError:
            msg = "the file does not exist (mirroring has not started, or monitoring_url is wrong)"
            raise FabricStatusUnreadable(msg) from None
        except (StorageError, OSError) as exc:
            raise FabricStatusUnreadable(first_line(str(exc)) or type(exc).__name__) from None
        entries = json_object(raw, "the file").get("tables")
        if not isinstance(entries, list):
            msg = "the file has no 'tables' list"
            raise FabricStatusUnreadable(msg)
        tables: dict[str, FabricTableStatus] = {}
        add_entries(tables, entries)
        return tables


def monitoring_url_beside(landing_zone: StorageLocation) -> str | None:
    """``…/Files/LandingZone`` → ``…/Files/Monitoring`` (where mirroring writes its status); else ``None``."""
    if landing_zone.name.lower() != "landingzone":
        return None
    return landing_zone.sibling("Monitoring")
