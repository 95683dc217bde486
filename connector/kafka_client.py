"""librdkafka client options from ``source.kafka_options``, which are written for Spark's Java Kafka client.

The driver's own Kafka clients (the dead-letter producer, the broker check behind /readyz, the start-up
check) reach the same brokers as Spark's source, so they take its security settings: options librdkafka
shares with the Java client as they are, and a PLAIN / SCRAM ``sasl.jaas.config`` as ``sasl.username`` /
``sasl.password``. Java-only options (JKS stores, callback classes) have no librdkafka form and are returned
as skipped, for the caller to name.
"""

from __future__ import annotations

import re
from typing import Any

from connector.config import SourceSettings
from connector.secrets import resolve_secret_references

# librdkafka names that mean the same as the Java client's.
_SHARED_OPTIONS = {
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "client.id",
    "client.dns.lookup",
}
_SHARED_PREFIXES = ("sasl.oauthbearer.", "sasl.kerberos.")
_JAAS_CREDENTIAL = re.compile(r"""\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)\"""")


def client_security_options(source: SourceSettings) -> tuple[dict[str, Any], list[str]]:
    """(librdkafka options, names of ``source.kafka_options`` that have no librdkafka equivalent)."""
    options: dict[str, Any] = {}
    skipped = []
    for raw_key, raw_value in source.kafka_options.items():
        key = raw_key.removeprefix("kafka.")
        if key == "sasl.jaas.config":
            value = resolve_secret_references(raw_value, f"source.kafka_options.{raw_key}")
            credentials = {m[1]: m[2] for m in _JAAS_CREDENTIAL.finditer(value)}
            if "username" in credentials and "password" in credentials:
                options.setdefault("sasl.username", credentials["username"])
                options.setdefault("sasl.password", credentials["password"])
            else:
                skipped.append(raw_key)
        elif key in _SHARED_OPTIONS or key.startswith(_SHARED_PREFIXES):
            options[key] = resolve_secret_references(raw_value, f"source.kafka_options.{raw_key}")
        else:
            skipped.append(raw_key)
    return options, skipped
