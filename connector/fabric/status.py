"""Fabric's own per-table status of the open-mirrored database: what mirroring made of our files.

The connector knows what it published; only Fabric knows whether it applied it. ``open_fabric_status`` opens
the reader ``fabric_status.kind`` chooses, for the ``cdc_mirror_fabric_*`` metrics, the ``tables`` command
and table rebuilds (which wait until Fabric no longer lists a table whose folder was deleted):

``rest``: the Fabric REST API (``status_rest``), the per-table ``getTablesMirroringStatus`` and the
database-wide ``getMirroringStatus``, with an Entra token for the Fabric API or a fixed bearer token.

``monitoring``: the status files mirroring writes into the mirrored database's OneLake item, beside the
landing zone (``status_monitoring``): ``Files/Monitoring/tables.json``; no database status.

What a reader reports, and that it never raises for an unreadable status, is ``status_reader``'s; its names
are importable from here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from connector.errors import ConfigError
from connector.fabric.status_monitoring import MonitoringFabricStatus, monitoring_url_beside
from connector.fabric.status_reader import (
    FabricDatabaseStatus,
    FabricStatusReader,
    FabricStatusUnreadable,
    FabricTableStatus,
    TokenSource,
)
from connector.fabric.status_rest import RestFabricStatus, identity_token, static_token
from connector.storage.location import StorageLocation

if TYPE_CHECKING:
    from connector.config import ConnectorSettings

__all__ = [
    "FabricDatabaseStatus",
    "FabricStatusReader",
    "FabricStatusUnreadable",
    "FabricTableStatus",
    "TokenSource",
    "open_fabric_status",
]


def open_fabric_status(settings: ConnectorSettings) -> FabricStatusReader | None:
    """The reader ``settings.fabric_status`` describes; ``None`` for kind ``none``.

    Nothing is contacted here: a wrong id, token or URL shows up as ``tables()`` returning ``None`` with a
    warning.

    Raises:
        ConfigError: A required setting is missing or invalid; the message names it.
    """
    config = settings.fabric_status
    if config.kind == "none":
        return None
    if config.kind == "rest":
        workspace, database = config.workspace_id, config.mirrored_database_id
        if not workspace or not database:
            missing = [
                name for name, value in (("workspace_id", workspace), ("mirrored_database_id", database)) if not value
            ]
            msg = f"fabric_status.kind rest needs {' and '.join('fabric_status.' + m for m in missing)}"
            raise ConfigError(msg)
        token = (
            static_token(config.bearer_token)
            if config.bearer_token is not None
            else identity_token(config.credential, "fabric_status.credential")
        )
        return RestFabricStatus(config.api_url, workspace, database, token, timeout_s=config.request_timeout_s)
    url = config.monitoring_url or monitoring_url_beside(settings.landing_zone.location)
    if url is None:
        msg = (
            "fabric_status.kind monitoring needs fabric_status.monitoring_url (the mirrored database's "
            "Files/Monitoring folder); it is found by itself only when landing_zone.url ends in /LandingZone"
        )
        raise ConfigError(msg)
    try:
        folder = StorageLocation(url, config.identity, "fabric_status.monitoring_url").open()
    except ValueError as exc:
        msg = f"fabric_status.monitoring_url: {exc}"
        raise ConfigError(msg) from None
    return MonitoringFabricStatus(folder)
