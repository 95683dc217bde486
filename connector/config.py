"""Typed, frozen configuration: YAML file, then ``CONNECTOR_*`` environment variables, then flags.

Nested keys use ``__`` in environment variables (``CONNECTOR_SOURCE__BOOTSTRAP_SERVERS``). Secrets are
never written in the YAML: a Kafka option may reference one as ``${env:NAME}`` or ``${file:/path}``,
resolved only when the Kafka source is built, and shown as ``***`` everywhere else.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from connector.errors import ConfigError
from connector.secrets import redact, resolve_secret_references
from connector.storage import CredentialKind
from connector.storage.identity import CredentialConfig
from connector.storage.location import StorageLocation


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SchemaChangeSettings(_Frozen):
    """What a table's schema change in the source does to its mirror (``connector.publish.schema_changes``).

    The defaults keep the mirror equal to the source with no operator: Fabric unions an added column (existing rows
    NULL), keeps a removed column's old values, and stops a table whose column type changes.
    """

    column_added: Literal["refresh", "union"] = Field(
        "refresh",
        description="A column added whose existing rows may hold a value no event carried (NOT NULL, a default, "
        "or an encoding that cannot tell): 'refresh' re-reads the table into its folder (Debezium incremental "
        "snapshot, upserts, no deletion); 'union' only adds the column (existing rows stay NULL in the mirror). "
        "A nullable column without a default is always just unioned.",
    )
    column_removed: Literal["rebuild", "keep"] = Field(
        "rebuild",
        description="A column removed (or renamed: removed + added): 'rebuild' deletes the folder and re-reads the "
        "table; 'keep' leaves the column in the mirror (old rows keep their values, new rows NULL).",
    )
    type_changed: Literal["rebuild", "stop"] = Field(
        "rebuild", description="A column's type changed: 'rebuild' the table, or 'stop' it for an operator."
    )
    key_changed: Literal["rebuild", "stop"] = Field(
        "rebuild",
        description="The key columns changed (_metadata.json's keyColumns cannot change): 'rebuild' or 'stop'.",
    )


class TableSettings(_Frozen):
    """Per-topic overrides; the key of ``mirror.tables`` is the Kafka topic name."""

    schema_name: str | None = Field(
        None, description="Landing-zone schema folder (<name>.schema); default from the topic."
    )
    table: str | None = Field(None, description="Landing-zone table folder; default: the topic's last part.")
    key_columns: list[str] | None = Field(None, description="Key columns; default: the Debezium key's fields.")
    truncate_policy: Literal["fail", "ignore", "recreate"] | None = None
    toast_policy: Literal["fail", "keep-last"] | None = None
    poison_policy: Literal["stop", "dead-letter"] | None = Field(
        None, description="Overrides mirror.poison_policy for this topic."
    )
    schema_changes: SchemaChangeSettings | None = Field(
        None, description="Overrides mirror.schema_changes for this topic (the whole block)."
    )


class RebuildSettings(_Frozen):
    """How a stopped table is rebuilt (``python -m connector rebuild``, ``mirror.on_table_stopped: rebuild``)."""

    wait_s: float = Field(
        300.0,
        ge=0,
        description="After deleting a table's folder, how long to wait before recreating it when Fabric's status "
        "is not configured or not readable (with a readable status: until Fabric reports the table gone).",
    )
    signal_topic: str | None = Field(
        None,
        description="Debezium's Kafka signal topic (its signal.kafka.topic); default '<topic prefix>-signal'.",
    )
    topic_prefix: str | None = Field(
        None,
        description="Debezium's topic.prefix, the signal's key; default: the table topic's first dot-separated part.",
    )
    max_automatic: int = Field(
        3,
        ge=0,
        description="Automatic rebuilds of one table before it stays stopped (a manual rebuild resets the count).",
    )


class MirrorSettings(_Frozen):
    """How change events become landing-zone files."""

    partner_name: str = Field("debezium-fabric-mirror", description="partnerName in _partnerEvents.json.")
    source_type: str | None = Field(None, description="sourceType; default: Debezium's source.connector.")
    source_version: str | None = Field(None, description="sourceVersion in _partnerEvents.json, when known.")
    replay_safe_inserts: bool = Field(
        True,
        description="Write creates and snapshot reads as upserts (4) instead of inserts (0), so events "
        "Debezium re-sends after a restart cannot duplicate rows (0 does no duplicate-key check). "
        "Opt out (false) only for an insert-only source that never restarts.",
    )
    truncate_policy: Literal["fail", "ignore", "recreate"] = "fail"
    toast_policy: Literal["fail", "keep-last"] = "fail"
    keep_last_removed_keys: int = Field(
        10_000,
        ge=0,
        description="keep-last tables also keep the last TOASTed values of this many deleted or moved keys, "
        "so the events Debezium re-sends after a restart can still fill their placeholders.",
    )
    poison_policy: Literal["stop", "dead-letter"] = Field(
        "stop",
        description="An undecodable record stops its table ('stop'), or goes to the dead_letter output "
        "while the table goes on ('dead-letter').",
    )
    unavailable_value_placeholder: str = "__debezium_unavailable_value"
    file_format: Literal["parquet", "csv", "tsv", "psv"] = "parquet"
    compression: Literal["snappy", "zstd", "gzip", "none"] = "snappy"
    max_rows_per_file: int | None = Field(None, gt=0)
    max_bytes_per_file: int | None = Field(None, gt=0, description="Approximate: estimated from Arrow sizes.")
    publish_parallelism: int = Field(
        16,
        ge=1,
        description="Tables planned and renamed at once on the driver (each table's files stay in order): a batch "
        "touching many tables costs round trips per table, which threads overlap.",
    )
    initial_load: Literal["marker-free", "upsert"] = Field(
        "marker-free",
        description="A table's initial load (its files while every event published for it is a snapshot read of "
        "Debezium's initial snapshot): 'marker-free' writes those Parquet files without __rowMarker__ (whole-file "
        "inserts: Fabric's fast path); 'upsert' writes them with the marker like every later file. The first "
        "change event, truncate or incremental-snapshot read ends a table's initial load; a second snapshot pass "
        "during it (Debezium restarted its snapshot) rebuilds the table.",
    )
    decimal_columns: dict[str, str] = Field(
        default_factory=dict,
        description="Columns written as decimal(P,S), P <= 38: {'schema.table.column': 'P,S'}. For decimals sent "
        "as strings (decimal.handling.mode=string), numerics without precision (VariableScaleDecimal) and "
        "decimals wider than 38 digits; a value the declared type cannot hold exactly stops the table.",
    )
    variable_scale_decimal: str = Field(
        "text",
        description="io.debezium.data.VariableScaleDecimal (numeric without precision): 'text' writes each "
        "value's exact decimal text; 'P,S' (P <= 38) writes decimal(P,S), and a value it cannot hold "
        "exactly stops the table.",
    )
    wide_decimals: Literal["text", "stop"] = Field(
        "text",
        description="Decimals of more than 38 digits, which Delta and Fabric cannot hold: 'text' writes the "
        "exact decimal text; 'stop' stops the table until the column is declared in decimal_columns.",
    )
    on_table_stopped: Literal["stay", "rebuild"] = Field(
        "stay",
        description="'stay': a stopped table waits for an operator; 'rebuild': it is rebuilt automatically "
        "(folder deleted, Debezium incremental snapshot), at most rebuild.max_automatic times.",
    )
    on_data_lost: Literal["rebuild", "stop"] = Field(
        "rebuild",
        description="Kafka no longer holds records the mirror has yet to read (retention outran the connector, "
        "records deleted, a topic re-created): 'rebuild' rebuilds exactly the tables those partitions carry "
        "(folder deleted, Debezium incremental snapshot), reads on past the gap and keeps the other tables "
        "publishing; 'stop' stops the job (exit 2) with one line naming topic, partition and offsets.",
    )
    rebuild: RebuildSettings = Field(default_factory=RebuildSettings)
    schema_changes: SchemaChangeSettings = Field(default_factory=SchemaChangeSettings)
    tables: dict[str, TableSettings] = Field(default_factory=dict)

    @field_validator("decimal_columns")
    @classmethod
    def _check_decimals(cls, value: dict[str, str]) -> dict[str, str]:
        for column, spec in value.items():
            _parse_precision_scale(spec, f"mirror.decimal_columns[{column}]")
        return value

    @field_validator("variable_scale_decimal")
    @classmethod
    def _check_vs(cls, value: str) -> str:
        if value.strip().lower() != "text":
            _parse_precision_scale(value, "mirror.variable_scale_decimal")
        return value

    def declared_decimal(self, column: str) -> tuple[int, int]:
        """``(precision, scale)`` of ``decimal_columns[column]`` (``'schema.table.column'``)."""
        return _parse_precision_scale(self.decimal_columns[column], f"mirror.decimal_columns[{column}]")

    def variable_scale_type(self) -> tuple[int, int] | None:
        """``(precision, scale)`` of ``variable_scale_decimal``, or ``None`` for ``'text'``."""
        if self.variable_scale_decimal.strip().lower() == "text":
            return None
        return _parse_precision_scale(self.variable_scale_decimal, "mirror.variable_scale_decimal")

    @model_validator(mode="before")
    @classmethod
    def _replaced_settings(cls, data: Any) -> Any:
        """``omit_row_marker_for_snapshot`` became ``initial_load``: say so instead of "extra inputs"."""
        if isinstance(data, dict) and "omit_row_marker_for_snapshot" in data:
            msg = (
                "mirror.omit_row_marker_for_snapshot was replaced by mirror.initial_load: 'marker-free' (the default: "
                "initial-snapshot files without __rowMarker__) or 'upsert' (every file with the marker)"
            )
            raise ValueError(msg)
        return data

    def table_settings(self, topic: str) -> TableSettings:
        """Overrides for ``topic`` (empty when none)."""
        return self.tables.get(topic) or TableSettings()

    def schema_changes_for(self, topic: str | None) -> SchemaChangeSettings:
        """The schema-change policy of ``topic``'s table: its override, else ``schema_changes``."""
        override = self.table_settings(topic).schema_changes if topic is not None else None
        return override or self.schema_changes

    @property
    def asks_for_snapshots(self) -> bool:
        """Whether the mirror may ask Debezium for an incremental snapshot by itself (Debezium's signal channel).

        A stopped table rebuilt, a schema change rebuilt or refreshed, lost records rebuilt: each re-reads the
        table through a snapshot signal. With the defaults, all but the first do.
        """
        policies = [self.schema_changes, *(t.schema_changes for t in self.tables.values() if t.schema_changes)]
        heals = any(
            p.column_added == "refresh" or "rebuild" in (p.column_removed, p.type_changed, p.key_changed)
            for p in policies
        )
        return heals or self.on_table_stopped == "rebuild" or self.on_data_lost == "rebuild"


class SchemaRegistrySettings(_Frozen):
    """The Confluent-compatible schema registry that holds the Avro writer schemas (value_format avro).

    Secrets are ``SecretStr`` (shown as ``**********``) and may be ``${env:NAME}`` / ``${file:/path}``
    references, resolved only when the registry client is built, in the process that uses it.
    """

    url: str | None = Field(
        None,
        description="Registry base URL (Confluent API; Apicurio: .../apis/ccompat/v7); comma-separated for several.",
    )
    basic_auth_user: str | None = Field(None, description="Basic-auth user (Confluent Cloud: the API key).")
    basic_auth_password: SecretStr | None = Field(None, description="Basic-auth password; ${env:X}/${file:P}.")
    bearer_token: SecretStr | None = Field(None, description="Static bearer token; ${env:X}/${file:P}.")
    bearer_logical_cluster: str = Field("", description="Confluent Cloud logical cluster sent with a bearer token.")
    bearer_identity_pool_id: str = Field("", description="Confluent Cloud identity pool sent with a bearer token.")
    ssl_ca_location: str | None = Field(None, description="CA bundle (PEM) to verify the registry's certificate.")
    request_timeout_s: float = Field(10.0, gt=0, description="Timeout of one registry request.")
    max_unavailable_s: float = Field(
        300.0,
        gt=0,
        description="How long an unreachable registry (connection errors, 408/429/5xx) is retried with backoff "
        "before the batch fails with RegistryUnavailable; never treated as a poison event.",
    )


class DeadLetterSettings(_Frozen):
    """Where records go under poison_policy 'dead-letter'."""

    kind: Literal["folder", "kafka"] = Field(
        "folder", description="folder (JSON lines per batch and table) or kafka (a dead-letter topic)."
    )
    url: str | None = Field(
        None,
        description="kind folder: local folder or OneLake / ADLS Gen2 URL outside the landing zone; "
        "default <checkpoint>/_deadletter.",
    )
    credential: CredentialKind | CredentialConfig = Field(
        "default", description="Azure identity for a OneLake / ADLS Gen2 url (as landing_zone.credential)."
    )
    topic: str | None = Field(None, description="kind kafka: the dead-letter topic (must exist).")
    bootstrap_servers: str | None = Field(None, description="kind kafka: default source.bootstrap_servers.")
    producer_options: dict[str, str] = Field(
        default_factory=dict,
        description="kind kafka: extra librdkafka producer options (win over those taken from "
        "source.kafka_options); ${env:X}/${file:P} for secrets.",
    )
    delivery_timeout_s: float = Field(60.0, gt=0, description="kind kafka: how long one batch may take to deliver.")


class SourceSettings(_Frozen):
    """Where change events come from."""

    kind: Literal["kafka", "files"] = Field(
        "files",
        description="kafka, or a folder of kcat -J JSON-lines files (source.path; without it the packaged "
        "sample, for a local landing zone only). Default: kafka when bootstrap_servers is set, else files.",
    )
    bootstrap_servers: str | None = None
    topics: str = Field(".*", description="Topic regex, matched against whole topic names.")
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = Field(200_000, gt=0)
    min_offsets_per_trigger: int | None = Field(
        None,
        gt=0,
        description="Spark waits until this many records are there (or max_trigger_delay passed) before a batch: "
        "fewer, larger files for big loads.",
    )
    max_trigger_delay: str | None = Field(
        None, description="With min_offsets_per_trigger: the longest a batch waits, e.g. '2m' (Spark's default 15m)."
    )
    min_partitions: int | None = Field(
        None,
        gt=0,
        description="Spark splits Kafka partitions into at least this many tasks: a hot partition is decoded and "
        "staged by several executors (each task's offset range stays in order).",
    )
    max_records_per_partition: int | None = Field(
        None, gt=0, description="Spark splits a Kafka partition's range into tasks of at most this many records."
    )
    kafka_options: dict[str, str] = Field(
        default_factory=dict, description="Kafka client options; ${env:X}/${file:P} for secrets."
    )
    reader: Literal["direct", "spark"] = Field(
        "direct",
        description="How the executors read a micro-batch's records: 'direct' (Spark plans the offsets, its "
        "Python workers read them with librdkafka: far less CPU per record) or 'spark' (Spark's own Kafka source "
        "reads them, for kafka_options librdkafka has no form of, such as JKS stores; chosen by itself then).",
    )
    path: str | None = Field(None, description="Folder of *.jsonl kcat dumps for kind=files.")
    value_format: Literal["json", "avro"] = Field(
        "json",
        description="json (JsonConverter) or avro (Confluent wire format: magic byte 0, 4-byte schema id; "
        "key and value), with writer schemas from source.schema_registry.",
    )
    schema_registry: SchemaRegistrySettings = Field(default_factory=SchemaRegistrySettings)
    connect_timeout_s: float = Field(
        30.0,
        gt=0,
        description="How long the start-up check waits for a Kafka broker to answer before the job exits "
        "with an error (Spark's own source would wait for ever).",
    )
    debezium_connect_url: str | None = Field(
        None,
        description="Kafka Connect REST URL of the Debezium connectors feeding these topics: run then reads "
        "their settings at start and warns about those that lose data silently (as check-source does), "
        "exporting the count as cdc_mirror_source_lossy_settings.",
    )
    debezium_connectors: list[str] = Field(
        default_factory=list, description="The connectors to check there; empty: every registered connector."
    )

    @model_validator(mode="before")
    @classmethod
    def _kind_from_bootstrap_servers(cls, data: Any) -> Any:
        """Bootstrap servers given anywhere (flag, environment, YAML) mean Kafka, unless ``kind`` says otherwise.

        Before, only the ``--bootstrap-servers`` flag switched to Kafka: the same setting from the environment
        or the YAML file left the file source on, which mirrored the packaged sample instead.
        """
        if isinstance(data, dict) and data.get("bootstrap_servers") and data.get("kind") is None:
            return {**data, "kind": "kafka"}
        return data

    @model_validator(mode="after")
    def _no_servers_for_files(self) -> SourceSettings:
        if self.kind == "files" and self.bootstrap_servers:
            msg = (
                "source.kind is 'files' but source.bootstrap_servers is set: remove source.kind to read Kafka, "
                "or the bootstrap servers to read kcat dumps"
            )
            raise ValueError(msg)
        return self

    def resolved_kafka_options(self) -> dict[str, str]:
        """Kafka options with secret references resolved, prefixed ``kafka.`` for Spark's source."""
        out = {}
        for key, raw in self.kafka_options.items():
            name = key if key.startswith("kafka.") else f"kafka.{key}"
            out[name] = resolve_secret_references(raw, f"source.kafka_options.{key}")
        return out

    def redacted_kafka_options(self) -> dict[str, str]:
        """Kafka options safe to log."""
        return {k: redact(k, v) for k, v in self.kafka_options.items()}


class LandingZoneSettings(_Frozen):
    """The open-mirroring landing zone."""

    url: str = Field("./landing-zone", description="Local folder, or a OneLake / ADLS Gen2 URL.")
    credential: CredentialKind | CredentialConfig = Field(
        "default",
        description="Azure identity for a OneLake / ADLS Gen2 url: a kind (the rest from AZURE_* variables), or "
        "the identity's settings (kind, tenant_id, client_id, client_secret_file, …; secrets as ${env:X}/${file:P}).",
    )

    @property
    def identity(self) -> CredentialConfig:
        """The identity, whichever form the setting has."""
        return CredentialConfig.model_validate(self.credential)

    @property
    def location(self) -> StorageLocation:
        """The landing zone as one value (URL + identity), checked when built."""
        return StorageLocation(self.url, self.identity, "landing_zone.url")


class MetricsSettings(_Frozen):
    """Prometheus endpoint."""

    port: int = Field(9464, ge=0, le=65535, description="0 disables the HTTP endpoint.")
    stall_after_s: float = Field(
        300,
        gt=0,
        description="/readyz turns unready when Kafka offsets are behind and no batch has completed for this long.",
    )
    broker_check_s: float = Field(
        30,
        ge=0,
        description="How often the driver checks that a Kafka broker answers (0 = never); /readyz turns unready "
        "while none does.",
    )


class FabricStatusSettings(_Frozen):
    """Where Fabric's own per-table mirroring status is read (``connector.fabric.status``).

    It feeds the ``cdc_mirror_fabric_*`` metrics, the ``tables`` command and table rebuilds (which wait until
    Fabric no longer lists a deleted table). The bearer token is a ``SecretStr`` and may be a ``${env:NAME}``
    / ``${file:/path}`` reference, resolved at each request so a rotated token file is picked up.
    """

    kind: Literal["none", "rest", "monitoring"] = Field(
        "none",
        description="none; rest (Fabric REST API getTablesMirroringStatus); monitoring (the tables.json that "
        "mirroring writes to the mirrored database's Files/Monitoring folder).",
    )
    workspace_id: str | None = Field(None, description="kind rest: the workspace id (GUID).")
    mirrored_database_id: str | None = Field(None, description="kind rest: the mirrored database's item id (GUID).")
    api_url: str = Field(
        "https://api.fabric.microsoft.com",
        description="kind rest: base URL of the Fabric REST API (https; plain http only on 127.0.0.1/localhost).",
    )
    monitoring_url: str | None = Field(
        None,
        description="kind monitoring: the Monitoring folder (local folder or OneLake URL); default: beside the "
        "landing zone when landing_zone.url ends in /LandingZone (.../Files/Monitoring).",
    )
    credential: CredentialKind = Field(
        "default", description="Azure identity for the REST API (or a OneLake monitoring_url)."
    )
    bearer_token: SecretStr | None = Field(
        None, description="kind rest: static bearer token instead of the Azure identity; ${env:X}/${file:P}."
    )
    poll_s: float = Field(60.0, gt=0, description="How often the streaming job reads the status for its metrics.")
    request_timeout_s: float = Field(10.0, gt=0, description="Timeout of one status request.")

    @field_validator("api_url")
    @classmethod
    def _check_api_url(cls, value: str) -> str:
        # The request carries a bearer token: never in clear text beyond this machine.
        if not re.match(r"https://[^/\s]+", value) and not re.match(
            r"http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(/|$)", value
        ):
            msg = f"fabric_status.api_url must be https:// (or http:// on 127.0.0.1/localhost), got {value!r}"
            raise ValueError(msg)
        return value.rstrip("/")


class SparkSettings(_Frozen):
    """The Spark session."""

    master: str = "local[*]"
    conf: dict[str, str] = Field(default_factory=dict)
    decode_on: Literal["driver", "executors"] = Field(
        "executors",
        description="Where records are decoded, marked, encoded and staged: 'executors' (one slice per Spark "
        "partition in Spark's Python workers, which write the staged files into the landing zone and return "
        "only their metadata; the executors need the connector installed and the landing zone's identity) or "
        "'driver' (the micro-batch collected to the driver as Arrow and staged there: the same code in one "
        "process, for a landing zone only the driver can reach).",
    )
    columnar_decode: bool = Field(
        True,
        description="Decode and mark plain JSON change events of a topic in bulk with Arrow (the columnar "
        "lane) wherever it gives exactly what the record-by-record path gives; false sends every record "
        "through the record-by-record path.",
    )


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


_INTERVAL = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)")
_INTERVAL_UNITS = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours"}


def spark_interval(trigger: str) -> str:
    """``10s`` → ``10 seconds``: the ``trigger`` setting in Spark's interval syntax (the unit spelled out).

    Raises:
        ConfigError: ``trigger`` is not an interval like ``10s``.
    """
    match = _INTERVAL.fullmatch(trigger)
    if not match:
        msg = f"trigger must be 'available-now' or an interval like '10s', got {trigger!r}"
        raise ConfigError(msg)
    return f"{match[1]} {_INTERVAL_UNITS[match[2]]}"


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


def _parse_precision_scale(spec: str, where: str) -> tuple[int, int]:
    """Parse ``'P,S'``; precision at most 38, the widest decimal Delta and Fabric hold."""
    match = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", spec)
    if not match or int(match[2]) > int(match[1]) or not 0 < int(match[1]) <= 38:
        msg = f"{where}: expected 'precision,scale' with 0 < precision <= 38 and scale <= precision, got {spec!r}"
        raise ValueError(msg)
    return int(match[1]), int(match[2])
