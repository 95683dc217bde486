"""``connector init`` and ``check-config --online`` against the Fabric API double and the OneLake DFS double.

``init`` runs in-process as ``python -m connector init`` would (``cli.main``), with the landing zone reached through
azure-identity's managed identity code path and the Fabric API through a static bearer token: nothing in the
connector knows it is under test. Waits are real but short (the doubles answer ``Retry-After: 1``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from connector.commands.cli import main
from tests.support.dfs_server import (
    OTHER_IDENTITY_VARIABLES,
    DfsTestServer,
    make_onelake_storage,
    managed_identity_environment,
)
from tests.support.fabric_api_double import TOKEN, WORKSPACE_ID, FabricApiDouble

NAME = "Sales mirror"


@pytest.fixture
def fabric(dfs_server: DfsTestServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[FabricApiDouble]:
    """An empty workspace whose created items get their OneLake ``Files/LandingZone``, as Fabric makes it."""
    import os

    for name in list(os.environ):
        if name.startswith("CONNECTOR_") or name in OTHER_IDENTITY_VARIABLES:
            monkeypatch.delenv(name)
    for name, value in managed_identity_environment(dfs_server).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CONNECTOR_LANDING_ZONE__CREDENTIAL", "managed_identity")
    monkeypatch.setenv("CONNECTOR_FABRIC_STATUS__BEARER_TOKEN", TOKEN)
    dfs_server.set_faults()

    def provision(workspace: str, item: str) -> None:
        with make_onelake_storage(dfs_server, f"{item}/Files/LandingZone", filesystem=workspace) as storage:
            storage.check(create_root=True, probe_write=False)

    with FabricApiDouble(with_item=False) as double:
        double.on_created = provision
        yield double


def init(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, str]:
    """``python -m connector init`` in this process: (exit code, stdout, stderr)."""
    args = ["init", "--workspace-id", WORKSPACE_ID, "--api-url", fabric.api_url, "--onelake-url", dfs_server.url]
    code = main([*args, *(extra or ("--name", NAME))])
    out, err = capsys.readouterr()
    return code, out, err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def landing_files(dfs_server: DfsTestServer, item: str) -> dict[str, bytes | None]:
    root = f"{item}/Files/LandingZone"
    return {
        p: dfs_server.file_bytes(WORKSPACE_ID, p)
        for p, d in dfs_server.paths(WORKSPACE_ID).items()
        if not d and p.startswith(root)
    }


def test_init_creates_starts_and_prints_what_run_needs(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fabric.lro_polls = 1  # 202 + Location + Retry-After, one Running state, then Succeeded + result
    fabric.throttle_next = 1  # the first call is throttled: 429 + Retry-After
    fabric.starting_reads = 1  # Starting once after startMirroring, then Running
    config = tmp_path / "mirror.yaml"
    config.write_text("mirror:\n  toast_policy: keep-last\n")
    code, out, err = init(fabric, dfs_server, capsys, "--name", NAME, "--write-config", str(config))
    assert code == 0, err
    item = fabric.item_named(NAME)
    assert item is not None and item.status == "Running"
    assert item.mirroring["properties"]["source"]["type"] == "GenericMirror"
    url = f"{dfs_server.url}/{WORKSPACE_ID}/{item.id}/Files/LandingZone"
    assert f"landing_zone.url: {url}" in out and f"fabric_status.mirrored_database_id: {item.id}" in out
    assert "(created, started)" in out
    # Each wait said what it waited for, and for how long at most.
    assert "throttled (HTTP 429); next check in 1s" in err
    assert "Running 50%; next check in 1s" in err
    assert "Starting; next check in" in err
    files = landing_files(dfs_server, item.id)
    assert list(files) == [f"{item.id}/Files/LandingZone/_partnerEvents.json"]  # the scratch file is gone
    written = yaml.safe_load(config.read_text())
    assert written["landing_zone"]["url"] == url
    assert written["fabric_status"] == {
        "kind": "rest",
        "workspace_id": WORKSPACE_ID,
        "mirrored_database_id": item.id,
        "api_url": fabric.api_url,
    }
    assert written["mirror"] == {"toast_policy": "keep-last"}
    assert TOKEN not in out + err


def test_a_second_init_changes_nothing(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert init(fabric, dfs_server, capsys)[0] == 0
    item = fabric.item_named(NAME)
    assert item is not None
    before = landing_files(dfs_server, item.id)
    creates, starts = len(fabric.calls("POST", "/mirroredDatabases")), len(fabric.calls("POST", "/startMirroring"))
    code, out, err = init(fabric, dfs_server, capsys)
    assert code == 0, err
    assert "already there, nothing changed" in out
    assert len(fabric.calls("POST", "/mirroredDatabases")) == creates == 1
    assert len(fabric.calls("POST", "/startMirroring")) == starts == 1
    assert len([i for i in fabric.items.values() if i.display_name == NAME]) == 1
    assert landing_files(dfs_server, item.id) == before


@pytest.mark.parametrize(("role", "code_shown"), [("Viewer", "InsufficientPrivileges"), (None, "HTTP 403")])
def test_a_missing_role_is_one_line(
    fabric: FabricApiDouble,
    dfs_server: DfsTestServer,
    capsys: pytest.CaptureFixture[str],
    role: str | None,
    code_shown: str,
) -> None:
    fabric.roles[WORKSPACE_ID] = role
    code, out, err = init(fabric, dfs_server, capsys)
    assert code == 2
    [line] = error_lines(err)
    assert line.startswith("error: mirrored-database: ") and code_shown in line
    assert f"give the connector's identity the Contributor role (or higher) on workspace {WORKSPACE_ID}" in line
    assert "Traceback" not in err and TOKEN not in out + err
    assert not fabric.items


def test_a_wrong_workspace_is_one_line(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = "99999999-bbbb-cccc-dddd-e1e1e1e1e1e1"
    code = main(["init", "--workspace-id", wrong, "--api-url", fabric.api_url, "--name", NAME])
    err = capsys.readouterr().err
    assert code == 2
    [line] = error_lines(err)
    assert "HTTP 404 WorkspaceNotFound" in line and f"check --workspace-id: no workspace {wrong}" in line


def test_a_wrong_item_id_is_one_line(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = init(fabric, dfs_server, capsys, "--item-id", "00000000-0000-0000-0000-000000000000")
    assert code == 2
    [line] = error_lines(err)
    assert "HTTP 404 ItemNotFound" in line and "check --item-id 00000000-0000-0000-0000-000000000000" in line


def test_a_stopped_database_is_one_line_and_started_only_when_asked(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert init(fabric, dfs_server, capsys)[0] == 0
    item = fabric.item_named(NAME)
    assert item is not None
    item.status = "Stopped"
    code, _, err = init(fabric, dfs_server, capsys)
    assert code == 2
    [line] = error_lines(err)
    assert f"error: mirroring: mirrored database {item.id} is Stopped" in line and "--start" in line
    assert item.status == "Stopped"
    code, out, err = init(fabric, dfs_server, capsys, "--name", NAME, "--start")
    assert code == 0, err
    assert item.status == "Running" and "(started)" in out


def test_a_wrong_token_is_one_line_without_the_token(
    fabric: FabricApiDouble,
    dfs_server: DfsTestServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONNECTOR_FABRIC_STATUS__BEARER_TOKEN", "secret-but-wrong-token")
    code, out, err = init(fabric, dfs_server, capsys)
    assert code == 2
    [line] = error_lines(err)
    assert "HTTP 401 TokenExpired" in line and "fabric_status.credential or fabric_status.bearer_token" in line
    assert "secret-but-wrong-token" not in out + err


def test_a_landing_zone_the_identity_may_not_write_is_one_line(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    provision = fabric.on_created
    assert provision is not None

    def provision_read_only(workspace: str, item: str) -> None:
        provision(workspace, item)
        dfs_server.set_faults(deny_all=True, operations=frozenset({"create", "append", "flush", "rename"}))

    fabric.on_created = provision_read_only
    try:
        code, _, err = init(fabric, dfs_server, capsys)
    finally:
        dfs_server.set_faults()
    assert code == 2
    [line] = error_lines(err)
    assert line.startswith("error: landing-zone: ") and "refused a write" in line and "Contributor" in line


def write_config(tmp_path: Path, fabric: FabricApiDouble, dfs_server: DfsTestServer, item_id: str) -> Path:
    config = tmp_path / "connector.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "landing_zone": {
                    "url": f"{dfs_server.url}/{WORKSPACE_ID}/{item_id}/Files/LandingZone",
                    "credential": "managed_identity",
                },
                "fabric_status": {
                    "kind": "rest",
                    "api_url": fabric.api_url,
                    "workspace_id": WORKSPACE_ID,
                    "mirrored_database_id": item_id,
                },
            }
        )
    )
    return config


def test_check_config_online_passes_each_step_then_names_the_stopped_database(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert init(fabric, dfs_server, capsys)[0] == 0
    item = fabric.item_named(NAME)
    assert item is not None
    config = write_config(tmp_path, fabric, dfs_server, item.id)
    assert main(["check-config", str(config), "--online"]) == 0
    out = capsys.readouterr().out
    assert f"ok mirroring: mirrored database {NAME!r} ({item.id}) is Running" in out
    assert "ok landing-zone: " in out and "create, append, flush, rename and delete" in out
    item.status = "Paused"
    assert main(["check-config", str(config), "--online"]) == 1
    [line] = error_lines(capsys.readouterr().err)
    assert f"error: mirroring: mirrored database {NAME!r} ({item.id}) is Paused" in line and "--start" in line
