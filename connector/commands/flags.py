"""Command-line flags that stand for settings or environment variables: one table, read by every command.

A flag given wins over the environment and the YAML file (``connector.config.load_settings``); a flag left out
(``None``) leaves the setting to them. Each entry names its flag, the dotted setting it overrides, its help and
its argparse options; the environment variable shown in ``--help`` is derived from the setting as
pydantic-settings reads it (prefix ``CONNECTOR_``, nested delimiter ``__``), so the two cannot disagree.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, get_args

from connector.storage import CredentialKind

_ENV_PREFIX = "CONNECTOR_"  # connector.config.settings.ConnectorSettings.model_config: env_prefix
_ENV_NESTED = "__"  # ... and env_nested_delimiter


@dataclass(frozen=True)
class Flag:
    """One flag: what it overrides, its help, and how argparse reads it.

    ``setting`` is the dotted setting the flag overrides; a flag with none (``init``'s own options) names its
    environment variable in ``environment`` instead, and the command reads that variable itself (``given``).
    """

    name: str
    help: str
    setting: str | None = None
    environment: str | None = None
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    env_form: str = ""
    """How the environment variable's value is written, when not as the flag's (`` as JSON``)."""
    to_setting: Callable[[Any], Any] | None = None
    """The setting's value from the flag's, when they differ."""

    @property
    def dest(self) -> str:
        """The argparse destination."""
        return self.name.removeprefix("--").replace("-", "_")

    @property
    def env(self) -> str:
        """The environment variable that sets the same as the flag."""
        if self.setting is None:
            return self.environment or ""
        return _ENV_PREFIX + self.setting.upper().replace(".", _ENV_NESTED)

    def add_to(self, parser: argparse.ArgumentParser, *, help: str | None = None, **options: Any) -> None:
        """Add the flag to ``parser``; ``help`` replaces the table's text (and its ``(env: ...)``) when given."""
        text = help if help is not None else f"{self.help} (env: {self.env}{self.env_form})"
        parser.add_argument(self.name, help=text, **{**self.options, **options})


def _decimal_columns(items: list[str]) -> dict[str, str]:
    """``--decimal-columns COLUMN=SPEC``, repeatable, as the setting's mapping."""
    return dict(item.partition("=")[::2] for item in items)


FLAGS: Mapping[str, Flag] = MappingProxyType(
    {
        flag.name: flag
        for flag in (
            Flag("--bootstrap-servers", "Kafka bootstrap servers", "source.bootstrap_servers"),
            Flag("--topics", "topic regex (subscribePattern)", "source.topics"),
            Flag("--source-path", "folder of kcat -J dumps: the embedded default source, no Kafka", "source.path"),
            Flag(
                "--max-offsets-per-trigger",
                "records per micro-batch at most",
                "source.max_offsets_per_trigger",
                options={"type": int},
            ),
            Flag("--starting-offsets", "earliest (default) or latest", "source.starting_offsets"),
            Flag("--landing-zone", "folder or OneLake URL", "landing_zone.url"),
            Flag(
                "--credential",
                "Azure identity for a OneLake landing zone (default: the config's)",
                "landing_zone.credential",
                options={"choices": get_args(CredentialKind)},
            ),
            Flag("--checkpoint", "checkpoint + ledger folder", "checkpoint"),
            Flag("--trigger", "'available-now' or an interval like 10s", "trigger"),
            Flag("--metrics-port", "Prometheus port, 0 = off", "metrics.port", options={"type": int}),
            Flag("--spark-master", "Spark master", "spark.master"),
            Flag(
                "--decimal-columns",
                "write a column as decimal(P,S), P <= 38 (a decimal sent as a string, a numeric without precision, "
                "a decimal over 38 digits); repeatable",
                "mirror.decimal_columns",
                options={"action": "append", "metavar": "SCHEMA.TABLE.COLUMN=P,S"},
                env_form=" as JSON",
                to_setting=_decimal_columns,
            ),
            Flag(
                "--replay-safe-inserts",
                "write creates/snapshot reads as upserts (4), the default; --no-replay-safe-inserts writes inserts (0)",
                "mirror.replay_safe_inserts",
                options={"action": argparse.BooleanOptionalAction, "default": None},
            ),
            Flag(
                "--initial-load",
                "a table's initial-snapshot files: without __rowMarker__ (marker-free, the default: Fabric's fast "
                "path) or with it as upserts (upsert)",
                "mirror.initial_load",
                options={"choices": ("marker-free", "upsert"), "default": None},
            ),
            Flag("--workspace-id", "the Fabric workspace (GUID)", "fabric_status.workspace_id"),
            Flag("--item-id", "an existing mirrored database's id", "fabric_status.mirrored_database_id"),
            Flag("--api-url", "Fabric REST API base URL", "fabric_status.api_url"),
            # init's own options: no setting, an environment variable of their own.
            Flag("--name", "display name: found, or created", environment="CONNECTOR_INIT_NAME"),
            Flag(
                "--onelake-url",
                "OneLake DFS endpoint (default https://onelake.dfs.fabric.microsoft.com)",
                environment="CONNECTOR_INIT_ONELAKE_URL",
            ),
            Flag(
                "--max-wait",
                "bound of all waits for Fabric (default 600)",
                environment="CONNECTOR_INIT_MAX_WAIT_S",
                options={"type": float, "metavar": "SECONDS"},
            ),
            Flag(
                "--write-config",
                "write landing_zone.url and fabric_status into this YAML",
                environment="CONNECTOR_INIT_WRITE_CONFIG",
                options={"metavar": "FILE"},
            ),
        )
    }
)
"""Every flag that stands for a setting or an environment variable, by name."""


def add_flags(parser: argparse.ArgumentParser, *names: str) -> None:
    """Add the table's flags ``names`` to ``parser``, in that order, with the table's help."""
    for name in names:
        FLAGS[name].add_to(parser)


def given(args: argparse.Namespace, name: str) -> Any:
    """The value of a flag without a setting: the flag's, else its environment variable's (``None``: neither)."""
    flag = FLAGS[name]
    return getattr(args, flag.dest) or os.environ.get(flag.env)


def settings_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags of ``args`` give, by dotted name (flags a command does not have are skipped)."""
    overrides: dict[str, Any] = {}
    for flag in FLAGS.values():
        value = getattr(args, flag.dest, None)
        if flag.setting is not None and value is not None:
            overrides[flag.setting] = flag.to_setting(value) if flag.to_setting else value
    if getattr(args, "bootstrap_servers", None):
        overrides["source.kind"] = "kafka"  # brokers named on the command line mean a Kafka source
    return overrides
