"""``validate``, ``replay`` and ``verify`` open the landing zone as ``run`` does: the config's URL and identity.

An operator checks a pod's landing zone with the pod's own config (``--config``, or the ``CONNECTOR_*``
environment the chart sets); before, these tools took only a URL and always used the default Azure
identity, so a service-principal landing zone could not be read with the settings ``run`` uses.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from connector.kcat import kcat_line
from tests.support.kafka import REPO_ROOT
from tests.support.model import Workload

SAMPLE = REPO_ROOT / "connector" / "sample"
ONELAKE_URL = "https://onelake.dfs.fabric.microsoft.com/Sales/Inventory.MountedRelationalDatabase/Files/LandingZone"
HANG_GUARD_S = 300


def connector(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m connector ARGS`` with no connector or Azure settings but ``env``'s."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONNECTOR_", "AZURE_"))}
    return subprocess.run(
        [sys.executable, "-m", "connector", *args],
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )


@pytest.fixture(scope="module")
def landing_zone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A landing zone ``convert`` wrote from the packaged sample."""
    folder = tmp_path_factory.mktemp("tools") / "lz"
    result = connector("convert", "--input", str(SAMPLE), "--landing-zone", str(folder), cwd=folder.parent)
    assert result.returncode == 0, result.stderr
    return folder


def config_file(tmp_path: Path, url: str, credential: str = "default") -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"landing_zone:\n  url: {url}\n  credential: {credential}\n")
    return path


def test_validate_and_replay_read_the_configured_landing_zone(landing_zone: Path, tmp_path: Path) -> None:
    config = config_file(tmp_path, str(landing_zone))
    validated = connector("validate", "--config", str(config), cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.strip() == f"{landing_zone}: valid"
    replayed = connector("replay", "--config", str(config), "--output", str(tmp_path / "out"), cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert "public.customers:" in replayed.stdout
    assert any((tmp_path / "out").rglob("*.parquet"))


def test_validate_reads_the_landing_zone_from_the_environment(landing_zone: Path, tmp_path: Path) -> None:
    validated = connector("validate", cwd=tmp_path, env={"CONNECTOR_LANDING_ZONE__URL": str(landing_zone)})
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.strip() == f"{landing_zone}: valid"


def test_a_url_given_wins_over_the_config(landing_zone: Path, tmp_path: Path) -> None:
    config = config_file(tmp_path, str(tmp_path / "elsewhere"))
    validated = connector("validate", str(landing_zone), "--config", str(config), cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.strip() == f"{landing_zone}: valid"


@pytest.mark.parametrize(
    "command",
    [
        ["validate"],
        ["replay", "--output", "out"],
        ["verify", "--source", "postgresql://nobody@127.0.0.1:1/none"],
    ],
    ids=["validate", "replay", "verify"],
)
def test_the_configured_identity_is_the_one_used(command: list[str], tmp_path: Path) -> None:
    """A service principal without its tenant and client id is refused, naming what is missing.

    The default identity would have been built without complaint (it only fails on its first token), so
    the refusal shows the config's ``client_secret`` was the identity the tool took.
    """
    config = config_file(tmp_path, ONELAKE_URL, "client_secret")
    result = connector(*command, "--config", str(config), cwd=tmp_path)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert len(errors) == 1, result.stderr
    assert "client_secret" in errors[0], errors[0]
    assert "tenant_id" in errors[0] and "client_id" in errors[0], errors[0]


def test_the_credential_flag_wins_over_the_config(tmp_path: Path) -> None:
    config = config_file(tmp_path, ONELAKE_URL)
    result = connector("validate", "--config", str(config), "--credential", "client_certificate", cwd=tmp_path)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2, result.stderr
    assert len(errors) == 1 and "client_certificate" in errors[0], result.stderr


def test_replay_into_a_pipe_closed_early_ends_without_a_traceback(tmp_path: Path) -> None:
    """``replay --show N | head``: before, a BrokenPipeError traceback ended the output."""
    dump = tmp_path / "big.jsonl"
    dump.write_bytes(b"".join(kcat_line(r) for r in Workload("shop", partitions=1, seed=1).records(20_000)))
    assert connector("convert", "--input", str(dump), "--landing-zone", "lz", cwd=tmp_path).returncode == 0
    process = subprocess.Popen(
        [sys.executable, "-m", "connector", "replay", "lz", "--output", "out", "--show", "20000"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().startswith(b"public.customers: ")
    process.stdout.close()  # as `head -1` does
    err = process.stderr.read().decode()
    assert process.wait(timeout=HANG_GUARD_S) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
