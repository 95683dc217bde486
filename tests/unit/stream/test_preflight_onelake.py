"""``run`` proves a OneLake landing zone before Spark starts: a wrong URL or identity is one ``error:`` line.

Without the check, a typo in the folder part of the URL was not an error at all: the writer lease and the
first batch created the misspelt folder (ADLS creates parent folders), and the connector published the
mirror where the mirroring service never looks. A wrong workspace or a read-only identity surfaced only
after Spark had started. Each case runs ``python -m connector run`` as an operator does, against the DFS
test double reached through azure-identity's managed identity code path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector.spark.source import SAMPLE_EVENTS
from tests.support.dfs_server import OTHER_IDENTITY_VARIABLES, DfsTestServer, managed_identity_environment
from tests.support.kafka import REPO_ROOT
from tests.support.landing import WORKSPACE, unique_item_root

# The check takes about a second; a regression that starts Spark instead would take far longer.
HANG_GUARD_S = 300


def run(
    server: DfsTestServer, landing_zone: str, tmp_path: Path, credential: str = "managed_identity"
) -> tuple[int, list[str], str]:
    """``python -m connector run`` of the packaged sample into ``landing_zone``; (exit code, error lines, stderr).

    The sample's folder is named as ``--source-path``: left implicit, it is refused for a OneLake landing zone.
    """
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_") and k not in OTHER_IDENTITY_VARIABLES
    }
    environment.update(managed_identity_environment(server))
    environment["CONNECTOR_LANDING_ZONE__CREDENTIAL"] = credential
    environment["PYTHONPATH"] = str(REPO_ROOT)
    args = [
        "run",
        "--trigger",
        "available-now",
        "--metrics-port",
        "0",
        "--landing-zone",
        landing_zone,
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--source-path",
        str(SAMPLE_EVENTS),
    ]
    result = subprocess.run(
        [sys.executable, "-m", "connector", *args],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    return result.returncode, errors, result.stderr


def assert_refused_before_spark(outcome: tuple[int, list[str], str], *named: str) -> str:
    code, errors, stderr = outcome
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "SparkContext" not in stderr and "log4j" not in stderr, stderr[-3000:]  # no JVM was started
    assert code == 2, stderr[-3000:]
    assert len(errors) == 1, stderr[-3000:]
    for text in named:
        assert text in errors[0], errors[0]
    return errors[0]


@pytest.fixture
def item(dfs_server: DfsTestServer) -> Iterator[str]:
    """A mirrored database item whose ``Files/LandingZone`` exists (as Fabric creates it)."""
    root = unique_item_root()
    dfs_server.create_filesystem(WORKSPACE)
    dfs_server.set_faults()
    yield root.split("/", 1)[0]
    dfs_server.set_faults()


def make_landing_zone(server: DfsTestServer, item: str) -> None:
    from tests.support.dfs_server import make_onelake_storage

    with make_onelake_storage(server, f"{item}/Files/LandingZone") as storage:
        storage.create("_partnerEvents.json", b"{}")


def test_a_misspelt_landing_zone_folder_is_refused_and_not_created(
    dfs_server: DfsTestServer, item: str, tmp_path: Path
) -> None:
    make_landing_zone(dfs_server, item)
    url = dfs_server.location_url(WORKSPACE, f"{item}/Files/LandigZone")
    line = assert_refused_before_spark(run(dfs_server, url, tmp_path), "landing_zone.url", url, "not found")
    assert "Check the URL" in line
    assert not [p for p in dfs_server.paths(WORKSPACE) if "LandigZone" in p]


def test_a_missing_workspace_is_refused(dfs_server: DfsTestServer, item: str, tmp_path: Path) -> None:
    url = dfs_server.location_url("no-such-workspace", f"{item}/Files/LandingZone")
    assert_refused_before_spark(run(dfs_server, url, tmp_path), "landing_zone.url", url, "not found")


def test_an_identity_without_access_is_refused(dfs_server: DfsTestServer, item: str, tmp_path: Path) -> None:
    make_landing_zone(dfs_server, item)
    url = dfs_server.location_url(WORKSPACE, f"{item}/Files/LandingZone")
    dfs_server.set_faults(deny_all=True)
    line = assert_refused_before_spark(run(dfs_server, url, tmp_path), "landing_zone.url", url, "access denied")
    assert "managed_identity" in line


def test_a_read_only_identity_is_refused(dfs_server: DfsTestServer, item: str, tmp_path: Path) -> None:
    """A Viewer may list the landing zone but not write to it: caught by a write probe, not the first batch."""
    make_landing_zone(dfs_server, item)
    url = dfs_server.location_url(WORKSPACE, f"{item}/Files/LandingZone")
    dfs_server.set_faults(deny_all=True, operations=frozenset({"create", "rename", "append", "flush", "lease"}))
    assert_refused_before_spark(run(dfs_server, url, tmp_path), "landing_zone.url", url, "access denied")


def test_incomplete_credential_settings_are_one_line(dfs_server: DfsTestServer, item: str, tmp_path: Path) -> None:
    """client_secret without tenant and client id used to end in a ValueError traceback when the job opened storage."""
    make_landing_zone(dfs_server, item)
    url = dfs_server.location_url(WORKSPACE, f"{item}/Files/LandingZone")
    line = assert_refused_before_spark(
        run(dfs_server, url, tmp_path, credential="client_secret"), "landing_zone.credential", "tenant_id"
    )
    assert "client_secret" in line
