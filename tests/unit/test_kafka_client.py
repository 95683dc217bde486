"""One option dialect for every Kafka client: librdkafka's names, Java-style configs translated, Entra ID added."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from connector import kafka_client
from connector.config import SourceSettings
from connector.errors import ConfigError
from connector.kafka_client import client_config, client_security_options
from connector.kafka_token import EntraAuth, EntraTokenCallback

EVENT_HUBS = "mirror-ns.servicebus.windows.net:9093"


def source(options: dict[str, str] | None = None, bootstrap: str = "b:9093", **more: Any) -> SourceSettings:
    return SourceSettings(kind="kafka", bootstrap_servers=bootstrap, kafka_options=options or {}, **more)


@pytest.fixture(autouse=True)
def _fresh_warnings() -> None:
    kafka_client._warned.clear()


def test_librdkafka_names_are_used_as_they_are(caplog: pytest.LogCaptureFixture) -> None:
    options = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "mirror",
        "sasl.password": "${env:KAFKA_PW}",
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "fetch.max.bytes": "1048576",
    }
    with caplog.at_level(logging.WARNING), pytest.MonkeyPatch.context() as env:
        env.setenv("KAFKA_PW", "pw-from-env")
        config = client_config(source(options), **{"group.id": "g"})
    assert config == {
        **options,
        "sasl.password": "pw-from-env",
        "bootstrap.servers": "b:9093",
        "group.id": "g",
    }
    assert caplog.records == []


def test_java_style_keys_work_with_one_warning_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_PW", "pw-from-env")
    options = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="$ConnectionString" password="${env:KAFKA_PW}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/kafka/ca.pem",
    }
    with caplog.at_level(logging.WARNING):
        config = client_config(source(options))
        client_config(source(options))  # every client of the process: still one line
    assert config["security.protocol"] == "SASL_SSL" and config["sasl.mechanism"] == "PLAIN"
    assert config["sasl.username"] == "$ConnectionString"
    assert config["sasl.password"] == "pw-from-env"
    assert config["ssl.ca.location"] == "/etc/kafka/ca.pem"
    assert not any(k.startswith("kafka.") or "truststore" in k or "jaas" in k for k in config)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("source.kafka_options.kafka.sasl.jaas.config, ")
    assert "are the Java client's form; write " in lines[0]
    assert "sasl.username / sasl.password" in lines[0] and "ssl.ca.location" in lines[0]
    assert "pw-" not in lines[0]


def test_one_java_key_names_its_librdkafka_key(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        client_config(source({"kafka.sasl.jaas.config": 'x required username="u" password="p";'}))
    assert [r.getMessage() for r in caplog.records] == [
        "source.kafka_options.kafka.sasl.jaas.config is the Java client's form; write sasl.username / sasl.password"
    ]


def test_java_only_keys_are_refused_in_one_line() -> None:
    options = {
        "kafka.ssl.truststore.location": "/etc/kafka/truststore.jks",
        "kafka.ssl.truststore.password": "${env:TRUST_PW}",
        "sasl.login.callback.handler.class": "com.example.Login",
    }
    with pytest.raises(ConfigError) as refused:
        client_config(source(options))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        "source.kafka_options kafka.ssl.truststore.location, kafka.ssl.truststore.password, "
        "sasl.login.callback.handler.class have no librdkafka form: write "
    )
    assert "ssl.ca.location (a PEM file)" in message and "source.kafka_auth (Entra ID)" in message
    # The legacy pair still names them for Spark's reader choice, without raising.
    assert client_security_options(source(options))[1] == sorted(options)


def test_a_java_only_key_beside_its_librdkafka_form_is_spark_s_copy() -> None:
    options = {"kafka.ssl.truststore.location": "/t.jks", "ssl.ca.location": "/ca.pem"}
    assert client_config(source(options))["ssl.ca.location"] == "/ca.pem"
    given_by_caller = client_config(source({"kafka.ssl.truststore.location": "/t.jks"}), **{"ssl.ca.location": "/c"})
    assert "ssl.truststore.location" not in given_by_caller


def test_an_oauthbearer_jaas_line_has_no_librdkafka_form() -> None:
    jaas = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    with pytest.raises(ConfigError, match="kafka_auth"):
        client_config(source({"sasl.jaas.config": jaas}))


def test_entra_adds_oauthbearer_with_the_namespace_scope() -> None:
    config = client_config(
        source(bootstrap=EVENT_HUBS, kafka_auth={"kind": "entra", "credential": "workload_identity"})
    )
    assert config["security.protocol"] == "SASL_SSL" and config["sasl.mechanisms"] == "OAUTHBEARER"
    auth = EntraAuth.from_config_string(config["sasl.oauthbearer.config"])
    assert auth is not None and auth.scope == "https://mirror-ns.servicebus.windows.net/.default"
    assert auth.identity.kind == "workload_identity"
    assert isinstance(config["oauth_cb"], EntraTokenCallback)
    strings, skipped = client_security_options(
        source(bootstrap=EVENT_HUBS, kafka_auth={"kind": "entra", "credential": "workload_identity"})
    )
    assert skipped == [] and "oauth_cb" not in strings and all(isinstance(v, str) for v in strings.values())


def test_entra_keeps_sasl_plaintext_and_takes_an_explicit_scope() -> None:
    auth = {"kind": "entra", "credential": {"kind": "managed_identity", "client_id": "mi"}, "scope": "api://k/.default"}
    config = client_config(source({"security.protocol": "SASL_PLAINTEXT"}, bootstrap="127.0.0.1:9092", kafka_auth=auth))
    assert config["security.protocol"] == "SASL_PLAINTEXT"
    assert EntraAuth.from_config_string(config["sasl.oauthbearer.config"]).scope == "api://k/.default"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("options", "bootstrap", "problem"),
    [
        ({}, "broker.example.com:9093", "source.kafka_auth.scope is required"),
        ({"sasl.username": "u", "sasl.password": "p"}, EVENT_HUBS, "remove source.kafka_options sasl.username"),
        ({"security.protocol": "SSL"}, EVENT_HUBS, "security.protocol SSL"),
        ({"sasl.mechanism": "PLAIN"}, EVENT_HUBS, "sasl.mechanism PLAIN"),
    ],
)
def test_entra_refuses_what_does_not_fit(options: dict[str, str], bootstrap: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        client_config(source(options, bootstrap=bootstrap, kafka_auth={"kind": "entra"}))


def test_entra_needs_the_connector_s_own_kafka_source() -> None:
    with pytest.raises(ValueError, match="source.reader spark"):
        source(bootstrap=EVENT_HUBS, reader="spark", kafka_auth={"kind": "entra"})


def test_no_token_or_secret_in_the_logged_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SP_SECRET", "sp-secret-value")
    auth = {
        "kind": "entra",
        "credential": {
            "kind": "client_secret",
            "tenant_id": "t",
            "client_id": "c",
            "client_secret": "${env:SP_SECRET}",
        },
    }
    settings = source({"sasl.password": "hunter2"}, bootstrap=EVENT_HUBS, kafka_auth=auth)
    shown = str(settings.redacted_kafka_options())
    assert "hunter2" not in shown and "sp-secret-value" not in shown
    strings, _ = client_security_options(source(bootstrap=EVENT_HUBS, kafka_auth=auth))
    assert "sp-secret-value" not in str(strings)  # the reference travels, resolved only where the token is fetched


def test_spark_s_source_gets_the_java_client_s_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_PW", 'p"w')
    settings = source(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "mirror",
            "sasl.password": "${env:KAFKA_PW}",
            "ssl.ca.location": "/ca.pem",
        }
    )
    assert settings.resolved_kafka_options() == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" '
        'password="p\\"w";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/ca.pem",
    }
    java = source({"kafka.sasl.jaas.config": "j", "security.protocol": "SASL_SSL"})
    assert java.resolved_kafka_options() == {"kafka.sasl.jaas.config": "j", "kafka.security.protocol": "SASL_SSL"}
