"""Entra ID tokens for Kafka: the scope, the description shipped with the options, the callback, no token shown."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError

from connector import kafka_token as entra_token
from connector.errors import ConfigError
from connector.kafka_token import (
    EntraAuth,
    EntraTokenCallback,
    EntraTokenError,
    event_hubs_scope,
    token_failure,
    with_token_callback,
)
from connector.storage import credentials
from connector.storage.identity import CredentialConfig

TOKEN = "eyJhbGciOiJSUzI1NiJ9.secret-token-body.signature"  # noqa: S105 - a fake token


@pytest.mark.parametrize(
    ("bootstrap", "scope"),
    [
        ("mirror-ns.servicebus.windows.net:9093", "https://mirror-ns.servicebus.windows.net/.default"),
        ("Mirror-NS.ServiceBus.Windows.Net:9093,other:9093", "https://mirror-ns.servicebus.windows.net/.default"),
        ("cn-ns.servicebus.chinacloudapi.cn:9093", "https://cn-ns.servicebus.chinacloudapi.cn/.default"),
        ("mirror-ns.servicebus.windows.net", "https://mirror-ns.servicebus.windows.net/.default"),
        ("broker-1.example.com:9093", None),
        ("servicebus.windows.net:9093", None),
        ("127.0.0.1:9092", None),
        ("", None),
        (None, None),
    ],
)
def test_the_scope_is_the_event_hubs_namespace_of_the_first_bootstrap_server(
    bootstrap: str | None, scope: str | None
) -> None:
    assert event_hubs_scope(bootstrap) == scope


def test_the_description_travels_as_a_string_and_comes_back() -> None:
    identity = CredentialConfig(
        kind="workload_identity", tenant_id="t-1", client_id="c-1", federated_token_file=Path("/var/run/token")
    )
    auth = EntraAuth(identity, "https://ns.servicebus.windows.net/.default")
    text = auth.config_string()
    assert text.startswith(entra_token.CONFIG_PREFIX)
    assert EntraAuth.from_config_string(text) == auth
    assert EntraAuth.from_config_string("principal=admin") is None  # librdkafka's unsecured-JWT form: not ours
    assert (
        auth.describe()
        == "workload_identity (tenant t-1, client id c-1) for https://ns.servicebus.windows.net/.default"
    )


def test_a_secret_travels_only_as_a_reference() -> None:
    scope = "https://ns.servicebus.windows.net/.default"
    referenced = CredentialConfig(kind="client_secret", tenant_id="t", client_id="c", client_secret="${env:SP_SECRET}")
    assert "${env:SP_SECRET}" in EntraAuth(referenced, scope).config_string()
    inline = CredentialConfig(kind="client_secret", tenant_id="t", client_id="c", client_secret="hunter2-inline")
    with pytest.raises(ConfigError, match="client_secret must be a") as refused:
        EntraAuth(inline, scope).config_string()
    assert "hunter2-inline" not in str(refused.value)


class FakeCredential:
    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **_: Any) -> AccessToken:
        self.scopes.append(scopes)
        if self.fail is not None:
            raise self.fail
        return AccessToken(TOKEN, 1_900_000_000)


def callback_with(monkeypatch: pytest.MonkeyPatch, credential: FakeCredential) -> EntraTokenCallback:
    from connector.storage.credentials import StorageIdentity

    def build(config: CredentialConfig, environ: Any = None, *, scope: str) -> StorageIdentity:
        return StorageIdentity(credential, config.kind, config.kind)  # type: ignore[arg-type]

    monkeypatch.setattr(credentials, "build_credential", build)  # imported where a token is first asked for
    identity = CredentialConfig(kind="managed_identity", client_id="mi-1")
    return EntraTokenCallback(EntraAuth(identity, "https://ns.servicebus.windows.net/.default"))


def test_the_callback_returns_the_token_and_its_expiry(monkeypatch: pytest.MonkeyPatch) -> None:
    credential = FakeCredential()
    callback = callback_with(monkeypatch, credential)
    assert callback("ignored librdkafka config") == (TOKEN, 1_900_000_000.0)
    assert credential.scopes == [("https://ns.servicebus.windows.net/.default",)]
    assert TOKEN not in repr(callback)


def test_a_refusal_names_the_identity_and_the_scope_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    refused = ClientAuthenticationError("AADSTS700016: Application with identifier 'mi-1' was not found\nmore")
    callback = callback_with(monkeypatch, FakeCredential(refused))
    with caplog.at_level(logging.WARNING, "connector.kafka_token"):
        for _ in range(3):
            with pytest.raises(EntraTokenError) as error:
                callback()
    assert str(error.value) == (
        "Microsoft Entra ID gave no token to managed_identity (client id mi-1) for "
        "https://ns.servicebus.windows.net/.default: AADSTS700016: Application with identifier 'mi-1' was not found"
    )
    assert len(caplog.records) == 1  # librdkafka asks again and again: the reason is logged once
    assert callback.last_failure == str(error.value)
    assert token_failure({"oauth_cb": callback}) == str(error.value)


def test_options_describing_an_identity_get_the_callback_once_per_process() -> None:
    auth = EntraAuth(CredentialConfig(kind="managed_identity"), "https://ns.servicebus.windows.net/.default")
    options = {"sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.config": auth.config_string()}
    built = with_token_callback(options)
    assert isinstance(built["oauth_cb"], EntraTokenCallback) and "oauth_cb" not in options
    assert with_token_callback(dict(options))["oauth_cb"] is built["oauth_cb"]  # one credential and cache
    plain = {"sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.config": "principal=admin"}
    assert "oauth_cb" not in with_token_callback(plain)
    assert with_token_callback({"bootstrap.servers": "b:9092"}) == {"bootstrap.servers": "b:9092"}
