"""From an empty workspace to a mirror: ``connector init`` then ``connector run`` into the item it created.

The Fabric REST API is its test double (``tests/support/fabric_api_double.py``), which provisions the item's
``Files/LandingZone`` in the OneLake DFS double as Fabric does; ``run`` is a real ``python -m connector run`` (one
Spark start) of the packaged sample, configured only by the YAML ``init --write-config`` wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from connector.commands.cli import main
from connector.spark.source import SAMPLE_EVENTS
from tests.support.dfs_server import (
    OTHER_IDENTITY_VARIABLES,
    DfsTestServer,
    make_onelake_storage,
    managed_identity_environment,
)
from tests.support.fabric_api_double import TOKEN, WORKSPACE_ID, FabricApiDouble
from tests.support.kafka import REPO_ROOT

pytestmark = pytest.mark.spark

HANG_GUARD_S = 600


def test_init_then_run_mirrors_the_sample_into_the_created_item(
    dfs_server: DfsTestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_") and k not in OTHER_IDENTITY_VARIABLES
    }
    environment.update(managed_identity_environment(dfs_server))
    environment["CONNECTOR_LANDING_ZONE__CREDENTIAL"] = "managed_identity"
    environment["CONNECTOR_FABRIC_STATUS__BEARER_TOKEN"] = TOKEN
    for name in list(os.environ):
        if name.startswith("CONNECTOR_") or name in OTHER_IDENTITY_VARIABLES:
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    dfs_server.set_faults()

    def provision(workspace: str, item: str) -> None:
        with make_onelake_storage(dfs_server, f"{item}/Files/LandingZone", filesystem=workspace) as storage:
            storage.check(create_root=True, probe_write=False)

    config = tmp_path / "mirror.yaml"
    with FabricApiDouble(with_item=False) as fabric:
        fabric.on_created = provision
        args = ["init", "--workspace-id", WORKSPACE_ID, "--api-url", fabric.api_url, "--onelake-url", dfs_server.url]
        assert main([*args, "--name", "Sample mirror", "--write-config", str(config)]) == 0, capsys.readouterr().err
        item = fabric.item_named("Sample mirror")
        assert item is not None and item.status == "Running"
        environment["PYTHONPATH"] = str(REPO_ROOT)
        run = [
            *("run", "--config", str(config), "--trigger", "available-now", "--metrics-port", "0"),
            *("--checkpoint", str(tmp_path / "checkpoint"), "--source-path", str(SAMPLE_EVENTS)),
        ]
        result = subprocess.run(
            [sys.executable, "-m", "connector", *run],
            cwd=REPO_ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        assert fabric.calls("POST", "/getMirroringStatus"), "run checked the database at start"
    root = f"{item.id}/Files/LandingZone/"
    files = sorted(p[len(root) :] for p, d in dfs_server.paths(WORKSPACE_ID).items() if not d and p.startswith(root))
    data = [f for f in files if f.endswith("00000000000000000001.parquet")]
    assert "_partnerEvents.json" in files
    assert len(data) >= 2, files  # the sample's tables (customers, orders), each from file 1 on
    assert all(f.rsplit("/", 1)[0] + "/_metadata.json" in files for f in data), files
    assert not [f for f in files if f.rsplit("/", 1)[-1].startswith("_init_probe_")]
