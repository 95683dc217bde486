"""``check-source`` against real Debezium connectors registered on the MariaDB stack's Kafka Connect worker.

Each lossy setting is registered as its own connector (its own topic prefix and binlog server id, no
snapshot), so Connect validates the config against the real database first; the preflight reads it back
through the REST API and must name the setting. The stack's own connector, registered with the
recommended settings, must pass.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector.config import ConnectorSettings
from connector.debezium_control.debezium_settings import check_debezium_settings
from connector.operate import metrics
from connector.readback.database_mysql import MySqlSource
from tests.support.kafka import run_connector
from tests.support.kafka_connect import connect_request

pytestmark = pytest.mark.e2e

# name suffix -> (settings, the setting the warning must name)
LOSSY = {
    "decimal-double": ({"decimal.handling.mode": "double"}, "decimal.handling.mode=double"),
    "unsigned-long": ({"bigint.unsigned.handling.mode": "long"}, "bigint.unsigned.handling.mode=long"),
    "unsigned-default": ({}, "bigint.unsigned.handling.mode=long (Debezium's default)"),
    "skip-truncate": ({"skipped.operations": "t"}, "skipped.operations=t"),
    "time-connect": ({"time.precision.mode": "connect"}, "time.precision.mode=connect"),
    "string-converter": (
        {"value.converter": "org.apache.kafka.connect.storage.StringConverter"},
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
    ),
    "schemaless": (
        {
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false",
        },
        "key.converter.schemas.enable=false",
    ),
    "unwrapped": (
        {"transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"},
        "transforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState",
    ),
}
# What every registered variant keeps from the recommended config unless its case overrides it.
RECOMMENDED = {
    "bigint.unsigned.handling.mode": "precise",
    "decimal.handling.mode": "precise",
    "time.precision.mode": "adaptive_time_microseconds",
    "skipped.operations": "none",
    # The mirror heals tables by itself (schema changes, lost records): Debezium's Kafka signal channel and a
    # signalling table are part of a recommended connector (the lint checks them by default).
    "signal.enabled.channels": "source,kafka",
    "signal.data.collection": "debezium.debezium_signal",
}


@pytest.fixture(scope="module")
def lossy_connectors(mariadb_stack: dict[str, str]) -> Iterator[dict[str, str]]:
    """Register one connector per lossy setting; yield suffix -> connector name; delete them afterwards."""
    connect = mariadb_stack["connect"]
    source = MySqlSource.from_url(mariadb_stack["mariadb"])
    names: dict[str, str] = {}
    try:
        for number, (suffix, (settings, _)) in enumerate(LOSSY.items()):
            name = f"lossy-{suffix}"
            config = {
                "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
                "tasks.max": "1",
                "database.hostname": source.host,
                "database.port": str(source.port),
                "database.user": source.user,
                "database.password": source.password,
                "database.server.id": str(6000 + number),
                "database.ssl.mode": "disable",
                "database.include.list": source.database or "mirror",
                "topic.prefix": f"lossy{number}",
                "schema.history.internal.kafka.bootstrap.servers": mariadb_stack["bootstrap.servers"],
                "schema.history.internal.kafka.topic": f"_schema-history.lossy{number}",
                "snapshot.mode": "no_data",
                "signal.kafka.topic": f"lossy{number}-signal",
                "signal.kafka.bootstrap.servers": mariadb_stack["bootstrap.servers"],
                "signal.kafka.groupId": f"lossy{number}-signal",
                **RECOMMENDED,
                **settings,
            }
            if suffix == "unsigned-default":
                del config["bigint.unsigned.handling.mode"]
            status = connect_request("PUT", f"{connect}/connectors/{name}/config", config)
            assert status in (200, 201), f"registering {name}: HTTP {status}"
            names[suffix] = name
        yield names
    finally:
        for name in names.values():
            connect_request("DELETE", f"{connect}/connectors/{name}")


@pytest.mark.parametrize("suffix", sorted(LOSSY))
def test_check_source_names_each_lossy_setting(
    mariadb_stack: dict[str, str], lossy_connectors: dict[str, str], suffix: str
) -> None:
    name = lossy_connectors[suffix]
    result = run_connector("check-source", "--connect", mariadb_stack["connect"], "--connector", name)
    assert result.returncode == 1, result.stdout + result.stderr
    expected = f"WARNING {name}: {LOSSY[suffix][1]}: "
    assert expected in result.stdout, result.stdout
    assert mariadb_stack["mariadb"].split(":")[2].split("@")[0] not in result.stdout  # the password never shows


def test_check_source_passes_the_recommended_connector(mariadb_stack: dict[str, str]) -> None:
    result = run_connector(
        "check-source", "--connect", mariadb_stack["connect"], "--connector", mariadb_stack["connector"]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == f"{mariadb_stack['connector']}: ok (mysql)"


def test_run_checks_the_configured_connectors_at_start(
    mariadb_stack: dict[str, str], lossy_connectors: dict[str, str], tmp_path: Path
) -> None:
    """``source.debezium_connect_url``: ``run`` logs each lossy setting at start and still mirrors.

    The run reads the packaged sample (the file source), so only the check touches the stack.
    """
    checked = [lossy_connectors["decimal-double"], lossy_connectors["skip-truncate"], mariadb_stack["connector"]]
    config = tmp_path / "config.yaml"
    config.write_text(
        "source:\n"
        f"  debezium_connect_url: {mariadb_stack['connect']}\n"
        f"  debezium_connectors: {json.dumps(checked)}\n"
        f"landing_zone:\n  url: {tmp_path / 'lz'}\n"
        f"checkpoint: {tmp_path / 'cp'}\n"
    )
    result = run_connector("run", "--config", str(config), "--trigger", "available-now", "--metrics-port", "0")
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line and "Debezium connector" in line]
    assert len(warnings) == 2, result.stderr[-3000:]
    assert any(f"Debezium connector {checked[0]}: decimal.handling.mode=double: " in line for line in warnings)
    assert any(f"Debezium connector {checked[1]}: skipped.operations=t: " in line for line in warnings)
    assert not any(mariadb_stack["connector"] in line for line in warnings)  # the recommended one passes
    assert any((tmp_path / "lz").iterdir())  # the check only advises: the mirror was written


def test_a_lossy_count_is_exported_and_an_unreachable_connect_only_logged(
    mariadb_stack: dict[str, str], lossy_connectors: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    checked = [lossy_connectors["unsigned-long"], lossy_connectors["time-connect"]]
    settings = ConnectorSettings(
        source={"debezium_connect_url": mariadb_stack["connect"], "debezium_connectors": checked}
    )
    findings = check_debezium_settings(settings)
    assert findings is not None
    assert [(f.connector, f.setting) for f in findings] == [
        (checked[0], "bigint.unsigned.handling.mode"),
        (checked[1], "time.precision.mode"),
    ]
    assert metrics.SOURCE_LOSSY_SETTINGS._value.get() == 2  # noqa: SLF001 - the exported gauge's value
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    unreachable = ConnectorSettings(source={"debezium_connect_url": f"http://127.0.0.1:{closed}"})
    with caplog.at_level(logging.WARNING, logger="connector.debezium_control.debezium_settings"):
        assert check_debezium_settings(unreachable) is None
    assert f"Debezium settings not checked: http://127.0.0.1:{closed}/connectors" in caplog.text
