"""Typed, frozen configuration: YAML file, then ``CONNECTOR_*`` environment variables, then flags.

Nested keys use ``__`` in environment variables (``CONNECTOR_SOURCE__BOOTSTRAP_SERVERS``). Secrets are
never written in the YAML: a Kafka option may reference one as ``${env:NAME}`` or ``${file:/path}``,
resolved only when the Kafka source is built, and shown as ``***`` everywhere else.

The sections live one module each (``mirror``, ``source``, ``destination``); ``settings`` joins and loads them.
"""

from connector.config.destination import (
    FabricStatusSettings,
    LandingZoneSettings,
    MetricsSettings,
    SparkSettings,
    spark_interval,
)
from connector.config.mirror import MirrorSettings, RebuildSettings, SchemaChangeSettings, TableSettings
from connector.config.settings import ConnectorSettings, load_settings
from connector.config.source import DeadLetterSettings, SchemaRegistrySettings, SourceSettings

__all__ = [
    "ConnectorSettings",
    "DeadLetterSettings",
    "FabricStatusSettings",
    "LandingZoneSettings",
    "MetricsSettings",
    "MirrorSettings",
    "RebuildSettings",
    "SchemaChangeSettings",
    "SchemaRegistrySettings",
    "SourceSettings",
    "SparkSettings",
    "TableSettings",
    "load_settings",
    "spark_interval",
]
