"""The schema-registry client of the Avro decoder: writer schemas by id, with the connector's retry policy.

Writer schemas are fetched by id from a Confluent-compatible registry (confluent-kafka's
``SchemaRegistryClient``; Apicurio's ``ccompat`` API works too) and parsed once per id per process.
A registry that cannot be reached is retried with exponential backoff and jitter for
``max_unavailable_s``, then ``RegistryUnavailable`` (transient) fails the batch; an id the registry
does not know, or a schema that is no readable Avro, is the record's fault (``DecodeError``).

It is separate from ``avro`` (decoding records) because talking to a registry over HTTP (credentials,
retries, the per-process caches) is a job of its own; ``avro`` only asks it for a ``WriterSchema``.
"""

from __future__ import annotations

import functools
import importlib
import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Any

from connector.config import SchemaRegistrySettings
from connector.debezium.avro_shape import WriterSchema
from connector.errors import ConfigError, DecodeError, RegistryError, RegistryUnavailable
from connector.events import KafkaRecord
from connector.secrets import redact_url, resolve_secret_references

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient


_LOG = logging.getLogger(__name__)

#: HTTP statuses that mean "the registry is not available right now" (confluent-kafka's own retry set).
RETRIABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: Confluent's error code for an unknown schema id; a 404 without it means a wrong URL, not a bad record.
SCHEMA_NOT_FOUND = 40403

_BACKOFF_FIRST_S = 0.5
_BACKOFF_MAX_S = 30.0
#: How long a schema id the registry did not know is answered from memory, so a run of records with a
#: bad id does not send one request each; short, because a lagging registry replica may learn it.
_MISSING_TTL_S = 30.0
_CACHE_LIMIT = 4096


# Per process: the decoders of one Spark Python worker share what they fetched. Schema ids are immutable.
_LOCK = threading.Lock()
_WRITER_SCHEMAS: dict[tuple[str, int], WriterSchema] = {}
_UNREADABLE: dict[tuple[str, int], str] = {}
_MISSING: dict[tuple[str, int], tuple[float, str]] = {}


class SchemaRegistry:
    """Writer schemas by id, through confluent-kafka's client, with the connector's retry policy.

    The client is created on first use, in the process that decodes: it holds an HTTP connection pool
    and the resolved secrets, neither of which should be pickled into Spark's closures.
    """

    def __init__(self, settings: SchemaRegistrySettings) -> None:
        if not settings.url:
            msg = "source.schema_registry.url is required when source.value_format is avro"
            raise ConfigError(msg)
        self._settings = settings
        self._url = settings.url
        self.display_url = redact_url(settings.url)
        self._client: SchemaRegistryClient | None = None
        self._secrets: tuple[str, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self._settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"])  # type: ignore[misc]

    def writer_schema(self, schema_id: int, record: KafkaRecord, part: str) -> WriterSchema:
        """The parsed writer schema ``schema_id``.

        Raises:
            DecodeError: the registry does not know the id, or it is no readable Avro schema.
            RegistryUnavailable: the registry stayed unreachable for ``max_unavailable_s``.
            RegistryError: the registry refused the credentials or is not a schema registry.
        """
        key = (self._url, schema_id)
        cached = _WRITER_SCHEMAS.get(key)
        if cached is not None:
            return cached
        reason = _UNREADABLE.get(key)
        missing = _MISSING.get(key)
        if missing is not None and time.monotonic() - missing[0] < _MISSING_TTL_S:
            reason = missing[1]
        if reason is None:
            fetched = self._fetch(schema_id, record, part)
            if fetched is None:
                reason = f"{part} schema id {schema_id} is not in the registry {self.display_url}"
                with _LOCK:
                    _bounded(_MISSING)[key] = (time.monotonic(), reason)
            else:
                text, schema_type = fetched
                try:
                    if schema_type.upper() != "AVRO":
                        msg = f"schema id {schema_id} is a {schema_type} schema, not Avro"
                        raise ValueError(msg)
                    writer = WriterSchema.parse(schema_id, text)
                except ValueError as exc:
                    reason = f"{part}: {exc}"
                    with _LOCK:
                        _bounded(_UNREADABLE)[key] = reason
                else:
                    with _LOCK:
                        _bounded(_WRITER_SCHEMAS)[key] = writer
                    return writer
        raise DecodeError.at(record, reason)

    def _fetch(self, schema_id: int, record: KafkaRecord, part: str) -> tuple[str, str] | None:
        """Schema text and type of ``schema_id``; ``None`` when the registry says it does not exist."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        started = time.monotonic()
        deadline = started + self._settings.max_unavailable_s
        attempt = 0
        while True:
            try:
                schema = self._registry_client().get_schema(schema_id)
            except SchemaRegistryError as exc:
                status = int(exc.http_status_code)
                if status == 404 and exc.error_code == SCHEMA_NOT_FOUND:
                    return None
                if status in RETRIABLE_STATUSES:
                    reason = f"HTTP {status}: {self._scrub(str(exc.error_message))}"
                elif status in (401, 403):
                    msg = (
                        f"schema registry {self.display_url} refused the credentials (HTTP {status}) while "
                        f"fetching {part} schema id {schema_id} for {record.position}; check "
                        "source.schema_registry.basic_auth_user / basic_auth_password / bearer_token"
                    )
                    raise RegistryError(msg) from None
                else:
                    msg = (
                        f"schema registry {self.display_url} answered HTTP {status} "
                        f"({self._scrub(str(exc.error_message))}) for {part} schema id {schema_id} of "
                        f"{record.position}: is source.schema_registry.url the registry's Confluent-compatible API?"
                    )
                    raise RegistryError(msg) from None
            except _transport_errors() as exc:
                reason = f"{type(exc).__name__}: {self._scrub(str(exc))}"
            except (ValueError, KeyError, TypeError) as exc:
                # A malformed answer (a proxy's error page, a registry restarting): retried like a 503.
                reason = f"malformed answer: {type(exc).__name__}: {self._scrub(str(exc))}"
            else:
                return str(schema.schema_str), str(getattr(schema, "schema_type", None) or "AVRO")
            now = time.monotonic()
            # Asked twice at least: one slow answer (a loaded machine) alone never ends the wait.
            if now >= deadline and attempt > 0:
                raise RegistryUnavailable(self.display_url, record.position, now - started, reason)
            if attempt % 5 == 0:
                _LOG.warning(
                    "%s: schema registry %s unavailable (%s); retrying %s schema id %d for up to %.0fs more",
                    record.position,
                    self.display_url,
                    reason,
                    part,
                    schema_id,
                    deadline - now,
                )
            step = min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * 2**attempt)
            time.sleep(max(0.0, min(step / 2 + random.uniform(0, step / 2), deadline - now)))  # noqa: S311 (jitter)
            attempt += 1

    def _registry_client(self) -> SchemaRegistryClient:
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            settings = self._settings
            conf: dict[str, Any] = {
                "url": self._url,
                "max.retries": 0,  # the retry policy (and its time budget) is this class's
                "timeout": settings.request_timeout_s,
            }
            secrets: list[str] = []
            if settings.basic_auth_user is not None:
                password = ""
                if settings.basic_auth_password is not None:
                    password = resolve_secret_references(
                        settings.basic_auth_password.get_secret_value(), "source.schema_registry.basic_auth_password"
                    )
                    secrets.append(password)
                conf["basic.auth.user.info"] = f"{settings.basic_auth_user}:{password}"
            if settings.bearer_token is not None:
                token = resolve_secret_references(
                    settings.bearer_token.get_secret_value(), "source.schema_registry.bearer_token"
                )
                secrets.append(token)
                conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
                conf["bearer.auth.token"] = token
                conf["bearer.auth.logical.cluster"] = settings.bearer_logical_cluster
                conf["bearer.auth.identity.pool.id"] = settings.bearer_identity_pool_id
            if settings.ssl_ca_location:
                conf["ssl.ca.location"] = settings.ssl_ca_location
            try:
                self._client = SchemaRegistryClient(conf)
            except (ValueError, TypeError) as exc:
                msg = f"source.schema_registry: {self._scrub(str(exc))} (url {self.display_url})"
                raise ConfigError(msg) from None
            self._secrets = tuple(s for s in secrets if s)
        return self._client

    def _scrub(self, text: str) -> str:
        """``text`` with any resolved secret replaced, for messages built from a library's error."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text.replace(self._url, self.display_url) if self._url != self.display_url else text


def _bounded(cache: dict[Any, Any]) -> dict[Any, Any]:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    return cache


@functools.cache
def _transport_errors() -> tuple[type[Exception], ...]:
    """The registry client's connection errors: httpx2's (confluent-kafka >= 2.16 is built on it) and httpx's."""
    errors: list[type[Exception]] = []
    for name in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(name).TransportError)
        except ImportError:
            continue
    return tuple(errors)
