"""docs/configuration.md is the page docs/gen_config_reference.py renders from the committed settings schema."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_reference", REPO / "docs" / "gen_config_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_current() -> None:
    gen = generator()
    page = gen.render(json.loads(gen.SCHEMA.read_text()))
    assert (REPO / "docs" / "configuration.md").read_text() == page, (
        "docs/configuration.md is stale: run .venv/bin/python docs/gen_config_reference.py"
    )


def test_every_setting_has_its_variable() -> None:
    page = (REPO / "docs" / "configuration.md").read_text()
    for name, variable in [
        ("checkpoint", "CONNECTOR_CHECKPOINT"),
        ("source.bootstrap_servers", "CONNECTOR_SOURCE__BOOTSTRAP_SERVERS"),
        ("source.schema_registry.url", "CONNECTOR_SOURCE__SCHEMA_REGISTRY__URL"),
        ("mirror.rebuild.wait_s", "CONNECTOR_MIRROR__REBUILD__WAIT_S"),
        ("landing_zone.credential.client_id", "CONNECTOR_LANDING_ZONE__CREDENTIAL__CLIENT_ID"),
    ]:
        assert f"### `{name}`\n\n- type: " in page, name
        assert f"- environment: `{variable}`" in page, variable
