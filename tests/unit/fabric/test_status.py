"""Choosing Fabric's status reader from ``fabric_status``: the settings each kind needs, named when missing."""

from __future__ import annotations

import pytest

from connector.config import load_settings
from connector.errors import ConfigError
from connector.fabric.status import open_fabric_status
from tests.support.fabric_api_double import MIRRORED_DATABASE_ID, WORKSPACE_ID


def test_kind_none_reads_nothing() -> None:
    assert open_fabric_status(load_settings(None)) is None


def test_rest_needs_its_ids() -> None:
    settings = load_settings(None, **{"fabric_status.kind": "rest", "fabric_status.workspace_id": WORKSPACE_ID})
    with pytest.raises(ConfigError, match=r"fabric_status\.mirrored_database_id"):
        open_fabric_status(settings)


def test_monitoring_needs_a_folder() -> None:
    settings = load_settings(None, **{"fabric_status.kind": "monitoring", "landing_zone.url": "/data/lz"})
    with pytest.raises(ConfigError, match=r"fabric_status\.monitoring_url"):
        open_fabric_status(settings)


def test_identity_problems_name_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(
        None,
        **{
            "fabric_status.kind": "rest",
            "fabric_status.workspace_id": WORKSPACE_ID,
            "fabric_status.mirrored_database_id": MIRRORED_DATABASE_ID,
            "fabric_status.credential": "client_secret",
        },
    )
    with pytest.raises(ConfigError, match=r"fabric_status\.credential: credential kind client_secret needs"):
        open_fabric_status(settings)
