"""``check-config``: a YAML config against ``schemas/connector-config.schema.json``, with readable errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from connector.config import ConnectorSettings

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schemas" / "connector-config.schema.json"


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema of the configuration, generated from the typed settings."""
    schema = ConnectorSettings.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "debezium-fabric-mirror connector configuration"
    return schema


def check_config_file(path: str) -> list[str]:
    """Problems of the file at ``path``, one line each (``where: what``); empty when valid."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        return [f"{path}: cannot be read: {exc.strerror}"]
    except yaml.YAMLError as exc:
        return [f"{path}: not valid YAML: {exc}"]
    if data is None:
        data = {}
    schema = json.loads(SCHEMA_FILE.read_text())
    problems = []
    for error in sorted(Draft202012Validator(schema).iter_errors(data), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        problems.append(f"{path}: {where}: {error.message}")
    return problems
