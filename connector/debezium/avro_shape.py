"""Avro schema → the Kafka Connect schema it was written from, and values → JsonConverter's form.

Confluent's ``AvroData`` writes each Connect schema as an Avro schema with ``connect.*`` properties; this
module walks an Avro writer schema back to that Connect shape (``ConnectShape``), which the JSON path's
``column_type_from_schema`` then types, and builds for each shape the normaliser that turns fastavro's
values (bytes, ``MapEntry`` arrays) into what JsonConverter would have sent.

It is separate from ``avro`` (reading records in the Confluent wire format) and ``schema_registry``
(fetching writer schemas) because it is pure schema logic: no I/O, no registry, no wire format, so it
can be read and tested on its own.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import fastavro

from connector.debezium.confluent_wire import HEADER_SIZE

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
    # Of a struct's fields, those NOT NULL (no null branch) or with a non-null default: rows that existed before
    # such a column was added hold a value in it (``ColumnType.filled``).
    filled: frozenset[str] = frozenset()

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


class SchemaWalker:
    """Maps an Avro schema (parsed JSON) to ``ConnectShape``s, resolving named types like Avro does."""

    def __init__(self) -> None:
        self._named: dict[str, ConnectShape] = {}
        self._in_progress: set[str] = set()

    def shape(self, schema: Any, namespace: str = "") -> ConnectShape:
        """The Connect shape of Avro ``schema``; unqualified names resolve in ``namespace``."""
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
        if avro_type in ("record", "error", "enum", "fixed", "array", "map"):
            return self._complex(avro_type, schema, namespace)
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

    def _complex(self, avro_type: str, schema: Mapping[str, Any], namespace: str) -> ConnectShape:
        """The shape of a record, enum, fixed, array or map schema (named ones are registered)."""
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
        values = self.shape(schema.get("values"), namespace)
        fix = values.normalise
        normalise = None if fix is None else _map_normaliser(fix)
        return ConnectShape("map", _connect_name(schema), _parameters(schema), normalise=normalise)

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
            filled = set()
            for field in schema.get("fields") or ():
                if not isinstance(field, dict) or not isinstance(field.get("name"), str):
                    msg = f"record {fullname} has a field without a name"
                    raise ValueError(msg)
                fields.append((field["name"], self.shape(field.get("type"), inner_namespace)))
                if not _nullable(field.get("type")) or field.get("default") is not None:
                    filled.add(field["name"])
        finally:
            self._in_progress.discard(fullname)
        fixes = tuple((name, shape.normalise) for name, shape in fields if shape.normalise is not None)
        shape = ConnectShape(
            "struct",
            _connect_name(schema) or fullname,
            _parameters(schema),
            tuple(fields),
            _struct_normaliser(fixes) if fixes else None,
            frozenset(filled),
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


def _nullable(avro_type: Any) -> bool:
    """Whether a field of ``avro_type`` may be null (a union with a null branch, as Connect writes optional ones)."""
    if isinstance(avro_type, list):
        return any(b == "null" or (isinstance(b, dict) and b.get("type") == "null") for b in avro_type)
    return bool(avro_type == "null")


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


def strip_logical_types(schema: Any) -> Any:
    """A copy of ``schema`` without ``logicalType``, so fastavro returns the raw wire values."""
    if isinstance(schema, list):
        return [strip_logical_types(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "logicalType"}
    if isinstance(out.get("type"), (dict, list)):
        out["type"] = strip_logical_types(out["type"])
    if isinstance(out.get("fields"), list):
        out["fields"] = [
            {**f, "type": strip_logical_types(f.get("type"))} if isinstance(f, dict) else f for f in out["fields"]
        ]
    for key in ("items", "values"):
        if key in out:
            out[key] = strip_logical_types(out[key])
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
            shape = SchemaWalker().shape(schema)
            parsed = fastavro.parse_schema(strip_logical_types(schema))
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
