"""Configuration: YAML < environment < flags; secrets resolved only on use and never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.commands.check_config import SCHEMA_FILE, check_config_file, config_json_schema
from connector.config import load_settings, spark_interval
from connector.errors import ConfigError
from connector.secrets import redact, redact_url


def test_precedence_yaml_env_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("source:\n  topics: from-yaml\n  bootstrap_servers: yaml:1\ntrigger: 5s\n")
    monkeypatch.setenv("CONNECTOR_SOURCE__BOOTSTRAP_SERVERS", "env:2")
    settings = load_settings(str(config), **{"trigger": "available-now"})
    assert settings.source.topics == "from-yaml"
    assert settings.source.bootstrap_servers == "env:2"
    assert settings.trigger == "available-now"


@pytest.mark.parametrize("where", ["yaml", "env"])
def test_bootstrap_servers_set_anywhere_mean_kafka(where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, only the --bootstrap-servers flag switched to Kafka: from YAML or the environment the run
    kept the file source and mirrored the packaged sample instead."""
    config = tmp_path / "c.yaml"
    config.write_text("source:\n  bootstrap_servers: yaml:1\n" if where == "yaml" else "trigger: 5s\n")
    monkeypatch.delenv("CONNECTOR_SOURCE__KIND", raising=False)
    if where == "env":
        monkeypatch.setenv("CONNECTOR_SOURCE__BOOTSTRAP_SERVERS", "env:2")
    assert load_settings(str(config)).source.kind == "kafka"
    monkeypatch.delenv("CONNECTOR_SOURCE__BOOTSTRAP_SERVERS", raising=False)
    assert load_settings().source.kind == "files"  # nothing set: the file source (the sample)


def test_files_with_bootstrap_servers_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("source:\n  kind: files\n  bootstrap_servers: k:9092\n")
    with pytest.raises(ConfigError, match="source.kind is 'files' but source.bootstrap_servers is set"):
        load_settings(str(config))


def test_invalid_values_are_reported_by_key(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("trigger: sometimes\nmirror:\n  file_format: xlsx\n")
    with pytest.raises(ConfigError) as info:
        load_settings(str(config))
    assert "trigger" in str(info.value) and "mirror.file_format" in str(info.value)


def test_secret_references_resolve_only_on_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret_file = tmp_path / "pw"
    secret_file.write_text("s3cret-from-file\n")
    monkeypatch.setenv("JAAS", "s3cret-from-env")
    settings = load_settings(
        None,
        **{
            "source.kafka_options": {
                "sasl.jaas.config": "${env:JAAS}",
                "ssl.key.password": f"${{file:{secret_file}}}",
                "sasl.password": "literal-secret",
            }
        },
    )
    resolved = settings.source.resolved_kafka_options()
    assert resolved["kafka.sasl.jaas.config"] == "s3cret-from-env"
    assert resolved["kafka.ssl.key.password"] == "s3cret-from-file"
    shown = str(settings.source.redacted_kafka_options())
    assert "s3cret" not in shown and "literal-secret" not in shown
    assert redact("sasl.password", "x") == "***"
    monkeypatch.delenv("JAAS")
    with pytest.raises(ConfigError) as info:
        settings.source.resolved_kafka_options()
    assert "JAAS" in str(info.value) and "s3cret" not in str(info.value)


def test_the_url_redactor_hides_user_info_and_queries() -> None:
    """One rule for every URL a message shows: registries, storage URLs (a SAS is a query), database URLs."""
    assert redact_url("http://alice:hunter2@h1:1/x?q=1, http://h2:2") == "http://h1:1/x,http://h2:2"
    assert redact_url("mysql://u:s3cret@h:1/db", keep_user=True) == "mysql://u:***@h:1/db"
    onelake = "abfss://ws@onelake.dfs.fabric.microsoft.com/item/Files"
    assert redact_url(f"{onelake}?sv=2024&sig=abc#f", keep_user=True) == onelake
    assert redact_url("https://[broken/x?sig=abc") == "https://[broken/x"


def test_check_config_reports_readable_errors(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("source:\n  kind: kafka\n  bootstrap_servers: k:9092\nmirror:\n  replay_safe_inserts: true\n")
    assert check_config_file(str(good)) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text("source:\n  kind: pigeon\nmirror:\n  max_rows_per_file: -3\n  unknown_key: 1\n")
    problems = check_config_file(str(bad))
    assert any("source.kind" in p for p in problems)
    assert any("mirror.max_rows_per_file" in p for p in problems)
    assert any("unknown_key" in p for p in problems)


def test_committed_schema_matches_the_settings() -> None:
    import json

    assert json.loads(SCHEMA_FILE.read_text()) == config_json_schema()


@pytest.mark.parametrize(
    ("trigger", "spark"), [("10s", "10 seconds"), ("500ms", "500 milliseconds"), ("2m", "2 minutes")]
)
def test_trigger_intervals_in_spark_syntax(trigger: str, spark: str) -> None:
    assert spark_interval(trigger) == spark


def test_type_settings_default_to_exact_text_and_refuse_decimals_delta_cannot_hold(tmp_path: Path) -> None:
    from connector.debezium.types import TypePolicy, type_policy

    settings = load_settings(None)
    assert type_policy(settings.mirror) == TypePolicy(variable_scale=None, wide_decimals="text")
    declared = load_settings(None, **{"mirror.variable_scale_decimal": "38,10", "mirror.wide_decimals": "stop"})
    assert type_policy(declared.mirror) == TypePolicy(variable_scale=(38, 10), wide_decimals="stop")
    for key, value in (
        ("mirror.variable_scale_decimal", "65,30"),
        ("mirror.decimal_columns", {"public.t.c": "39,2"}),
        ("mirror.wide_decimals", "decimal256"),
    ):
        with pytest.raises(ConfigError) as info:
            load_settings(None, **{key: value})
        assert key in str(info.value)
    config = tmp_path / "c.yaml"
    config.write_text("mirror:\n  variable_scale_decimal: text\n  wide_decimals: stop\n")
    assert check_config_file(str(config)) == []
    config.write_text("mirror:\n  wide_decimals: round\n")
    assert check_config_file(str(config))


def test_the_mirror_asks_for_snapshots_unless_every_healing_policy_is_off() -> None:
    from connector.config import MirrorSettings, SchemaChangeSettings, TableSettings

    assert MirrorSettings().asks_for_snapshots  # the defaults heal tables through Debezium's signal channel
    manual = SchemaChangeSettings(column_added="union", column_removed="keep", type_changed="stop", key_changed="stop")
    off = MirrorSettings(schema_changes=manual, on_data_lost="stop", on_table_stopped="stay", truncate_policy="fail")
    assert not off.asks_for_snapshots
    for healing in (
        {"on_data_lost": "rebuild"},
        {"truncate_policy": "rebuild"},
        {"tables": {"db.public.t": TableSettings(truncate_policy="rebuild")}},
        {"on_table_stopped": "rebuild"},
        {"schema_changes": manual.model_copy(update={"column_added": "refresh"})},
        {
            "tables": {
                "db.public.t": TableSettings(schema_changes=manual.model_copy(update={"type_changed": "rebuild"}))
            }
        },
    ):
        assert off.model_copy(update=healing).asks_for_snapshots, healing
