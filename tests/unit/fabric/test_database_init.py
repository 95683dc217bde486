"""``connector init`` and ``check-config --online`` against the Fabric API double and the OneLake DFS double.

``init`` runs in-process as ``python -m connector init`` would (``cli.main``), with the landing zone reached through
azure-identity's managed identity code path and the Fabric API through a static bearer token: nothing in the
connector knows it is under test. Waits are real but short (the doubles answer ``Retry-After: 1``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from connector.commands.cli import main
from connector.fabric.database_init import STEP_DATABASE, explain
from connector.fabric.rest_api import FabricApiError
from tests.support.dfs_server import (
    OTHER_IDENTITY_VARIABLES,
    DfsTestServer,
    make_onelake_storage,
    managed_identity_environment,
)
from tests.support.fabric_api_double import TOKEN, WORKSPACE_ID, FabricApiDouble, MirroredItem

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
    assert "Delta change data feed off (enableDeltaChangeDataFeed)" in out
    assert "ok landing-zone: " in out and "create, append, flush, rename and delete" in out
    item.status = "Paused"
    assert main(["check-config", str(config), "--online"]) == 1
    [line] = error_lines(capsys.readouterr().err)
    assert f"error: mirroring: mirrored database {NAME!r} ({item.id}) is Paused" in line and "--start" in line


# ---- Microsoft's reference, as the double now follows it (see its docstring for the pages) ---------------------


def test_a_created_database_is_started_only_once_it_is_initialized(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """startMirroring while Initializing is a 400 (mirrored-database-rest-api): init waits, a line per wait."""
    fabric.initializing_reads = 2
    code, out, err = init(fabric, dfs_server, capsys)
    assert code == 0, err
    assert "(created, started)" in out
    assert err.count("wait until mirrored database") == 2 and "Initializing; next check in 1s" in err
    paths = [r.path.rsplit("/", 1)[-1] for r in fabric.requests if r.method == "POST"]
    start = paths.index("startMirroring")
    assert paths.count("startMirroring") == 1
    assert paths[:start].count("getMirroringStatus") == 3  # Initializing, Initializing, Initialized


def test_a_database_that_stays_initializing_ends_at_max_wait_without_a_start(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fabric.initializing_reads = 1000
    code, _, err = init(fabric, dfs_server, capsys, "--name", NAME, "--max-wait", "1")
    assert code == 2
    [line] = error_lines(err)
    assert line.startswith("error: mirroring: ") and "WaitExceeded" in line and "still Initializing" in line
    assert "raise --max-wait" in line
    assert not fabric.calls("POST", "/startMirroring")


def test_every_json_request_says_so(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fabric.lro_polls = 1
    assert init(fabric, dfs_server, capsys, "--name", NAME, "--delta-change-data-feed")[0] == 0
    with_body = [r for r in fabric.requests if r.body is not None]
    assert {r.path.rsplit("/", 1)[-1] for r in with_body} >= {"mirroredDatabases", "startMirroring"}
    assert {r.content_type for r in with_body} == {"application/json"}
    # The double refuses a JSON body that does not say what it is, as a reference-following service may.
    response = httpx.post(
        f"{fabric.api_url}/v1/workspaces/{WORKSPACE_ID}/mirroredDatabases",
        content=b'{"displayName": "x"}',
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert response.status_code == 415 and response.json()["errorCode"] == "UnsupportedMediaType"


def test_a_failed_operation_without_location_keeps_its_error(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fabric.lro_polls = 1
    fabric.lro_error = ("InvalidDefinition", "The mirroring definition is not valid for GenericMirror")
    code, _, err = init(fabric, dfs_server, capsys)
    assert code == 2
    [line] = error_lines(err)
    assert line.startswith("error: mirrored-database: create mirrored database")
    assert "InvalidDefinition: The mirroring definition is not valid for GenericMirror" in line
    assert "names no item id" not in line


@pytest.mark.parametrize("missing_code", ["EntityNotFound", "WorkspaceNotFound"])
def test_a_missing_workspace_names_the_workspace_whatever_its_code(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str], missing_code: str
) -> None:
    fabric.missing_workspace_code = missing_code
    wrong = "99999999-bbbb-cccc-dddd-e1e1e1e1e1e1"
    code = main(["init", "--workspace-id", wrong, "--api-url", fabric.api_url, "--name", NAME])
    [line] = error_lines(capsys.readouterr().err)
    assert code == 2
    assert f"HTTP 404 {missing_code}" in line and f"check --workspace-id: no workspace {wrong}" in line
    assert "--item-id" not in line


@pytest.mark.parametrize(
    ("code", "item_id", "fix"),
    [
        ("EntityNotFound", None, "check --workspace-id: no workspace W"),
        ("EntityNotFound", "I", "check --workspace-id and --item-id: workspace W or mirrored database I"),
        ("WorkspaceNotFound", "I", "check --workspace-id: no workspace W"),
        ("ItemNotFound", "I", "check --item-id I: no such mirrored database in workspace W"),
        ("MirroredDatabaseNotFound", "I", "check --item-id I: no such mirrored database"),
        ("OperationNotFound", None, "the long-running operation is gone"),
    ],
)
def test_each_not_found_code_names_what_it_concerns(code: str, item_id: str | None, fix: str) -> None:
    failure = explain(STEP_DATABASE, FabricApiError("read it", 404, code, "not found"), "W", item_id)
    assert failure.fix.startswith(fix)
    assert "None" not in failure.fix


def test_pages_are_followed_by_their_continuation_uri_as_given(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fabric.item_page_size = 1
    for n in range(3):
        item_id = f"c{n}c{n}c{n}c{n}-cccc-dddd-eeee-f2f2f2f2f2f2"
        fabric.items[(WORKSPACE_ID, item_id)] = MirroredItem(item_id, f"db {n}", status="Running")
        fabric.on_created = None
    provision_landing_zone(dfs_server, "c2c2c2c2-cccc-dddd-eeee-f2f2f2f2f2f2")
    code, out, err = init(fabric, dfs_server, capsys, "--name", "db 2")
    assert code == 0, err
    assert "'db 2' exists (c2c2c2c2-cccc-dddd-eeee-f2f2f2f2f2f2), reused" in err
    lists = [r for r in fabric.requests if r.method == "GET" and r.path.endswith("/mirroredDatabases")]
    assert len(lists) == 3
    assert [r.query for r in lists[1:]] == ["continuationToken=MDAwMQ%3D%3D", "continuationToken=MDAwMg%3D%3D"]
    assert not fabric.calls("POST", "/mirroredDatabases")


def provision_landing_zone(dfs_server: DfsTestServer, item: str) -> None:
    with make_onelake_storage(dfs_server, f"{item}/Files/LandingZone", filesystem=WORKSPACE_ID) as storage:
        storage.check(create_root=True, probe_write=False)


def change_data_feed_of(mirroring: dict[str, Any]) -> object:
    return mirroring["properties"]["target"]["typeProperties"].get("enableDeltaChangeDataFeed")


def test_delta_change_data_feed_in_the_definition_of_a_created_database(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = init(fabric, dfs_server, capsys, "--name", NAME, "--delta-change-data-feed")
    assert code == 0, err
    [create] = fabric.calls("POST", "/mirroredDatabases")
    [part] = create.body["definition"]["parts"] if create.body else []
    sent = json.loads(base64.b64decode(part["payload"]))
    assert change_data_feed_of(sent) is True
    assert sent["properties"]["target"]["typeProperties"]["defaultSchema"] == "dbo"
    assert not fabric.calls("POST", "/updateDefinition")
    code, out, err = init(fabric, dfs_server, capsys, "--name", NAME, "--delta-change-data-feed")
    assert code == 0, err
    assert "already there, nothing changed" in out and not fabric.calls("POST", "/updateDefinition")


def test_delta_change_data_feed_on_an_existing_database_once(
    fabric: FabricApiDouble, dfs_server: DfsTestServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert init(fabric, dfs_server, capsys)[0] == 0
    item = fabric.item_named(NAME)
    assert item is not None and change_data_feed_of(item.mirroring) is None
    code, out, err = init(fabric, dfs_server, capsys, "--name", NAME, "--delta-change-data-feed")
    assert code == 0, err
    assert "(Delta change data feed enabled)" in out
    [update] = fabric.calls("POST", "/updateDefinition")
    [part] = update.body["definition"]["parts"] if update.body else []
    assert (part["path"], part["payloadType"]) == ("mirroring.json", "InlineBase64")
    sent = json.loads(base64.b64decode(part["payload"]))
    assert change_data_feed_of(sent) is True
    assert sent["properties"]["source"] == {"type": "GenericMirror", "typeProperties": {}}
    assert sent["properties"]["target"]["typeProperties"]["format"] == "Delta"
    assert change_data_feed_of(item.mirroring) is True
    # A second run reads the definition and sends nothing.
    code, out, err = init(fabric, dfs_server, capsys, "--name", NAME, "--delta-change-data-feed")
    assert code == 0, err
    assert "already there, nothing changed" in out and "already set" in err
    assert len(fabric.calls("POST", "/updateDefinition")) == 1
    config = write_config(tmp_path, fabric, dfs_server, item.id)
    assert main(["check-config", str(config), "--online"]) == 0
    assert "Delta change data feed on (enableDeltaChangeDataFeed)" in capsys.readouterr().out
