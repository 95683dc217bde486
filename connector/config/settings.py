"""The whole configuration: one frozen ``ConnectorSettings`` of the sections, and how it is loaded.

YAML file, then ``CONNECTOR_*`` environment variables, then flags.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Self

from pydantic import Field, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from connector.config.base import without_derived
from connector.config.destination import (
    FabricStatusSettings,
    LandingZoneSettings,
    MetricsSettings,
    SparkSettings,
    spark_interval,
)
from connector.config.mirror import MirrorSettings
from connector.config.source import DeadLetterSettings, SourceSettings
from connector.errors import ConfigError
from connector.storage.location import StorageLocation


class ConnectorSettings(BaseSettings):
    """The whole service configuration."""

    model_config = SettingsConfigDict(
        env_prefix="CONNECTOR_", env_nested_delimiter="__", frozen=True, extra="forbid", yaml_file=None
    )

    source: SourceSettings = Field(default_factory=SourceSettings)
    landing_zone: LandingZoneSettings = Field(default_factory=LandingZoneSettings)
    checkpoint: str = Field("./checkpoint", description="Spark checkpoint and connector ledger folder.")
    trigger: str = Field("10s", description="'available-now' or a processing interval like '10s'.")
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    mirror: MirrorSettings = Field(default_factory=MirrorSettings)
    dead_letter: DeadLetterSettings = Field(default_factory=DeadLetterSettings)
    fabric_status: FabricStatusSettings = Field(default_factory=FabricStatusSettings)

    @cached_property
    def checkpoint_location(self) -> StorageLocation:
        """The checkpoint folder (ledger, Spark's checkpoint) as one value, checked when first used, then carried."""
        return StorageLocation(self.checkpoint, setting="checkpoint")

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy, ``update`` applied, whose derived values (``checkpoint_location``) follow its own fields."""
        return without_derived(super().model_copy(update=update, deep=deep))

    @field_validator("trigger")
    @classmethod
    def _check_trigger(cls, value: str) -> str:
        if value != "available-now":
            try:
                spark_interval(value)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (init) win over the environment, which wins over the YAML file."""
        yaml_file = os.environ.get("_CONNECTOR_CONFIG_FILE")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if yaml_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)


def load_settings(config_file: str | None = None, **overrides: Any) -> ConnectorSettings:
    """Build the configuration from a YAML file, the environment and flag overrides.

    Raises:
        ConfigError: with one line per invalid key.
    """
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    previous = os.environ.pop("_CONNECTOR_CONFIG_FILE", None)
    if config_file:
        _check_yaml_file(config_file)
        os.environ["_CONNECTOR_CONFIG_FILE"] = config_file
    try:
        return ConnectorSettings(**_nest(overrides))
    except ValidationError as exc:
        lines = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        msg = "invalid configuration:\n  " + "\n  ".join(lines)
        raise ConfigError(msg) from None
    except SettingsError as exc:
        raise ConfigError(_environment_problem(exc)) from None
    finally:
        os.environ.pop("_CONNECTOR_CONFIG_FILE", None)
        if previous is not None:
            os.environ["_CONNECTOR_CONFIG_FILE"] = previous


def _check_yaml_file(config_file: str) -> None:
    """Refuse a config file that is missing, unreadable, not YAML, or not a mapping of settings.

    pydantic-settings would raise the YAML parser's own exception (or a ``dict()`` ``ValueError`` for a
    list), which names neither the file nor the setting; the operator gets one line naming both instead.
    """
    import yaml

    path = Path(config_file)
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        msg = f"config file {config_file} {what}"
        raise ConfigError(msg)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        msg = f"config file {config_file} cannot be read: {reason}"
        raise ConfigError(msg) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        msg = f"config file {config_file} is not valid YAML{where}: {problem}"
        raise ConfigError(msg) from None
    if data is not None and not isinstance(data, dict):
        msg = (
            f"config file {config_file} must be a mapping of settings (source:, landing_zone:, ...), "
            f"found a YAML {type(data).__name__}"
        )
        raise ConfigError(msg)


def _environment_problem(exc: Exception) -> str:
    """Name the ``CONNECTOR_*`` variable whose value pydantic-settings could not parse as JSON.

    Its ``SettingsError`` names only the top-level field; the JSON error it wraps holds the raw value, which
    finds the variable. The value itself is never repeated: it may hold a secret.
    """
    cause = exc.__cause__
    raw = getattr(cause, "doc", None)
    names = sorted(k for k, v in os.environ.items() if k.upper().startswith("CONNECTOR_") and v == raw)
    if names and isinstance(cause, json.JSONDecodeError):
        return (
            f"environment variable {names[0]} is not valid JSON at line {cause.lineno}, column {cause.colno}: "
            f"{cause.msg}"
        )
    return f"a CONNECTOR_* environment variable cannot be parsed: {exc}"


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{'source.topics': x}`` → ``{'source': {'topics': x}}``; ``None`` values are dropped."""
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        if value is None:
            continue
        parts = dotted.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out
