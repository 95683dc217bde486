"""``mirror``: how Debezium changes become landing-zone files (tables, keys, decimals, schema changes, rebuilds)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from connector.config.audit import AuditSettings
from connector.config.base import FrozenModel


class SchemaChangeSettings(FrozenModel):
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


class TableSettings(FrozenModel):
    """Per-topic overrides; the key of ``mirror.tables`` is the Kafka topic name."""

    schema_name: str | None = Field(
        None, description="Landing-zone schema folder (<name>.schema); default from the topic."
    )
    table: str | None = Field(None, description="Landing-zone table folder; default: the topic's last part.")
    key_columns: list[str] | None = Field(None, description="Key columns; default: the Debezium key's fields.")
    truncate_policy: Literal["rebuild", "fail", "ignore", "recreate"] | None = Field(
        None, description="Overrides mirror.truncate_policy for this topic."
    )
    toast_policy: Literal["fail", "keep-last"] | None = None
    poison_policy: Literal["stop", "dead-letter"] | None = Field(
        None, description="Overrides mirror.poison_policy for this topic."
    )
    keyless_changes: Literal["rebuild", "stop"] | None = Field(
        None, description="Overrides mirror.keyless_changes for this topic."
    )
    schema_changes: SchemaChangeSettings | None = Field(
        None, description="Overrides mirror.schema_changes for this topic (the whole block)."
    )


class RebuildSettings(FrozenModel):
    """How a stopped table is rebuilt (``python -m connector rebuild``, ``mirror.on_table_stopped: rebuild``)."""

    wait_s: float = Field(
        300.0,
        ge=0,
        description="After deleting a table's folder, how long to wait before recreating it when Fabric's status "
        "is not configured or not readable (with a readable status: until Fabric reports the table gone).",
    )
    check_interval_s: float = Field(
        5.0,
        ge=0.2,
        description="How often, between batches, rebuilds are moved on and Debezium's snapshot notifications read "
        "(a quiet table's rebuild otherwise waits for its next change); each look lists the checkpoint's rebuild "
        "requests.",
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
    notification_topic: str | None = Field(
        None,
        description="Debezium's sink notification topic (its notification.sink.topic.name, with 'sink' in "
        "notification.enabled.channels); default '<topic prefix>-notifications'. When it exists, a rebuild or "
        "refresh ends only when the incremental snapshot it asked for completed; without it, when it was asked for.",
    )
    snapshot_timeout_s: float = Field(
        300.0,
        gt=0,
        description="A snapshot asked for that Debezium reports nothing of for this long (never started, or "
        "stalled) is stopped and asked for again.",
    )
    snapshot_attempts: int = Field(
        3,
        ge=1,
        description="Snapshots asked for one rebuild or refresh (the first and its retries after an abort or a "
        "stall) before the table stops with one line saying so.",
    )


class MirrorSettings(FrozenModel):
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
    keyless_changes: Literal["rebuild", "stop"] = Field(
        "rebuild",
        description="An update or delete of a table without a key (no primary key, no key_columns): open "
        "mirroring mirrors such a table without keyColumns, inserts only. 'rebuild' rebuilds the table (folder "
        "deleted, Fabric waited for, Debezium blocking snapshot); 'stop' stops the table.",
    )
    truncate_policy: Literal["rebuild", "fail", "ignore", "recreate"] = Field(
        "rebuild",
        description="A TRUNCATE of a source table (open mirroring has no truncate marker): 'rebuild' rebuilds the "
        "table (folder deleted, Fabric waited for, Debezium incremental snapshot, which also reads the rows written "
        "after the truncate; not counted in rebuild.max_automatic); 'fail' stops the table; 'ignore' keeps the "
        "truncated rows in the mirror; 'recreate' deletes the folder and goes on from file 1 at once, without "
        "waiting for Fabric to drop the table.",
    )
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
    audit: AuditSettings = Field(default_factory=AuditSettings)
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

        A stopped table rebuilt, a schema change rebuilt or refreshed, lost records or a truncate rebuilt: each
        re-reads the table through a snapshot signal. With the defaults, all but the first do.
        """
        policies = [self.schema_changes, *(t.schema_changes for t in self.tables.values() if t.schema_changes)]
        heals = any(
            p.column_added == "refresh" or "rebuild" in (p.column_removed, p.type_changed, p.key_changed)
            for p in policies
        )
        truncates = [self.truncate_policy, *(t.truncate_policy for t in self.tables.values())]
        return heals or "rebuild" in (self.on_table_stopped, self.on_data_lost, *truncates)


def _parse_precision_scale(spec: str, where: str) -> tuple[int, int]:
    """Parse ``'P,S'``; precision at most 38, the widest decimal Delta and Fabric hold."""
    match = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", spec)
    if not match or int(match[2]) > int(match[1]) or not 0 < int(match[1]) <= 38:
        msg = f"{where}: expected 'precision,scale' with 0 < precision <= 38 and scale <= precision, got {spec!r}"
        raise ValueError(msg)
    return int(match[1]), int(match[2])
