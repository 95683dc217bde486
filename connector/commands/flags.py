"""Command-line flags → settings: one table, read by every command that loads settings.

A flag given wins over the environment and the YAML file (``connector.config.load_settings``); a flag left out
(``None``) leaves the setting to them.
"""

from __future__ import annotations

import argparse
from typing import Any

#: argparse destination → the dotted setting it overrides.
FLAG_SETTINGS: dict[str, str] = {
    "bootstrap_servers": "source.bootstrap_servers",
    "topics": "source.topics",
    "source_path": "source.path",
    "max_offsets_per_trigger": "source.max_offsets_per_trigger",
    "starting_offsets": "source.starting_offsets",
    "landing_zone": "landing_zone.url",
    "credential": "landing_zone.credential",
    "checkpoint": "checkpoint",
    "trigger": "trigger",
    "metrics_port": "metrics.port",
    "spark_master": "spark.master",
    "replay_safe_inserts": "mirror.replay_safe_inserts",
    "initial_load": "mirror.initial_load",
    "workspace_id": "fabric_status.workspace_id",
    "item_id": "fabric_status.mirrored_database_id",
    "api_url": "fabric_status.api_url",
}


def settings_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags of ``args`` give, by dotted name (flags a command does not have are skipped)."""
    overrides = {
        setting: getattr(args, dest) for dest, setting in FLAG_SETTINGS.items() if getattr(args, dest, None) is not None
    }
    if getattr(args, "decimal_columns", None):
        # ``--decimal-columns COLUMN=SPEC``, repeatable.
        overrides["mirror.decimal_columns"] = dict(item.partition("=")[::2] for item in args.decimal_columns)
    if getattr(args, "bootstrap_servers", None):
        overrides["source.kind"] = "kafka"  # brokers named on the command line mean a Kafka source
    return overrides
