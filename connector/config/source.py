"""``source``: where the Debezium records come from (Kafka or kcat files), their schema registry and dead letters."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator

from connector.config.base import FrozenModel
from connector.secrets import redact, resolve_secret_references
from connector.storage import CredentialKind
from connector.storage.identity import CredentialConfig

_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def _jaas_quoted(value: str) -> str:
    """A value inside a JAAS line's double quotes (backslash and quote escaped, as the Java parser reads them)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


class SchemaRegistrySettings(FrozenModel):
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


class DeadLetterSettings(FrozenModel):
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

    @property
    def identity(self) -> CredentialConfig:
        """The identity of a OneLake / ADLS Gen2 ``url``, whichever form the setting has."""
        return CredentialConfig.of(self.credential)


class KafkaAuthSettings(FrozenModel):
    """How the Kafka clients prove who they are beyond ``kafka_options``: ``entra`` for Microsoft Entra ID.

    ``entra`` (SASL OAUTHBEARER, e.g. Azure Event Hubs): every client of the process, the executors' readers
    included, gets its tokens from azure-identity with the same identity settings as ``landing_zone.credential``,
    so no password is needed where the platform gives the pod an identity.
    """

    kind: Literal["none", "entra"] = Field(
        "none", description="none (kafka_options say it all) or entra (SASL OAUTHBEARER tokens from Entra ID)."
    )
    credential: CredentialKind | CredentialConfig = Field(
        "default",
        description="kind entra: the Azure identity (as landing_zone.credential): a kind, or its settings "
        "(kind, tenant_id, client_id, federated_token_file, client_secret_file, …).",
    )
    scope: str | None = Field(
        None,
        description="kind entra: the token scope; default https://<namespace>.servicebus.windows.net/.default from "
        "the first bootstrap server when it is an Event Hubs namespace, else required.",
    )

    @property
    def identity(self) -> CredentialConfig:
        """The identity, whichever form the setting has."""
        return CredentialConfig.of(self.credential)


class SourceSettings(FrozenModel):
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
        default_factory=dict,
        description="librdkafka client options (security.protocol, sasl.mechanisms, sasl.username, "
        "ssl.ca.location, …), used as they are by every client; ${env:X}/${file:P} for secrets. The Java "
        "client's forms (a kafka. prefix, a PLAIN/SCRAM sasl.jaas.config, PEM trust stores) still work, with a "
        "warning that names the librdkafka key.",
    )
    kafka_auth: KafkaAuthSettings = Field(default_factory=KafkaAuthSettings)
    reader: Literal["direct", "spark"] = Field(
        "direct",
        description="How the executors read a micro-batch's records: 'direct' (Spark plans the offsets, its "
        "Python workers read them with librdkafka: far less CPU per record) or 'spark' (Spark's own Kafka source "
        "reads them, for kafka_options librdkafka has no form of, such as JKS stores; chosen by itself then).",
    )
    planner: Literal["python", "spark"] = Field(
        "python",
        description="What plans the micro-batches' Kafka offsets: 'python' (the connector's own Spark source, "
        "librdkafka; no Kafka jars on Spark's class path) or 'spark' (Spark's Java Kafka source; chosen by itself "
        "when kafka_options hold options librdkafka has no form of). Either continues the other's checkpoint.",
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
        "exporting the count as cdc_mirror_source_lossy_settings, and reads their status every "
        "debezium_status_poll_s (cdc_mirror_debezium_up, cdc_mirror_debezium_failed).",
    )
    debezium_connectors: list[str] = Field(
        default_factory=list,
        description="The connectors to check and watch there; empty: every registered connector.",
    )
    debezium_status_poll_s: float = Field(
        30.0,
        ge=0,
        description="How often run reads the connectors' status from debezium_connect_url: a FAILED task sends "
        "nothing more, so the mirror stops changing while its tables look fine; 0: never.",
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

    @model_validator(mode="after")
    def _entra_needs_the_direct_reader(self) -> SourceSettings:
        java = [f"source.{name} spark" for name in ("reader", "planner") if getattr(self, name) == "spark"]
        if self.kafka_auth.kind == "entra" and java:
            msg = (
                f"source.kafka_auth.kind entra does not work with {' and '.join(java)}: Spark's Java Kafka source "
                "cannot get its tokens from azure-identity"
            )
            raise ValueError(msg)
        return self

    def resolved_kafka_options(self) -> dict[str, str]:
        """Kafka options with secret references resolved, in the Java client's names, prefixed ``kafka.`` for Spark.

        Spark's own source speaks the Java client's dialect: librdkafka's SASL user and password become a
        ``sasl.jaas.config`` line and a PEM ``ssl.ca.location`` a PEM trust store; other names are passed as they
        are (the Java client ignores, with a warning, names it does not know).
        """
        resolved = {
            key.removeprefix("kafka."): resolve_secret_references(raw, f"source.kafka_options.{key}")
            for key, raw in self.kafka_options.items()
        }
        mechanism = resolved.pop("sasl.mechanisms", None)
        if mechanism:
            resolved.setdefault("sasl.mechanism", mechanism)
        user, password = resolved.pop("sasl.username", None), resolved.pop("sasl.password", None)
        if user is not None and password is not None and "sasl.jaas.config" not in resolved:
            module = _JAAS_MODULES["SCRAM" if resolved.get("sasl.mechanism", "").startswith("SCRAM") else "PLAIN"]
            resolved["sasl.jaas.config"] = (
                f'{module} required username="{_jaas_quoted(user)}" password="{_jaas_quoted(password)}";'
            )
        ca = resolved.pop("ssl.ca.location", None)
        if ca and "ssl.truststore.location" not in resolved:
            resolved.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": ca})
        return {f"kafka.{key}": value for key, value in resolved.items()}

    def redacted_kafka_options(self) -> dict[str, str]:
        """Kafka options safe to log."""
        return {k: redact(k, v) for k, v in self.kafka_options.items()}
