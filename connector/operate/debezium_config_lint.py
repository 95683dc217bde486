"""Lint a Debezium connector's config (read from Kafka Connect) for settings that lose data; ``check-source``'s core.

Debezium's defaults are chosen for general consumers, not for an exact mirror: ``BIGINT UNSIGNED`` is a
signed ``long`` (values above 2^63-1 wrap to negative), ``TRUNCATE`` is skipped (``skipped.operations=t``,
the mirror keeps rows the source no longer has), decimals may be doubles. Every one of these loses data
silently, long before the mirror runs, and no later check can repair it. So this preflight reads the
connector's config through the Connect REST API (``GET /connectors/NAME/config``) and names each setting
with its consequence. Settings the connector does not set are judged by Debezium's documented default,
except converters: the worker's defaults are not visible through the REST API, so only a converter set
on the connector is judged.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from connector.errors import ConnectorError
from connector.events import Op
from connector.operate.connect_rest import get_json

#: Converters whose output the connector decodes (JSON with or without schemas; Avro in the Confluent wire format).
READABLE_CONVERTERS = frozenset(
    {
        "org.apache.kafka.connect.json.JsonConverter",
        "io.confluent.connect.avro.AvroConverter",
        "io.apicurio.registry.utils.converter.AvroConverter",
    }
)
# Debezium's documented defaults for the settings judged here (Debezium 2.x/3.x).
_DEFAULTS = {
    "decimal.handling.mode": "precise",
    "bigint.unsigned.handling.mode": "long",
    "skipped.operations": "t",
    "time.precision.mode": "adaptive",
    "tombstones.on.delete": "true",
    "include.schema.changes": "true",
}
# The MySQL and MariaDB connectors default to microsecond times (their TIME is a duration, not a time of day).
_MYSQL_DEFAULTS = {"time.precision.mode": "adaptive_time_microseconds"}
_MYSQL_CLASSES = ("io.debezium.connector.mysql.", "io.debezium.connector.mariadb.")
_UNWRAP = "io.debezium.transforms.ExtractNewRecordState"

# warn(setting, value, consequence)
_Warn = Callable[[str, str, str], None]


@dataclass(frozen=True)
class Finding:
    """One lossy or incompatible setting of one connector, and what it does to the mirror."""

    connector: str
    setting: str
    value: str
    consequence: str

    def line(self) -> str:
        """The line the CLI prints."""
        return f"WARNING {self.connector}: {self.setting}={self.value}: {self.consequence}"


def database_kind(connector_class: str) -> str:
    """``postgres``, ``mysql`` (MySQL and MariaDB), ``sqlserver``, ``oracle`` or ``other``."""
    if connector_class.startswith(_MYSQL_CLASSES):
        return "mysql"
    for kind in ("postgresql", "sqlserver", "oracle"):
        if connector_class.startswith(f"io.debezium.connector.{kind}."):
            return "postgres" if kind == "postgresql" else kind
    return "other"


def lint_debezium_config(
    name: str, config: Mapping[str, str], truncate_policy: str = "rebuild", *, rebuilds: bool = False
) -> list[Finding]:
    """The findings for one connector's config.

    ``truncate_policy`` is the mirror's ``mirror.truncate_policy``; ``rebuilds`` whether it asks Debezium for
    snapshots by itself (``MirrorSettings.asks_for_snapshots``: rebuilds and refreshes after a stop, a schema change
    or lost records, on by default), which needs Debezium's Kafka signal channel.
    """
    kind = database_kind(config.get("connector.class", ""))
    findings: list[Finding] = []

    defaults = {**_DEFAULTS, **(_MYSQL_DEFAULTS if kind == "mysql" else {})}

    def setting(key: str) -> str:
        return str(config.get(key, defaults.get(key, ""))).strip()

    def warn(key: str, value: str, consequence: str) -> None:
        shown = value if key in config else f"{value} (Debezium's default)"
        findings.append(Finding(name, key, shown, consequence))

    decimal_mode = setting("decimal.handling.mode").lower()
    if decimal_mode == "double":
        warn(
            "decimal.handling.mode",
            decimal_mode,
            "DECIMAL/NUMERIC values arrive as doubles: digits beyond 15-17 significant ones are rounded away, so "
            "the mirror differs from the source; use precise (or string)",
        )
    if kind == "mysql" and setting("include.schema.changes").lower() == "false":
        warn(
            "include.schema.changes",
            "false",
            "the DDL never reaches Kafka: a table altered (ADD COLUMN ... DEFAULT) and not changed again keeps the "
            "old columns in the mirror; use true and add the schema change topic (topic.prefix) to source.topics",
        )
    if kind == "mysql":
        unsigned_mode = setting("bigint.unsigned.handling.mode").lower()
        if unsigned_mode == "long":
            warn(
                "bigint.unsigned.handling.mode",
                unsigned_mode,
                "BIGINT UNSIGNED values above 9223372036854775807 wrap to negative numbers in the mirror; use precise",
            )
    _lint_skipped_operations(setting("skipped.operations"), truncate_policy, warn)
    _lint_time_precision(kind, setting("time.precision.mode").lower(), warn)
    _lint_converters(config, warn)
    _lint_deletes(config, setting("tombstones.on.delete").lower(), warn)
    if rebuilds:
        _lint_signals(config, warn)
    return findings


def _lint_skipped_operations(value: str, truncate_policy: str, warn: _Warn) -> None:
    skipped = {op.strip().lower() for op in value.split(",") if op.strip()}
    if Op.TRUNCATE in skipped and truncate_policy != "ignore":
        warn(
            "skipped.operations",
            value,
            f"TRUNCATE never reaches Kafka, so mirror.truncate_policy '{truncate_policy}' never runs and the mirror "
            "keeps every truncated row; use none (or a list without t)",
        )
    skipped_changes = sorted(skipped & {Op.CREATE, Op.UPDATE, Op.DELETE})
    if skipped_changes:
        warn(
            "skipped.operations",
            value,
            f"operations {','.join(skipped_changes)} never reach Kafka: the mirror misses those row changes",
        )


def _lint_converters(config: Mapping[str, str], warn: _Warn) -> None:
    for side in ("key", "value"):
        converter = config.get(f"{side}.converter")
        if converter and converter not in READABLE_CONVERTERS:
            warn(
                f"{side}.converter",
                converter,
                "the connector cannot read this converter's records (it reads "
                "JsonConverter and the Avro converters in the Confluent wire format): every record of these "
                "topics would be a poison record",
            )
        if converter == "org.apache.kafka.connect.json.JsonConverter":
            schemas = str(config.get(f"{side}.converter.schemas.enable", "true")).lower()
            if schemas == "false":
                warn(
                    f"{side}.converter.schemas.enable",
                    schemas,
                    "without schemas the column types are guessed from values: decimals, dates, times and "
                    "timestamps arrive as plain numbers or text; use true",
                )


def _lint_signals(config: Mapping[str, str], warn: _Warn) -> None:
    channels = {c.strip().lower() for c in str(config.get("signal.enabled.channels", "source")).split(",")}
    if "kafka" not in channels:
        warn(
            "signal.enabled.channels",
            str(config.get("signal.enabled.channels", "source")),
            "a table rebuild asks for an incremental snapshot through the Kafka signal channel, which is off: "
            "rebuilds and refreshes (schema changes, lost records, mirror.on_table_stopped rebuild) would wait "
            "forever; add kafka (and signal.kafka.topic)",
        )
    if not config.get("signal.data.collection"):
        warn(
            "signal.data.collection",
            "(unset)",
            "incremental snapshots need a signalling table for their watermarks: a rebuild's snapshot never "
            "starts; create one and name it here (README, 'Rebuilding a table')",
        )


def _lint_time_precision(kind: str, mode: str, warn: _Warn) -> None:
    if mode == "connect":
        consequence = "times and timestamps are cut to milliseconds (Kafka Connect's own types)"
        if kind == "mysql":
            consequence += ", and a MySQL TIME beyond 24 hours or below zero cannot be represented"
        warn("time.precision.mode", mode, consequence + "; use adaptive_time_microseconds")
    elif mode == "adaptive" and kind == "mysql":
        warn(
            "time.precision.mode",
            mode,
            "MySQL/MariaDB connectors document adaptive_time_microseconds (TIME as microseconds, so values up "
            "to 838:59:59 and negative ones survive); set it explicitly",
        )


def _lint_deletes(config: Mapping[str, str], tombstones: str, warn: _Warn) -> None:
    transforms = [t.strip() for t in str(config.get("transforms", "")).split(",") if t.strip()]
    for alias in transforms:
        if config.get(f"transforms.{alias}.type") == _UNWRAP:
            warn(
                f"transforms.{alias}.type",
                _UNWRAP,
                "the record is unwrapped to the row alone: no op, no before image, deletes dropped or turned into "
                "tombstones, so the connector cannot mark inserts, updates and deletes; remove the transform",
            )
    cleanup = str(config.get("topic.creation.default.cleanup.policy", "")).lower()
    if tombstones == "true" and "compact" in cleanup:
        warn(
            "tombstones.on.delete",
            tombstones,
            "on compacted topics (topic.creation.default.cleanup.policy=compact) a delete and its tombstone are "
            "removed after delete.retention.ms: a mirror further behind than that never sees the delete and "
            "keeps the row; use cleanup.policy=delete for change topics",
        )


def fetch_connector_configs(connect_url: str, name: str | None = None) -> dict[str, dict[str, str]]:
    """Each connector's config (or only ``name``'s) from the Connect REST API.

    Raises:
        ConnectorError: Connect does not answer, answers with an error, or has no connector ``name``.
    """
    base = connect_url.rstrip("/")
    listed = [name] if name else get_json(f"{base}/connectors", connect_url)
    if not isinstance(listed, list):
        msg = f"{base}/connectors: unexpected answer from Kafka Connect (not a list of names)"
        raise ConnectorError(msg)
    configs = {}
    for connector in listed:
        quoted = urllib.parse.quote(str(connector), safe="")
        url = f"{base}/connectors/{quoted}/config"
        config = get_json(url, connect_url)
        if not isinstance(config, dict):
            msg = f"{url}: unexpected answer from Kafka Connect (not a config object)"
            raise ConnectorError(msg)
        configs[str(connector)] = {str(k): str(v) for k, v in config.items()}
    return configs


def lint_debezium_connectors(
    connect_url: str, names: Sequence[str], truncate_policy: str, *, rebuilds: bool = False
) -> tuple[dict[str, dict[str, str]], list[Finding]]:
    """The configs of connectors ``names`` (empty: every registered one) and their findings.

    Raises:
        ConnectorError: Connect does not answer, answers with an error, or lacks one of ``names``.
    """
    configs: dict[str, dict[str, str]] = {}
    for name in names or (None,):
        configs.update(fetch_connector_configs(connect_url, name))
    findings = [
        finding
        for connector, config in configs.items()
        for finding in lint_debezium_config(connector, config, truncate_policy, rebuilds=rebuilds)
    ]
    return configs, findings


def check_source_command(connect_url: str, name: str | None, truncate_policy: str, *, rebuilds: bool = False) -> int:
    """The ``check-source`` command: a line per finding; exit 1 when any, 0 when fit for an exact mirror."""
    configs, findings = lint_debezium_connectors(
        connect_url, [name] if name else [], truncate_policy, rebuilds=rebuilds
    )
    if not configs:
        print(f"{connect_url}: no connectors registered")
        return 1
    for finding in findings:
        print(finding.line())
    for connector in configs:
        if not any(f.connector == connector for f in findings):
            print(f"{connector}: ok ({database_kind(configs[connector].get('connector.class', ''))})")
    return 1 if findings else 0
