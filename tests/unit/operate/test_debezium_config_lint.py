"""check-source's judgement of a connector config (the e2e test reads real configs from Kafka Connect)."""

from __future__ import annotations

from connector.operate.debezium_config_lint import database_kind, lint_debezium_config

MARIADB = "io.debezium.connector.mariadb.MariaDbConnector"
POSTGRES = "io.debezium.connector.postgresql.PostgresConnector"
RECOMMENDED_MYSQL = {
    "connector.class": MARIADB,
    "decimal.handling.mode": "precise",
    "bigint.unsigned.handling.mode": "precise",
    "time.precision.mode": "adaptive_time_microseconds",
    "skipped.operations": "none",
}


def settings(config: dict[str, str], truncate_policy: str = "fail") -> list[str]:
    return [f.setting for f in lint_debezium_config("c", config, truncate_policy)]


def test_recommended_mysql_config_has_no_finding() -> None:
    assert settings(RECOMMENDED_MYSQL) == []


def test_debezium_defaults_on_mysql_are_judged_and_said_to_be_defaults() -> None:
    findings = lint_debezium_config("c", {"connector.class": MARIADB})
    assert [(f.setting, f.value) for f in findings] == [
        ("bigint.unsigned.handling.mode", "long (Debezium's default)"),
        ("skipped.operations", "t (Debezium's default)"),
    ]
    assert "wrap to negative" in findings[0].consequence


def test_unsigned_mode_is_not_judged_on_postgres() -> None:
    assert settings({"connector.class": POSTGRES, "skipped.operations": "none"}) == []


def test_skipped_truncates_matter_unless_the_mirror_ignores_them() -> None:
    config = {**RECOMMENDED_MYSQL, "skipped.operations": "t,d"}
    assert settings(config) == ["skipped.operations", "skipped.operations"]
    assert settings(config, truncate_policy="ignore") == ["skipped.operations"]  # the skipped deletes still matter


def test_each_lossy_setting_is_named() -> None:
    cases = {
        "decimal.handling.mode": {"decimal.handling.mode": "double"},
        "time.precision.mode": {"time.precision.mode": "connect"},
        "value.converter": {"value.converter": "io.confluent.connect.protobuf.ProtobufConverter"},
        "key.converter.schemas.enable": {
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false",
        },
        "transforms.u.type": {"transforms": "u", "transforms.u.type": "io.debezium.transforms.ExtractNewRecordState"},
        "tombstones.on.delete": {"topic.creation.default.cleanup.policy": "compact"},
    }
    for setting, change in cases.items():
        assert settings({**RECOMMENDED_MYSQL, **change}) == [setting], setting


def test_avro_converters_are_readable() -> None:
    for converter in ("io.confluent.connect.avro.AvroConverter", "io.apicurio.registry.utils.converter.AvroConverter"):
        assert settings({**RECOMMENDED_MYSQL, "value.converter": converter}) == []


def test_source_kinds() -> None:
    assert database_kind("io.debezium.connector.mysql.MySqlConnector") == "mysql"
    assert database_kind(MARIADB) == "mysql"
    assert database_kind(POSTGRES) == "postgres"
    assert database_kind("io.debezium.connector.sqlserver.SqlServerConnector") == "sqlserver"
    assert database_kind("io.debezium.connector.oracle.OracleConnector") == "oracle"


def test_automatic_rebuilds_need_the_kafka_signal_channel_and_a_signalling_table() -> None:
    findings = lint_debezium_config("c", {**RECOMMENDED_MYSQL, "signal.enabled.channels": "source"}, rebuilds=True)
    assert [(f.setting, f.value) for f in findings] == [
        ("signal.enabled.channels", "source"),
        ("signal.data.collection", "(unset) (Debezium's default)"),
    ]
    ready = {
        **RECOMMENDED_MYSQL,
        "signal.enabled.channels": "source,kafka",
        "signal.kafka.topic": "mariadb1-signal",
        "signal.data.collection": "debezium.debezium_signal",
    }
    assert lint_debezium_config("c", ready, rebuilds=True) == []
    # Without automatic rebuilds nothing is said: a manual rebuild is the operator's own step.
    assert settings({**RECOMMENDED_MYSQL, "signal.enabled.channels": "source"}) == []


def test_schema_changes_left_out_of_kafka_are_named_on_mysql_only() -> None:
    findings = lint_debezium_config("c", {**RECOMMENDED_MYSQL, "include.schema.changes": "false"})
    assert [(f.setting, f.value) for f in findings] == [("include.schema.changes", "false")]
    assert "ADD COLUMN" in findings[0].consequence
    assert (
        settings({"connector.class": POSTGRES, "skipped.operations": "none", "include.schema.changes": "false"}) == []
    )


def test_skipped_truncates_are_named_under_the_default_truncate_policy() -> None:
    config = {**RECOMMENDED_MYSQL, "skipped.operations": "t"}
    (finding,) = lint_debezium_config("c", config)  # the default mirror.truncate_policy: rebuild
    assert finding.setting == "skipped.operations" and "'rebuild'" in finding.consequence
