"""The one way every Kafka client of the process is configured: librdkafka options from ``source``.

``source.kafka_options`` is written in librdkafka's names and used as it is by every client (the executors'
readers, the start-up and broker checks, the dead-letter and signal producers, the admin clients). Configs
written for Spark's Java client keep working: a ``kafka.`` prefix, a PLAIN / SCRAM ``sasl.jaas.config`` and PEM
trust or key stores are translated, with one warning line that names the librdkafka key to write instead.
Java-only options with no librdkafka form (JKS stores, login callback classes) are refused by ``client_config``
with one line naming them, unless the librdkafka form is given beside them (then they are Spark's copy).
``source.kafka_auth`` ``entra`` adds SASL OAUTHBEARER with tokens from Microsoft Entra ID
(``connector.kafka_token``).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from connector.config import SourceSettings
from connector.errors import ConfigError
from connector.kafka_token import EntraAuth, event_hubs_scope, with_token_callback
from connector.secrets import resolve_secret_references

log = logging.getLogger(__name__)

_JAAS_CREDENTIAL = re.compile(r"""\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)\"""")
_SASL_PROTOCOLS = ("SASL_SSL", "SASL_PLAINTEXT")

# Java-only options, and the librdkafka option that stands for each (given beside it, the Java one is Spark's copy).
_JAVA_ONLY = {
    "ssl.truststore.location": "ssl.ca.location",
    "ssl.truststore.password": "ssl.ca.location",
    "ssl.truststore.type": "ssl.ca.location",
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.keystore.type": "ssl.certificate.location",
    "ssl.keystore.key": "ssl.key.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "ssl.protocol": "ssl.cipher.suites",
    "ssl.enabled.protocols": "ssl.cipher.suites",
    "ssl.trustmanager.algorithm": "ssl.ca.location",
    "ssl.keymanager.algorithm": "ssl.certificate.location",
    "ssl.engine.factory.class": "ssl.engine.location",
    "sasl.jaas.config": "sasl.username",
    "sasl.login.callback.handler.class": "sasl.oauthbearer.config",
    "sasl.client.callback.handler.class": "sasl.oauthbearer.config",
    "sasl.login.class": "sasl.oauthbearer.config",
    "max.poll.records": "queued.max.messages.kbytes",
    "key.deserializer": "bootstrap.servers",
    "value.deserializer": "bootstrap.servers",
}
# Java-only keys translated when their value allows (a PLAIN / SCRAM JAAS line, PEM stores).
_TRANSLATED = frozenset({"sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.type"})
# What the refusal tells to write instead, where the counterpart's name alone would not say it.
_WRITE_INSTEAD = {
    "sasl.username": "sasl.username / sasl.password (PLAIN, SCRAM) or source.kafka_auth (Entra ID)",
    "sasl.oauthbearer.config": "source.kafka_auth (Entra ID) or librdkafka's sasl.oauthbearer.* options",
    "ssl.ca.location": "ssl.ca.location (a PEM file)",
    "ssl.certificate.location": "ssl.certificate.location and ssl.key.location (PEM), or a PKCS#12 keystore",
    "bootstrap.servers": "nothing (librdkafka hands out bytes)",
}


@dataclass
class _Dialect:
    """``source.kafka_options`` in librdkafka's names: the options, what was renamed, what has no form."""

    options: dict[str, Any] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)  # the key as written -> the librdkafka key(s)
    java_only: list[str] = field(default_factory=list)  # keys as written


def client_config(source: SourceSettings, **extra: Any) -> dict[str, Any]:
    """Every option of a client of the source's brokers: security, ``bootstrap.servers``, ``extra``, ``oauth_cb``.

    ``extra`` are the caller's own options (a group id, ``error_cb``, a producer's acks), in librdkafka's names;
    they win over ``source.kafka_options`` and may give the librdkafka form of a Java-only option.

    Raises:
        ConfigError: An option has no librdkafka form (one line naming each and what to write instead), or
            ``source.kafka_auth`` does not fit the options.
    """
    dialect = _translate(source)
    options = {**dialect.options, "bootstrap.servers": str(source.bootstrap_servers), **extra}
    refused = [key for key in dialect.java_only if _counterpart(key) not in options]
    if refused:
        instead = sorted({_instead(_counterpart(key)) for key in refused})
        msg = (
            f"source.kafka_options {', '.join(sorted(refused))} "
            f"{'has' if len(refused) == 1 else 'have'} no librdkafka form: write {'; '.join(instead)}"
        )
        raise ConfigError(msg)
    return with_token_callback(options)


def client_security_options(source: SourceSettings) -> tuple[dict[str, Any], list[str]]:
    """(librdkafka options of ``source.kafka_options`` and ``kafka_auth``, keys with no librdkafka form).

    The options are strings only (no callback), to be shipped where clients are built: pass them through
    ``connector.kafka_token.with_token_callback`` there. ``client_config`` is the whole configuration.
    """
    dialect = _translate(source)
    return dialect.options, sorted(dialect.java_only)


def _translate(source: SourceSettings) -> _Dialect:
    dialect = _Dialect()
    stores = {_bare(key): value for key, value in source.kafka_options.items() if _bare(key).endswith("store.type")}
    for raw_key, raw_value in source.kafka_options.items():
        key = _bare(raw_key)
        if key in _JAVA_ONLY and key not in _TRANSLATED:
            dialect.java_only.append(raw_key)  # never used here: its secret reference is not resolved
            continue
        value = resolve_secret_references(raw_value, f"source.kafka_options.{raw_key}")
        if key == "sasl.jaas.config":
            _jaas(dialect, raw_key, value)
        elif key == "ssl.truststore.location" and stores.get("ssl.truststore.type", "").upper() == "PEM":
            _rename(dialect, raw_key, {"ssl.ca.location": value})
        elif key == "ssl.keystore.location" and stores.get("ssl.keystore.type", "").upper() == "PEM":
            _rename(dialect, raw_key, {"ssl.certificate.location": value, "ssl.key.location": value})
        elif key == "ssl.keystore.location" and stores.get("ssl.keystore.type", "PKCS12").upper() != "PKCS12":
            dialect.java_only.append(raw_key)  # librdkafka's keystore is PKCS#12 only
        elif key in ("ssl.truststore.type", "ssl.keystore.type") and value.upper() in ("PEM", "PKCS12"):
            dialect.renamed.setdefault(raw_key, "nothing")  # said by the location's translation
        elif key in _JAVA_ONLY:
            dialect.java_only.append(raw_key)  # e.g. a JKS store's location
        elif key == "ssl.endpoint.identification.algorithm" and not value:
            _rename(dialect, raw_key, {key: "none"})  # the Java client's empty value turns the check off
        elif key != raw_key:
            _rename(dialect, raw_key, {key: value})
        else:
            dialect.options[key] = value
    if source.kafka_auth.kind == "entra":
        _entra(dialect, source)
    _warn_once(dialect)
    return dialect


def _jaas(dialect: _Dialect, raw_key: str, value: str) -> None:
    """A PLAIN / SCRAM JAAS line becomes librdkafka's user and password; any other login module has no form."""
    credentials = {m[1]: re.sub(r"\\(.)", r"\1", m[2]) for m in _JAAS_CREDENTIAL.finditer(value)}
    if "username" in credentials and "password" in credentials:
        _rename(dialect, raw_key, {"sasl.username": credentials["username"], "sasl.password": credentials["password"]})
    else:
        dialect.java_only.append(raw_key)


def _entra(dialect: _Dialect, source: SourceSettings) -> None:
    """SASL OAUTHBEARER with the Entra identity described for ``connector.kafka_token``'s callback."""
    options = dialect.options
    scope = source.kafka_auth.scope or event_hubs_scope(source.bootstrap_servers)
    if not scope:
        msg = (
            "source.kafka_auth.scope is required: the first bootstrap server is not an Event Hubs namespace "
            "(<namespace>.servicebus.windows.net:9093), so the token's audience cannot be derived"
        )
        raise ConfigError(msg)
    mechanism = str(options.pop("sasl.mechanism", None) or options.get("sasl.mechanisms") or "OAUTHBEARER")
    protocol = str(options.get("security.protocol") or "SASL_SSL").upper()
    clash = [k for k in ("sasl.username", "sasl.password", "sasl.oauthbearer.method") if k in options]
    if mechanism.upper() != "OAUTHBEARER" or protocol not in _SASL_PROTOCOLS or clash:
        shown = ", ".join(clash) or f"security.protocol {protocol}, sasl.mechanism {mechanism}"
        msg = f"source.kafka_auth.kind entra is SASL OAUTHBEARER over SASL_SSL: remove source.kafka_options {shown}"
        raise ConfigError(msg)
    options.update(
        {
            "security.protocol": protocol,
            "sasl.mechanisms": "OAUTHBEARER",
            "sasl.oauthbearer.config": EntraAuth(source.kafka_auth.identity, scope).config_string(),
        }
    )


def _rename(dialect: _Dialect, raw_key: str, options: dict[str, str]) -> None:
    for key, value in options.items():
        dialect.options.setdefault(key, value)
    dialect.renamed[raw_key] = " / ".join(options)


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(dialect: _Dialect) -> None:
    """One line for the Java-style keys, once per process (every client of the process is built from them)."""
    if not dialect.renamed:
        return
    keys = sorted(dialect.renamed)
    targets = [dialect.renamed[key] for key in keys if dialect.renamed[key] != "nothing"]
    verb = "is" if len(keys) == 1 else "are"
    line = f"source.kafka_options.{', source.kafka_options.'.join(keys)} {verb} the Java client's form"
    line += f"; write {', '.join(targets)}" if targets else "; remove it"
    with _warned_lock:
        if line in _warned:
            return
        _warned.add(line)
    log.warning("%s", line)


def _bare(key: str) -> str:
    return key.removeprefix("kafka.")


def _counterpart(key: str) -> str:
    # A keystore's location is librdkafka's name too, for PKCS#12 only: a JKS one stands for the PEM certificate.
    return _JAVA_ONLY.get(_bare(key), "ssl.certificate.location")


def _instead(librdkafka_key: str) -> str:
    return _WRITE_INSTEAD.get(librdkafka_key, librdkafka_key)
