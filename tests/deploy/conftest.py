"""Fixtures for the deployment tests: the required tools and a cached chart renderer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.tooling import CHART, Render, find_tool, run


@pytest.fixture(scope="session")
def helm() -> str:
    return find_tool("helm")


@pytest.fixture(scope="session")
def promtool() -> str:
    return find_tool("promtool")


@pytest.fixture(scope="session")
def hadolint() -> str:
    return find_tool("hadolint")


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
