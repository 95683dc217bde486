"""Checks ``run`` makes before Spark starts, so a bad setting costs a second and one ``error:`` line.

Spark takes seconds to start, and then reports most problems as a JVM stack trace, or not at all: its
Kafka source waits for ever on a broker that never answers (an ``available-now`` run never ends), and a
landing zone that is a file fails only at the first batch. Everything that can be known from the
settings, the local filesystem, a listing and a write probe of a OneLake landing zone and one Kafka
metadata request is checked here first; each failure is a ``ConfigError`` (or, for OneLake, a
``StorageError``) whose message names the setting and the path, URL, port or broker, never a secret.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata

from connector.config import ConnectorSettings, SourceSettings
from connector.errors import ConfigError
from connector.kafka_client import client_config
from connector.kafka_token import entra_description, token_failure
from connector.operate.metrics import metrics_port_problem
from connector.spark.source import kafka_jars, plans_with_python, source_path
from connector.storage.base import TEMP_PREFIX, Storage
from connector.storage.errors import InvalidCredential, StorageError
from connector.storage.location import StorageLocation

log = logging.getLogger(__name__)

#: librdkafka errors that retrying does not cure: the brokers answer, but refuse this client.
_REFUSALS = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._SSL,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)
#: librdkafka options whose values are secrets, scrubbed from any broker message quoted in an error.
_SECRET_OPTIONS = ("sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret")
#: How long one metadata request may wait, so a refusal reported meanwhile is seen early.
_ATTEMPT_S = 2.0


@dataclass(frozen=True)
class Checked:
    """What the checks found and opened, handed on so nothing is opened twice.

    Attributes:
        landing: The landing zone, opened (a OneLake one listed and write-probed already); the caller owns it.
        topics: The Kafka topics ``source.topics`` matches now, with their partition counts (``None`` for the file
            source, or a Java-only pattern).
    """

    landing: Storage
    topics: dict[str, int] | None


def check_before_spark(settings: ConnectorSettings) -> Checked:
    """Check the checkpoint, the landing zone, the metrics port and the source before Spark starts.

    The checkpoint must be a local folder (Spark's checkpoint lives in it). Local checks come first: they take
    milliseconds, a OneLake landing zone about a second, the Kafka check up to ``source.connect_timeout_s``.

    Returns:
        The landing zone, opened once for the checks and the job, and the topics found.

    Raises:
        ConfigError: The first problem found, naming the setting and what it points at.
        StorageError: A OneLake landing zone is missing or refuses the identity (``open_remote_landing_zone``).
    """
    if settings.checkpoint_location.remote:
        msg = "the Spark checkpoint must be a local or mounted folder (a PVC); put only the landing zone on OneLake"
        raise ConfigError(msg)
    landing_zone = settings.landing_zone.location  # an empty, SAS-carrying or malformed URL is refused here
    if not landing_zone.remote:
        check_local_folder(landing_zone.url, "landing_zone.url")
    check_local_folder(settings.checkpoint, "checkpoint")
    check_metrics_port(settings.metrics.port)
    source = settings.source
    if landing_zone.remote and source.kind == "files" and not source.path:
        msg = (
            f"no source is configured for the OneLake landing zone {landing_zone.url}: without "
            "source.bootstrap_servers (--bootstrap-servers, CONNECTOR_SOURCE__BOOTSTRAP_SERVERS) or source.path, "
            "run reads its packaged sample events, which belong in a local landing zone only"
        )
        raise ConfigError(msg)
    landing = open_remote_landing_zone(landing_zone) if landing_zone.remote else landing_zone.absolute().open()
    try:
        return Checked(landing, _check_source(settings))
    except BaseException:
        landing.close()
        raise


def _check_source(settings: ConnectorSettings) -> dict[str, int] | None:
    source = settings.source
    if source.kind == "files":
        source_path(source)
        return None
    if not source.bootstrap_servers:
        msg = "source.bootstrap_servers is required for source.kind=kafka (--bootstrap-servers)"
        raise ConfigError(msg)
    if not plans_with_python(source):
        kafka_jars()  # Spark's Java source plans: its jars must be there, and of this Spark
    return check_kafka(source, settings.trigger)


def open_remote_landing_zone(location: StorageLocation) -> Storage:
    """Open a OneLake / ADLS Gen2 landing zone and prove it with the job's identity: list its folder, write a probe.

    The folder must exist already (Fabric creates ``Files/LandingZone`` with the mirrored database): a
    misspelt folder would otherwise be created by the first write, and the mirror published where the
    mirroring service never looks. The probe (a ``_tmp_`` file, created and deleted) catches an identity
    that may read but not write before the first batch does.

    Returns:
        The landing zone, opened and proven: the job writes through this client (one token on OneLake).

    Raises:
        ConfigError: The credential settings are incomplete (a missing secret, tenant or client id).
        StorageError: The workspace, item or folder does not exist (``StorageNotFound``), the identity
            is refused (``StorageAccessDenied``) or the service did not answer (``StorageUnavailable``);
            the message starts with ``landing_zone.url <url>``.
    """
    try:
        storage = location.open_remote()
    except InvalidCredential as exc:
        msg = f"landing_zone.credential {location.identity.kind}: {exc}"
        raise ConfigError(msg) from None
    try:
        storage.check(create_root=False, probe_write=True)
    except StorageError as exc:
        storage.close()
        msg = f"landing_zone.url {location.url.strip()}: {exc}"  # a URL with a query was refused before
        raise type(exc)(msg, path=exc.path, operation=exc.operation) from None
    except BaseException:
        storage.close()
        raise
    return storage


def check_local_folder(folder: str, setting: str) -> None:
    """Make sure ``folder`` is a folder this process can write, creating it when missing.

    Probes with a real write (a ``_tmp_`` file, which open mirroring ignores and start-up clean-up
    removes): permission bits do not tell a read-only mount, a full disk or an ACL.
    """
    if not folder.strip():
        msg = f"{setting} is empty; give a folder"
        raise ConfigError(msg)
    path = Path(folder)
    if path.exists() and not path.is_dir():
        msg = f"{setting} {path} is a file, not a folder"
        raise ConfigError(msg)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"{setting} {path} cannot be created: {_reason(exc)}"
        raise ConfigError(msg) from None
    try:
        handle, probe = tempfile.mkstemp(dir=path, prefix=f"{TEMP_PREFIX}preflight_")
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        msg = f"{setting} {path} is not writable: {_reason(exc)}"
        raise ConfigError(msg) from None


def check_metrics_port(port: int) -> None:
    """Refuse a metrics port another process listens on (the endpoint would fail only after start-up)."""
    if not port:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As the metrics server binds: a port in TIME_WAIT is free, one with a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))  # noqa: S104 - the address the metrics server binds
        except OSError as exc:
            raise ConfigError(metrics_port_problem(port, exc)) from None


def check_kafka(source: SourceSettings, trigger: str) -> dict[str, int] | None:
    """One metadata request with the source's own security settings, bounded by ``source.connect_timeout_s``.

    Spark's Kafka source waits for ever on brokers that do not answer and reports refused credentials
    only as a JVM stack trace. librdkafka reports a refusal through the error callback while the request
    is pending, so the wait is cut into short attempts and a refusal ends it at once.

    Returns:
        The topics ``source.topics`` matches (whole name, as Spark's subscribePattern) with their partition
        counts; ``None`` when the pattern is a Java-only regex Python cannot judge.

    Raises:
        ConfigError: No broker answered in time, or the brokers refused the client's credentials.
    """
    bootstrap = str(source.bootstrap_servers)
    options = client_config(source)
    metadata = _broker_metadata(bootstrap, options, source.connect_timeout_s)
    matching = _matching_topics(source.topics, list(metadata.topics), bootstrap, trigger)
    if matching is None:
        return None
    return {topic: len(metadata.topics[topic].partitions) for topic in matching}


def _broker_metadata(bootstrap: str, options: dict[str, Any], timeout_s: float) -> ClusterMetadata:
    """The cluster's metadata once a broker answers; a refusal ends the wait at once, silence at ``timeout_s``.

    Raises:
        ConfigError: No broker answered in time, or the brokers refused the client's credentials.
    """
    reported: list[KafkaError] = []
    # Errors arrive through error_cb; librdkafka's own log would repeat them on stderr.
    options = {**options, "bootstrap.servers": bootstrap, "error_cb": reported.append, "log_level": 0}
    identity = entra_description(options)
    try:
        admin = AdminClient(options)  # with an Entra identity, the first token is fetched here
    except KafkaException as exc:
        failure = token_failure(options)
        reason = _scrub(str(exc.args[0]), options) if failure is None else failure
        msg = f"Kafka broker {bootstrap} not tried: {reason}"
        raise ConfigError(msg) from None
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            metadata = admin.list_topics(timeout=max(0.1, min(_ATTEMPT_S, remaining)))
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError):
                reported.append(error)
        else:
            if metadata.brokers:
                return metadata
        admin.poll(0)  # serves error_cb
        refusal = next((e for e in reported if e.code() in _REFUSALS), None)
        if refusal is not None:
            who = f"the identity {identity}" if identity else "the connector"
            msg = (
                f"Kafka broker {bootstrap} refused {who} "
                f"(security.protocol={options.get('security.protocol', 'PLAINTEXT')}, "
                f"sasl.mechanism={options.get('sasl.mechanism') or options.get('sasl.mechanisms') or 'none'}): "
                f"{_scrub(refusal.str(), options)}; check source.kafka_options"
            )
            raise ConfigError(msg)
        if time.monotonic() >= deadline:
            last = _scrub(reported[-1].str(), options) if reported else "no answer"
            msg = f"no Kafka broker of {bootstrap} answered within {timeout_s:g}s (source.connect_timeout_s): {last}"
            raise ConfigError(msg)


def _matching_topics(pattern: str, topics: list[str], bootstrap: str, trigger: str) -> list[str] | None:
    """The topics ``pattern`` matches; none yet is normal before Debezium's first snapshot: a warning, not an error."""
    try:
        compiled = re.compile(pattern)
    except re.error:
        return None  # a Java-only construct: Spark judges it
    matching = sorted(topic for topic in topics if compiled.fullmatch(topic))
    if not matching:
        outcome = "this run will find nothing to do" if trigger == "available-now" else "waiting for one to appear"
        log.warning("no topic on %s matches source.topics %r yet; %s", bootstrap, pattern, outcome)
    return matching


def _scrub(text: str, options: dict[str, object]) -> str:
    """Remove any configured secret from a broker or librdkafka message before it is shown."""
    for name in _SECRET_OPTIONS:
        value = options.get(name)
        if isinstance(value, str) and value:
            text = text.replace(value, "***")
    return text


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__
