"""Build the Avro records an Avro converter writes for a change that JsonConverter wrote as JSON.

Kafka Connect hands the same ``Struct`` to whichever converter is configured. Given JsonConverter's
output (its ``schema`` and ``payload``), ``connect_to_avro_schema`` produces the Avro schema Confluent's
``AvroData.fromConnectSchema`` derives from that Connect schema (``connect.meta.data`` on, the default;
rules read from AvroData: ``int8``/``int16`` as ``int`` with ``connect.type``, ``connect.name`` /
``connect.version`` / ``connect.parameters`` / ``connect.doc`` properties, optional types as
``["null", T]`` with default null, or ``[T, "null"]`` when the Connect schema has a default, Connect
``Decimal`` as ``bytes`` with ``logicalType: decimal``, ``scale`` and ``precision`` (64 when Connect has
none), Connect ``Date`` / ``Time`` / ``Timestamp`` with ``date`` / ``time-millis`` / ``timestamp-millis``,
maps with non-string keys as arrays of ``io.confluent.connect.avro.MapEntry``, a named type defined once
and referenced by name afterwards). ``connect_to_avro_datum`` turns the JSON payload into the value
fastavro writes with it (base64 text back to bytes, ``[k, v]`` map pairs to ``MapEntry`` records), and
``frame`` adds the Confluent wire-format header.

Used by the tests to prove the Avro path decodes to exactly what the JSON path decodes, on the real
Debezium records in tests/data/real_pg.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import fastavro

_PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float": "float",
    "float32": "float",
    "double": "double",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
_CONNECT_LOGICAL = {
    "org.apache.kafka.connect.data.Date": "date",
    "org.apache.kafka.connect.data.Time": "time-millis",
    "org.apache.kafka.connect.data.Timestamp": "timestamp-millis",
}
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_NAMESPACE = "io.confluent.connect.avro"


def connect_to_avro_schema(connect: dict[str, Any]) -> Any:
    """The Avro schema AvroData derives from a JsonConverter schema."""
    return _Converter().schema(connect)


class _Converter:
    def __init__(self) -> None:
        self._defined: set[str] = set()

    def schema(self, connect: dict[str, Any], *, ignore_optional: bool = False) -> Any:
        base = self._base(connect)
        if connect.get("optional") and not ignore_optional:
            if connect.get("default") is not None:
                return [base, "null"]
            return ["null", base]
        return base

    def _base(self, connect: dict[str, Any]) -> Any:
        ctype = connect["type"]
        name = connect.get("name")
        props: dict[str, Any] = {}
        if connect.get("doc") is not None:
            props["connect.doc"] = connect["doc"]
        if connect.get("version") is not None:
            props["connect.version"] = connect["version"]
        if connect.get("parameters"):
            props["connect.parameters"] = dict(connect["parameters"])
        if connect.get("default") is not None:
            props["connect.default"] = connect["default"]
        if name is not None:
            props["connect.name"] = name
        if ctype in ("int8", "int16"):
            props["connect.type"] = ctype
        if ctype == "struct":
            fullname = name or f"{_NAMESPACE}.ConnectDefault"
            if fullname in self._defined:
                return fullname
            self._defined.add(fullname)
            namespace, _, short = fullname.rpartition(".")
            record: dict[str, Any] = {"type": "record", "name": short}
            if namespace:
                record["namespace"] = namespace
            record["fields"] = [self._field(f) for f in connect.get("fields") or ()]
            record.update(props)
            return record
        if ctype == "array":
            out: dict[str, Any] = {"type": "array", "items": self.schema(connect["items"])}
            out.update(props)
            return out
        if ctype == "map":
            keys, values = connect["keys"], connect["values"]
            if keys["type"] == "string" and not keys.get("optional"):
                out = {"type": "map", "values": self.schema(values)}
            else:
                entry = f"{_NAMESPACE}.MapEntry"
                items: Any = entry
                if entry not in self._defined:
                    self._defined.add(entry)
                    items = {
                        "type": "record",
                        "name": "MapEntry",
                        "namespace": _NAMESPACE,
                        "fields": [self._field(dict(keys, field="key")), self._field(dict(values, field="value"))],
                    }
                out = {"type": "array", "items": items}
            out.update(props)
            return out
        avro_type = _PRIMITIVES[ctype]
        if not props:
            return avro_type
        schema: dict[str, Any] = {"type": avro_type}
        if name == _DECIMAL:
            params = connect.get("parameters") or {}
            schema["scale"] = int(params.get("scale", 0))
            schema["precision"] = int(params.get("connect.decimal.precision", 64))
        schema.update(props)
        if name == _DECIMAL:
            schema["logicalType"] = "decimal"
        elif name in _CONNECT_LOGICAL:
            schema["logicalType"] = _CONNECT_LOGICAL[name]
        return schema

    def _field(self, connect: dict[str, Any]) -> dict[str, Any]:
        field: dict[str, Any] = {"name": connect["field"], "type": self.schema(connect)}
        if connect.get("default") is not None:
            field["default"] = connect["default"]
        elif connect.get("optional"):
            field["default"] = None
        return field


def connect_to_avro_datum(connect: dict[str, Any], value: Any) -> Any:
    """JsonConverter's payload value → the value AvroData hands to the Avro writer."""
    if value is None:
        return None
    ctype = connect["type"]
    if ctype == "bytes":
        return base64.b64decode(value)
    if ctype == "struct":
        return {f["field"]: connect_to_avro_datum(f, value.get(f["field"])) for f in connect.get("fields") or ()}
    if ctype == "array":
        return [connect_to_avro_datum(connect["items"], item) for item in value]
    if ctype == "map":
        keys, values = connect["keys"], connect["values"]
        if keys["type"] == "string" and not keys.get("optional"):
            return {k: connect_to_avro_datum(values, v) for k, v in value.items()}
        return [{"key": connect_to_avro_datum(keys, k), "value": connect_to_avro_datum(values, v)} for k, v in value]
    return value


def frame(schema_id: int, schema: Any, datum: Any) -> bytes:
    """Confluent wire format: magic byte 0, 4-byte big-endian schema id, Avro binary."""
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(out, fastavro.parse_schema(_without_logical_types(schema)), datum)
    return out.getvalue()


def _without_logical_types(schema: Any) -> Any:
    """The same schema without ``logicalType``: the datum is already in wire form, and Java's Avro
    ignores a decimal whose scale exceeds its precision (PostgreSQL allows ``numeric(3,5)``) where
    fastavro would refuse the schema."""
    if isinstance(schema, list):
        return [_without_logical_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if "fields" in schema:
        out["fields"] = [dict(f, type=_without_logical_types(f["type"])) for f in schema["fields"]]
    return out
