"""Debezium change events in Avro (Confluent wire format, schema registry) → the JSON path's change events.

Each key and value is ``0x00``, a 4-byte big-endian schema id, then Avro binary written with that
schema. Writer schemas are fetched by id from a Confluent-compatible registry (confluent-kafka's
``SchemaRegistryClient``; Apicurio's ``ccompat`` API works too), parsed once per id per process, and read
with ``fastavro.schemaless_reader``.

The output is exactly what ``EnvelopeDecoder`` yields for the same change sent through JsonConverter, so
everything downstream (row markers, TOAST placeholders, the keep-last store, ``types.to_arrow``) has one
input form:

- Column types: each Avro field is mapped back to the Kafka Connect field it came from (the reverse of
  Confluent's ``AvroData``: ``connect.name``, ``connect.parameters``, ``connect.type``, else the Avro
  logical type), then typed by the JSON path's own ``column_type_from_schema``.
- Values: fastavro's logical-type conversion is switched off (``logicalType`` is removed from the schema
  it reads with), so dates, times and timestamps stay the integers JsonConverter sends, and bytes
  (``bytes``, ``Decimal``, ``VariableScaleDecimal.value``) become base64 text as JsonConverter writes
  them. A bytea TOAST placeholder is then recognised exactly like in JSON.

A registry that cannot be reached is not a poison event: requests are retried with exponential backoff
and jitter for ``max_unavailable_s``, then ``RegistryUnavailable`` (transient) fails the batch. Only what
is wrong with the record itself (bad magic byte, a schema id the registry does not know, bytes that do
not decode with the writer schema) raises ``DecodeError``.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import fastavro

from connector.config import SchemaRegistrySettings, resolve_secret_references
from connector.debezium.envelope import ChangeEvent, Noise, event_from_payload
from connector.debezium.types import DEFAULT_POLICY, ColumnType, TypePolicy, column_type_from_schema
from connector.errors import ConfigError, DecodeError, RegistryError, RegistryUnavailable
from connector.events import KafkaRecord

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

_LOG = logging.getLogger(__name__)

MAGIC_BYTE = 0
HEADER_SIZE = 5

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

_MAP_ENTRY = "io.confluent.connect.avro.MapEntry"
_CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"

# Avro logical types with no connect.name (a writer other than Connect's AvroData) → the Connect /
# Debezium semantic name JsonConverter would have sent, so both paths give the same Arrow type.
_LOGICAL_NAMES = {
    "date": "org.apache.kafka.connect.data.Date",
    "time-millis": "org.apache.kafka.connect.data.Time",
    "time-micros": "io.debezium.time.MicroTime",
    "timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
    "timestamp-micros": "io.debezium.time.MicroTimestamp",
    "timestamp-nanos": "io.debezium.time.NanoTimestamp",
    "local-timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
    "local-timestamp-micros": "io.debezium.time.MicroTimestamp",
    "local-timestamp-nanos": "io.debezium.time.NanoTimestamp",
}
_PRIMITIVE_CONNECT_TYPES = {
    "int": "int32",
    "long": "int64",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
    "null": "null",
}


# -- Avro schema → Connect shape ---------------------------------------------------------------------


Normaliser = Callable[[Any], Any]


@dataclass(frozen=True)
class ConnectShape:
    """One Avro type seen as the Kafka Connect schema it was written from.

    Attributes:
        type: Connect type (``int8`` … ``int64``, ``float``, ``double``, ``boolean``, ``string``,
            ``bytes``, ``array``, ``map``, ``struct``).
        name: Connect semantic name (``io.debezium.time.MicroTimestamp``, …) or ``None``.
        parameters: Connect schema parameters (decimal scale and precision, enum values, …).
        fields: The fields of a struct, in order.
        normalise: Turns a fastavro value of this type into JsonConverter's form; ``None`` when the value
            is already in that form (no bytes anywhere inside), so most columns cost nothing.
    """

    type: str
    name: str | None = None
    parameters: Mapping[str, str] | None = None
    fields: tuple[tuple[str, ConnectShape], ...] = ()
    normalise: Normaliser | None = None

    def field_schema(self, field: str) -> dict[str, Any]:
        """This type as one field of a JsonConverter schema, the input of ``column_type_from_schema``."""
        out: dict[str, Any] = {"type": self.type, "field": field}
        if self.name is not None:
            out["name"] = self.name
        if self.parameters:
            out["parameters"] = dict(self.parameters)
        if self.fields:
            out["fields"] = [shape.field_schema(name) for name, shape in self.fields]
        return out

    def field(self, name: str) -> ConnectShape | None:
        """The shape of struct field ``name``, if there is one."""
        for field_name, shape in self.fields:
            if field_name == name:
                return shape
        return None


class _SchemaWalker:
    """Maps an Avro schema (parsed JSON) to ``ConnectShape``s, resolving named types like Avro does."""

    def __init__(self) -> None:
        self._named: dict[str, ConnectShape] = {}
        self._in_progress: set[str] = set()

    def shape(self, schema: Any, namespace: str = "") -> ConnectShape:
        if isinstance(schema, str):
            return self._reference(schema, namespace)
        if isinstance(schema, list):
            branches = [b for b in schema if b != "null" and not (isinstance(b, dict) and b.get("type") == "null")]
            if len(branches) != 1:
                msg = f"a union of {len(branches)} non-null types, which Debezium's converters never write"
                raise ValueError(msg)
            return self.shape(branches[0], namespace)
        if not isinstance(schema, dict):
            msg = f"not an Avro schema: {type(schema).__name__}"
            raise ValueError(msg)
        avro_type = schema.get("type")
        if isinstance(avro_type, (dict, list)):
            return self.shape(avro_type, namespace)
        if avro_type in ("record", "error"):
            return self._record(schema, namespace)
        if avro_type == "enum":
            self._register(schema, namespace, ConnectShape("string", _connect_name(schema), _parameters(schema)))
            return self._named[_fullname(schema, namespace)]
        if avro_type == "fixed":
            shape = self._bytes_shape(schema)
            self._register(schema, namespace, shape)
            return shape
        if avro_type == "array":
            return self._array(schema, namespace)
        if avro_type == "map":
            values = self.shape(schema.get("values"), namespace)
            fix = values.normalise
            normalise = None if fix is None else _map_normaliser(fix)
            return ConnectShape("map", _connect_name(schema), _parameters(schema), normalise=normalise)
        if avro_type == "bytes":
            return self._bytes_shape(schema)
        if isinstance(avro_type, str) and avro_type in _PRIMITIVE_CONNECT_TYPES:
            connect_type = _PRIMITIVE_CONNECT_TYPES[avro_type]
            if avro_type == "int" and schema.get("connect.type") in ("int8", "int16"):
                connect_type = str(schema["connect.type"])
            name = _connect_name(schema) or _LOGICAL_NAMES.get(str(schema.get("logicalType")))
            return ConnectShape(connect_type, name, _parameters(schema))
        if isinstance(avro_type, str):
            return self._reference(avro_type, namespace)
        msg = f"unknown Avro type {avro_type!r}"
        raise ValueError(msg)

    def _reference(self, name: str, namespace: str) -> ConnectShape:
        if name in _PRIMITIVE_CONNECT_TYPES:
            if name == "bytes":
                return ConnectShape("bytes", normalise=_base64_text)
            return ConnectShape(_PRIMITIVE_CONNECT_TYPES[name])
        for candidate in (f"{namespace}.{name}" if namespace and "." not in name else name, name):
            if candidate in self._in_progress:
                msg = f"recursive type {candidate}, which Kafka Connect cannot express"
                raise ValueError(msg)
            if candidate in self._named:
                return self._named[candidate]
        msg = f"unknown named type {name!r}"
        raise ValueError(msg)

    def _register(self, schema: Mapping[str, Any], namespace: str, shape: ConnectShape) -> None:
        self._named[_fullname(schema, namespace)] = shape

    def _record(self, schema: Mapping[str, Any], namespace: str) -> ConnectShape:
        fullname = _fullname(schema, namespace)
        inner_namespace = fullname.rpartition(".")[0]
        self._in_progress.add(fullname)
        try:
            fields = []
            for field in schema.get("fields") or ():
                if not isinstance(field, dict) or not isinstance(field.get("name"), str):
                    msg = f"record {fullname} has a field without a name"
                    raise ValueError(msg)
                fields.append((field["name"], self.shape(field.get("type"), inner_namespace)))
        finally:
            self._in_progress.discard(fullname)
        fixes = tuple((name, shape.normalise) for name, shape in fields if shape.normalise is not None)
        shape = ConnectShape(
            "struct",
            _connect_name(schema) or fullname,
            _parameters(schema),
            tuple(fields),
            _struct_normaliser(fixes) if fixes else None,
        )
        self._named[fullname] = shape
        return shape

    def _array(self, schema: Mapping[str, Any], namespace: str) -> ConnectShape:
        items = self.shape(schema.get("items"), namespace)
        if items.type == "struct" and items.name == _MAP_ENTRY:
            # AvroData writes a map whose keys are not strings as an array of {key, value} records;
            # JsonConverter writes the same map as an array of [key, value] pairs.
            key, value = items.field("key"), items.field("value")
            if key is not None and value is not None:
                normalise = _entries_normaliser(key.normalise, value.normalise)
                return ConnectShape("map", _connect_name(schema), _parameters(schema), normalise=normalise)
        fix = items.normalise
        return ConnectShape(
            "array",
            _connect_name(schema),
            _parameters(schema),
            normalise=None if fix is None else _list_normaliser(fix),
        )

    @staticmethod
    def _bytes_shape(schema: Mapping[str, Any]) -> ConnectShape:
        name = _connect_name(schema)
        parameters = _parameters(schema)
        if name is None and schema.get("logicalType") == "decimal":
            name = _CONNECT_DECIMAL
        if name == _CONNECT_DECIMAL and not parameters:
            # Not written by AvroData (which always copies Connect's parameters): take Avro's own.
            parameters = {"scale": str(int(schema.get("scale", 0)))}
            if "precision" in schema:
                parameters["connect.decimal.precision"] = str(int(schema["precision"]))
        return ConnectShape("bytes", name, parameters, normalise=_base64_text)


def _fullname(schema: Mapping[str, Any], namespace: str) -> str:
    name = schema.get("name")
    if not isinstance(name, str) or not name:
        msg = f"a named Avro type ({schema.get('type')}) without a name"
        raise ValueError(msg)
    if "." in name:
        return name
    space = schema.get("namespace", namespace)
    return f"{space}.{name}" if isinstance(space, str) and space else name


def _connect_name(schema: Mapping[str, Any]) -> str | None:
    name = schema.get("connect.name")
    return name if isinstance(name, str) else None


def _parameters(schema: Mapping[str, Any]) -> dict[str, str] | None:
    params = schema.get("connect.parameters")
    if not isinstance(params, dict) or not params:
        return None
    return {str(k): str(v) for k, v in params.items()}


def _base64_text(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    return value


def _struct_normaliser(fixes: tuple[tuple[str, Normaliser], ...]) -> Normaliser:
    def normalise(value: Any) -> Any:
        if isinstance(value, dict):
            for name, fix in fixes:
                item = value.get(name)
                if item is not None:
                    value[name] = fix(item)
        return value

    return normalise


def _list_normaliser(fix: Normaliser) -> Normaliser:
    def normalise(value: Any) -> Any:
        if isinstance(value, list):
            return [None if item is None else fix(item) for item in value]
        return value

    return normalise


def _map_normaliser(fix: Normaliser) -> Normaliser:
    def normalise(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: None if v is None else fix(v) for k, v in value.items()}
        return value

    return normalise


def _entries_normaliser(key_fix: Normaliser | None, value_fix: Normaliser | None) -> Normaliser:
    def one(fix: Normaliser | None, item: Any) -> Any:
        return item if fix is None or item is None else fix(item)

    def normalise(value: Any) -> Any:
        if isinstance(value, list):
            return [
                [one(key_fix, e.get("key")), one(value_fix, e.get("value"))] if isinstance(e, dict) else e
                for e in value
            ]
        return value

    return normalise


def _strip_logical_types(schema: Any) -> Any:
    """A copy of ``schema`` without ``logicalType``, so fastavro returns the raw wire values."""
    if isinstance(schema, list):
        return [_strip_logical_types(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "logicalType"}
    if isinstance(out.get("type"), (dict, list)):
        out["type"] = _strip_logical_types(out["type"])
    if isinstance(out.get("fields"), list):
        out["fields"] = [
            {**f, "type": _strip_logical_types(f.get("type"))} if isinstance(f, dict) else f for f in out["fields"]
        ]
    for key in ("items", "values"):
        if key in out:
            out[key] = _strip_logical_types(out[key])
    return out


@dataclass(frozen=True)
class WriterSchema:
    """One registry schema, parsed: fastavro's reader form and the Connect shape of its root type."""

    schema_id: int
    parsed: Any
    shape: ConnectShape

    @classmethod
    def parse(cls, schema_id: int, schema_text: str) -> WriterSchema:
        """Parse registry schema text.

        Raises:
            ValueError: not an Avro schema this decoder can read (the message says why).
        """
        try:
            schema = json.loads(schema_text)
        except json.JSONDecodeError as exc:
            msg = f"schema id {schema_id} is not JSON: {exc}"
            raise ValueError(msg) from exc
        try:
            shape = _SchemaWalker().shape(schema)
            parsed = fastavro.parse_schema(_strip_logical_types(schema))
        except Exception as exc:  # fastavro raises many types for a bad schema
            msg = f"schema id {schema_id} is not an Avro schema this connector reads: {exc}"
            raise ValueError(msg) from exc
        return cls(schema_id, parsed, shape)

    def read(self, data: bytes) -> Any:
        """Decode the Avro body after the 5-byte header, in JsonConverter's value form.

        Raises:
            ValueError: the bytes do not decode with this schema (the message says how).
        """
        stream = io.BytesIO(data)
        stream.seek(HEADER_SIZE)
        try:
            datum = fastavro.schemaless_reader(stream, self.parsed, None)
        except EOFError as exc:
            msg = f"truncated: the Avro body ends before the record does ({exc or 'end of data'})"
            raise ValueError(msg) from exc
        except Exception as exc:  # corrupt input makes fastavro raise anything from IndexError to UnicodeError
            msg = f"does not decode with writer schema id {self.schema_id}: {type(exc).__name__}: {exc}"
            raise ValueError(msg) from exc
        left = len(data) - stream.tell()
        if left:
            msg = f"{left} bytes left after the record: not written with schema id {self.schema_id}"
            raise ValueError(msg)
        fix = self.shape.normalise
        return datum if fix is None or datum is None else fix(datum)


# -- the registry ------------------------------------------------------------------------------------


# Per process: the decoders of one Spark Python worker share what they fetched. Schema ids are immutable.
_LOCK = threading.Lock()
_WRITER_SCHEMAS: dict[tuple[str, int], WriterSchema] = {}
_UNREADABLE: dict[tuple[str, int], str] = {}
_MISSING: dict[tuple[str, int], tuple[float, str]] = {}


def redact_url(url: str) -> str:
    """``url`` without user info, safe for logs and errors (several comma-separated URLs allowed)."""
    out = []
    for one in url.split(","):
        parts = urlsplit(one.strip())
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        out.append(urlunsplit((parts.scheme, host, parts.path, "", "")))
    return ",".join(out)


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
        raise DecodeError(record.topic, record.partition, record.offset, reason)

    def _fetch(self, schema_id: int, record: KafkaRecord, part: str) -> tuple[str, str] | None:
        """Schema text and type of ``schema_id``; ``None`` when the registry says it does not exist."""
        import httpx
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
            except httpx.TransportError as exc:
                reason = f"{type(exc).__name__}: {self._scrub(str(exc))}"
            except (ValueError, KeyError, TypeError) as exc:
                # A malformed answer (a proxy's error page, a registry restarting): retried like a 503.
                reason = f"malformed answer: {type(exc).__name__}: {self._scrub(str(exc))}"
            else:
                return str(schema.schema_str), str(getattr(schema, "schema_type", None) or "AVRO")
            now = time.monotonic()
            if now >= deadline:
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
            time.sleep(min(step / 2 + random.uniform(0, step / 2), deadline - now))  # noqa: S311 (jitter)
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


# -- the decoder -------------------------------------------------------------------------------------


class AvroDecoder:
    """Decodes Debezium records written by an Avro converter (Confluent's, or Apicurio's in Confluent mode).

    Picklable and cheap to build: it holds only settings until the first record, then the registry
    client and the per-id column types of this process.
    """

    def __init__(
        self,
        registry: SchemaRegistrySettings,
        policy: TypePolicy = DEFAULT_POLICY,
    ) -> None:
        self._registry_settings = registry
        self._policy = policy
        self._registry = SchemaRegistry(registry)
        self._writers: dict[int, WriterSchema] = {}
        self._columns: dict[int, Mapping[str, ColumnType] | None] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"registry": self._registry_settings, "policy": self._policy}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["registry"], state["policy"])  # type: ignore[misc]

    def decode(self, record: KafkaRecord) -> ChangeEvent | Noise:
        """Classify and decode one record, exactly as ``EnvelopeDecoder.decode`` does for JSON.

        Raises:
            DecodeError: the record is neither a change event nor known noise (the message names
                ``topic[partition]@offset``).
            RegistryUnavailable: the registry stayed unreachable; the record is not at fault.
            RegistryError: the registry refused the credentials or is no registry.
        """
        if record.topic.startswith("__debezium-heartbeat"):
            return Noise(record, "heartbeat")
        value = record.value
        if value is None or len(value) == 0:
            return Noise(record, "tombstone")
        writer = self._writer(record, value, "value")
        payload = self._read(record, writer, value, "value")
        if payload is None:
            raise DecodeError(record.topic, record.partition, record.offset, "value is Avro null")
        if not isinstance(payload, dict):
            raise DecodeError(
                record.topic, record.partition, record.offset, f"value is a {type(payload).__name__}, not a record"
            )
        return event_from_payload(record, payload, lambda: self._row_columns(record, writer), lambda: self._key(record))

    def _writer(self, record: KafkaRecord, data: bytes, part: str) -> WriterSchema:
        if len(data) < HEADER_SIZE:
            raise DecodeError(
                record.topic,
                record.partition,
                record.offset,
                f"{part} has {len(data)} bytes, fewer than the 5-byte Confluent wire-format header",
            )
        if data[0] != MAGIC_BYTE:
            raise DecodeError(
                record.topic,
                record.partition,
                record.offset,
                f"{part} starts with byte 0x{data[0]:02x}, not the Confluent wire-format magic byte 0x00 "
                "(is source.value_format right?)",
            )
        schema_id = int.from_bytes(data[1:HEADER_SIZE], "big")
        writer = self._writers.get(schema_id)
        if writer is None:
            writer = self._writers[schema_id] = self._registry.writer_schema(schema_id, record, part)
        return writer

    @staticmethod
    def _read(record: KafkaRecord, writer: WriterSchema, data: bytes, part: str) -> Any:
        try:
            return writer.read(data)
        except ValueError as exc:
            raise DecodeError(record.topic, record.partition, record.offset, f"{part} {exc}") from exc

    def _key(self, record: KafkaRecord) -> tuple[dict[str, Any] | None, tuple[str, ...] | None]:
        if not record.key:
            return None, None
        writer = self._writer(record, record.key, "key")
        parsed = self._read(record, writer, record.key, "key")
        if parsed is None:
            return None, None
        if not isinstance(parsed, dict):
            raise DecodeError(
                record.topic, record.partition, record.offset, f"key is a {type(parsed).__name__}, not an object"
            )
        fields = tuple(name for name, _ in writer.shape.fields)
        return parsed, fields or tuple(parsed)

    def _row_columns(self, record: KafkaRecord, writer: WriterSchema) -> Mapping[str, ColumnType] | None:
        """The row type: the fields of the Envelope's ``after`` (else ``before``) record, as in JSON."""
        if writer.schema_id in self._columns:
            return self._columns[writer.schema_id]
        row = None
        for name in ("after", "before"):
            shape = writer.shape.field(name)
            if shape is not None and shape.type == "struct" and shape.fields:
                row = shape
                break
        columns: Mapping[str, ColumnType] | None = None
        if row is not None:
            try:
                columns = {
                    name: column_type_from_schema(shape.field_schema(name), self._policy) for name, shape in row.fields
                }
            except ValueError as exc:
                raise DecodeError(
                    record.topic, record.partition, record.offset, f"value schema id {writer.schema_id}: {exc}"
                ) from exc
        self._columns[writer.schema_id] = columns
        return columns
