"""Avro through a schema registry decodes to exactly what JSON decodes to, for the same changes.

The Avro records are what Confluent's AvroConverter writes for the Connect data that JsonConverter wrote
as the real Debezium records in tests/data/real_pg (see tests/support/avro_connect.py); the writer schemas
are served by ``RegistryDouble`` (tests/support/registry_double.py), a **test double** of the Confluent
REST API, through confluent-kafka's real ``SchemaRegistryClient``.
"""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from pydantic import SecretStr

from connector.commands.check_config import check_config_file
from connector.config import SchemaRegistrySettings, SourceSettings, load_settings
from connector.debezium import schema_registry
from connector.debezium.arrow_values import ConversionError, to_arrow
from connector.debezium.avro import AvroDecoder
from connector.debezium.decoder import open_decoder
from connector.debezium.envelope import ChangeEvent, EnvelopeDecoder, Noise
from connector.debezium.types import ColumnType, TypePolicy
from connector.errors import ConfigError, DecodeError, RegistryError, RegistryUnavailable, TransientError
from connector.events import KafkaRecord
from connector.kcat import record_from_kcat
from tests.support.avro_connect import connect_to_avro_datum, connect_to_avro_schema, frame
from tests.support.registry_double import RegistryDouble

DATA = Path(__file__).parents[2] / "data"
REAL_PG = DATA / "real_pg"
SAMPLES = DATA / "debezium-samples"
TOPIC = "dbserver1.public.matrix"


@pytest.fixture(autouse=True)
def _fresh_process_caches() -> Iterator[None]:
    # The schema cache is per process and keyed by registry URL; doubles reuse ephemeral ports, so each
    # test starts as a fresh Spark worker would.
    for cache in (schema_registry._WRITER_SCHEMAS, schema_registry._UNREADABLE, schema_registry._MISSING):
        cache.clear()
    yield


@pytest.fixture
def registry() -> Iterator[RegistryDouble]:
    with RegistryDouble() as double:
        yield double


def settings(url: str, **extra: Any) -> SchemaRegistrySettings:
    return SchemaRegistrySettings(url=url, **extra)


class AvroConverter:
    """Plays Debezium with the Avro converter: same Connect data as a JSON record, written as Avro."""

    def __init__(self, registry: RegistryDouble) -> None:
        self.registry = registry

    def convert(self, record: KafkaRecord) -> KafkaRecord:
        return record._replace(
            key=self._one(record.key, f"{record.topic}-key"), value=self._one(record.value, f"{record.topic}-value")
        )

    def _one(self, raw: bytes | None, subject: str) -> bytes | None:
        if raw is None:
            return None
        document = orjson.loads(raw)
        schema = connect_to_avro_schema(document["schema"])
        schema_id = self.registry.register(subject, schema)
        return frame(schema_id, schema, connect_to_avro_datum(document["schema"], document["payload"]))


def real_records() -> list[KafkaRecord]:
    out = []
    for path in sorted(REAL_PG.glob("*.jsonl")):
        out.extend(record_from_kcat(json.loads(line)) for line in path.read_text().splitlines() if line.strip())
    return out


def arrow_or_error(value: Any, ctype: ColumnType) -> pa.Array | str:
    try:
        return to_arrow([value], ctype)
    except ConversionError as exc:
        return f"ConversionError: {exc}"


def assert_same_event(
    json_event: ChangeEvent | Noise, avro_event: ChangeEvent | Noise, *, same_source: bool = True
) -> None:
    """Same classification; for changes the same op, key, columns, source, and the same Arrow values."""
    assert type(avro_event) is type(json_event)
    if isinstance(json_event, Noise):
        assert isinstance(avro_event, Noise)
        assert avro_event.kind == json_event.kind
        return
    assert isinstance(avro_event, ChangeEvent)
    assert avro_event.op == json_event.op
    assert avro_event.key == json_event.key
    assert avro_event.key_fields == json_event.key_fields
    if same_source:
        assert avro_event.ts_ms == json_event.ts_ms
        assert avro_event.source == json_event.source
    assert avro_event.columns == json_event.columns
    columns = json_event.columns or {}
    for side in ("before", "after"):
        json_row, avro_row = getattr(json_event, side), getattr(avro_event, side)
        assert (json_row is None) == (avro_row is None), side
        if json_row is None:
            continue
        assert list(avro_row) == list(json_row)
        for name, ctype in columns.items():
            expected, actual = arrow_or_error(json_row[name], ctype), arrow_or_error(avro_row[name], ctype)
            if isinstance(expected, str):
                assert actual == expected, (side, name)
            else:
                assert isinstance(actual, pa.Array) and actual.equals(expected), (side, name, json_row[name])
            if not pa.types.is_floating(ctype.arrow):
                # JsonConverter's text of a float32 is not the float32's exact double; all else is identical,
                # so TOAST placeholders and the keep-last store see the same values on both paths.
                assert avro_row[name] == json_row[name], (side, name)


# -- the same events, JSON and Avro -------------------------------------------------------------------


@pytest.mark.parametrize("record", real_records(), ids=lambda r: r.position)
def test_real_debezium_records_decode_the_same_as_json(registry: RegistryDouble, record: KafkaRecord) -> None:
    avro_record = AvroConverter(registry).convert(record)
    assert_same_event(EnvelopeDecoder().decode(record), AvroDecoder(settings(registry.url)).decode(avro_record))


REAL_AVRO = DATA / "real_pg_avro"


def real_avro_records() -> list[dict[str, Any]]:
    path = REAL_AVRO / "records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@pytest.mark.parametrize("captured", real_avro_records(), ids=lambda r: f"{r['topic']}@{r['offset']}-{r['op']}")
def test_real_apicurio_avro_records_decode_like_their_json_twins(
    registry: RegistryDouble, captured: dict[str, Any]
) -> None:
    """Records Debezium wrote through Apicurio's AvroConverter (Confluent mode), with the real writer
    schemas, against the JsonConverter records of the same changes (tests/data/real_pg_avro/PROVENANCE.md).

    Source metadata and processing timestamps differ between the two connectors, so they are not compared.
    """
    for schema in (REAL_AVRO / "schemas").glob("*.json"):
        registry.add_schema(int(schema.stem), schema.read_text().strip())

    def raw(text: str | None) -> bytes | None:
        return None if text is None else base64.b64decode(text)

    avro_record = KafkaRecord(
        captured["topic"],
        captured["partition"],
        captured["offset"],
        raw(captured["key_b64"]),
        raw(captured["value_b64"]),
    )
    twin = captured["json_twin"]
    json_record = KafkaRecord(
        twin["topic"], 0, 0, twin["key"] and twin["key"].encode(), twin["value"] and twin["value"].encode()
    )
    avro_event = AvroDecoder(settings(registry.url)).decode(avro_record)
    assert_same_event(EnvelopeDecoder().decode(json_record), avro_event, same_source=False)
    assert avro_event.kind == "tombstone" if isinstance(avro_event, Noise) else avro_event.op == captured["op"]


def field(column: str, ctype: str, *, optional: bool = True, **extra: Any) -> dict[str, Any]:
    return {"type": ctype, "optional": optional, "field": column, **extra}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unscaled(value: int) -> str:
    return b64(value.to_bytes((value.bit_length() + 8) // 8 or 1, "big", signed=True))


# Every semantic type the JSON path knows, in JsonConverter's schema form, with a value and a null.
MATRIX_COLUMNS: list[tuple[dict[str, Any], Any]] = [
    (field("id", "int32", optional=False), 7),
    (field("tiny", "int8"), -8),
    (field("small", "int16"), 300),
    (field("big", "int64"), -(2**62)),
    (field("real", "float"), 1.5),
    (field("dbl", "double"), -2.25e-300),
    (field("flag", "boolean"), True),
    (field("txt", "string"), "très bien ✓"),
    (field("blob", "bytes"), b64(b"\x00\xff\x10")),
    (field("dec", "bytes", name="org.apache.kafka.connect.data.Decimal", version=1,
           parameters={"scale": "2", "connect.decimal.precision": "12"}), unscaled(-123456789012)),
    (field("dec_noprec", "bytes", name="org.apache.kafka.connect.data.Decimal", version=1,
           parameters={"scale": "3"}), unscaled(1)),
    (field("vsd", "struct", name="io.debezium.data.VariableScaleDecimal", version=1, doc="Variable scaled decimal",
           fields=[field("scale", "int32", optional=False), field("value", "bytes", optional=False)]),
     {"scale": 4, "value": unscaled(-12345)}),
    (field("d", "int32", name="io.debezium.time.Date", version=1), -1),
    (field("cd", "int32", name="org.apache.kafka.connect.data.Date", version=1), 19000),
    (field("t_ms", "int32", name="io.debezium.time.Time", version=1), 86_399_999),
    (field("ct", "int32", name="org.apache.kafka.connect.data.Time", version=1), 1000),
    (field("t_us", "int64", name="io.debezium.time.MicroTime", version=1), 86_399_999_999),
    (field("t_ns", "int64", name="io.debezium.time.NanoTime", version=1), 1),
    (field("ts_ms", "int64", name="io.debezium.time.Timestamp", version=1), -2_208_988_800_000),
    (field("cts", "int64", name="org.apache.kafka.connect.data.Timestamp", version=1), 1_700_000_000_123),
    (field("ts_us", "int64", name="io.debezium.time.MicroTimestamp", version=1), -2_208_988_799_999_999),
    (field("ts_ns", "int64", name="io.debezium.time.NanoTimestamp", version=1), 1_700_000_000_123_456_789),
    (field("tz", "string", name="io.debezium.time.ZonedTimestamp", version=1), "2025-01-01T00:00:00.000001Z"),
    (field("ztime", "string", name="io.debezium.time.ZonedTime", version=1), "10:15:30Z"),
    (field("js", "string", name="io.debezium.data.Json", version=1), '{"b": 1,  "a": [1, 2]}'),
    (field("uid", "string", name="io.debezium.data.Uuid", version=1), "c4b1f5a2-3b0e-4d1f-9a51-0d8e3f8a2b11"),
    (field("mood", "string", name="io.debezium.data.Enum", version=1, parameters={"allowed": "sad,ok"}), "ok"),
    (field("bits", "bytes", name="io.debezium.data.Bits", version=1, parameters={"length": "3"}), b64(b"\x05")),
    (field("bits12", "bytes", name="io.debezium.data.Bits", version=1, parameters={"length": "12"}),
     b64(b"\x01\x0a")),
    (field("bits80", "bytes", name="io.debezium.data.Bits", version=1, parameters={"length": "80"}),
     b64(b"\x01\x0a")),
    (field("mysql_time", "int64", name="io.debezium.time.MicroTime", version=1), -1_000_000),
    (field("wide", "bytes", name="org.apache.kafka.connect.data.Decimal", version=1,
           parameters={"scale": "30", "connect.decimal.precision": "65"}), unscaled(-(10**40) - 7)),
    (field("unsigned", "bytes", name="org.apache.kafka.connect.data.Decimal", version=1,
           parameters={"scale": "0", "connect.decimal.precision": "20"}), unscaled(2**64 - 1)),
    (field("yr", "int32", name="io.debezium.time.Year", version=1), 2024),
    (field("dur", "int64", name="io.debezium.time.MicroDuration", version=1), -90_061_000_001),
    (field("ival", "string", name="io.debezium.time.Interval", version=1), "P1Y2M3DT4H5M6.78S"),
    (field("set", "string", name="io.debezium.data.EnumSet", version=1, parameters={"allowed": "a,b,c"}), "a,c"),
    (field("tags", "array", items={"type": "string", "optional": True}), ["a", None, "c"]),
    (field("blobs", "array", items={"type": "bytes", "optional": False}), [b64(b"x"), b64(b"")]),
    (field("attrs", "map", keys={"type": "string", "optional": False}, values={"type": "int32", "optional": True}),
     {"k": 1, "n": None}),
    (field("by_id", "map", keys={"type": "int32", "optional": False}, values={"type": "bytes", "optional": True}),
     [[1, b64(b"one")], [2, None]]),
    (field("geo", "struct", name="io.debezium.data.geometry.Point", version=1,
           fields=[field("x", "double", optional=False), field("y", "double", optional=False),
                   field("wkb", "bytes"), field("srid", "int32")]),
     {"x": 1.0, "y": 2.0, "wkb": b64(b"\x01\x01"), "srid": None}),
    (field("with_default", "string", default="n/a"), "set"),
]  # fmt: skip


def matrix_value(op: str, row: dict[str, Any] | None, before: dict[str, Any] | None = None) -> bytes:
    row_schema = {
        "type": "struct",
        "fields": [col for col, _ in MATRIX_COLUMNS],
        "optional": True,
        "name": f"{TOPIC}.Value",
    }
    source_schema = {
        "type": "struct",
        "name": "io.debezium.connector.postgresql.Source",
        "optional": False,
        "field": "source",
        "fields": [field("connector", "string", optional=False), field("lsn", "int64")],
    }
    schema = {
        "type": "struct",
        "name": f"{TOPIC}.Envelope",
        "version": 2,
        "optional": False,
        "fields": [
            dict(row_schema, field="before"),
            dict(row_schema, field="after"),
            source_schema,
            field("op", "string", optional=False),
            field("ts_ms", "int64"),
        ],
    }
    payload = {"before": before, "after": row, "source": {"connector": "postgresql", "lsn": 42}, "op": op, "ts_ms": 9}
    return orjson.dumps({"schema": schema, "payload": payload})


def matrix_key(row_id: int) -> bytes:
    schema = {"type": "struct", "fields": [field("id", "int32", optional=False)], "optional": False,
              "name": f"{TOPIC}.Key"}  # fmt: skip
    return orjson.dumps({"schema": schema, "payload": {"id": row_id}})


def matrix_records() -> list[KafkaRecord]:
    full = {col["field"]: value for col, value in MATRIX_COLUMNS}
    nulls = {col["field"]: (7 if col["field"] == "id" else None) for col, _ in MATRIX_COLUMNS}
    return [
        KafkaRecord(TOPIC, 0, 0, matrix_key(7), matrix_value("c", full)),
        KafkaRecord(TOPIC, 0, 1, matrix_key(7), matrix_value("u", nulls, before=full)),
        KafkaRecord(TOPIC, 0, 2, matrix_key(7), matrix_value("d", None, before=nulls)),
        KafkaRecord(TOPIC, 0, 3, matrix_key(7), None),
    ]


@pytest.mark.parametrize("index", range(4), ids=["create", "update-to-nulls", "delete", "tombstone"])
def test_every_semantic_type_decodes_the_same_as_json(registry: RegistryDouble, index: int) -> None:
    record = matrix_records()[index]
    json_event = EnvelopeDecoder().decode(record)
    avro_event = AvroDecoder(settings(registry.url)).decode(AvroConverter(registry).convert(record))
    assert_same_event(json_event, avro_event)
    if isinstance(avro_event, ChangeEvent):
        assert avro_event.columns is not None
        types = {name: ctype.arrow for name, ctype in avro_event.columns.items()}
        assert types["tiny"] == pa.int8() and types["small"] == pa.int16()
        assert types["dec"] == pa.decimal128(12, 2) and types["dec_noprec"] == pa.decimal128(38, 3)
        # Delta-safe types (README, "Types"): exact text for unconstrained and wide decimals, times as text,
        # microsecond timestamps, bit strings as integers (or big-endian bytes beyond 63 bits).
        assert types["vsd"] == pa.string() and types["wide"] == pa.string()
        assert types["unsigned"] == pa.decimal128(20, 0)
        assert types["ts_us"] == pa.timestamp("us") and types["ts_ns"] == pa.timestamp("us")
        assert types["cts"] == pa.timestamp("us") and types["cd"] == pa.date32() and types["ct"] == pa.string()
        assert types["t_us"] == types["mysql_time"] == pa.string()
        assert types["bits12"] == pa.int64() and types["bits80"] == pa.binary()
        assert types["yr"] == pa.int32() and types["dur"] == pa.int64()
        assert types["tz"] == pa.timestamp("us", tz="UTC")
        assert types["blob"] == pa.binary() and types["js"] == pa.string() and types["geo"] == pa.string()


def test_the_avro_schema_is_what_avro_data_writes(registry: RegistryDouble) -> None:
    """The Connect → Avro mapping the equality tests rely on has AvroData's distinctive marks."""
    schema = connect_to_avro_schema(orjson.loads(matrix_records()[0].value or b"")["schema"])
    before, after = schema["fields"][0], schema["fields"][1]
    assert before["type"][0] == "null" and before["default"] is None
    assert after["type"] == ["null", f"{TOPIC}.Value"]  # defined once, then referenced by name
    fields = {f["name"]: f["type"] for f in before["type"][1]["fields"]}
    assert fields["tiny"] == ["null", {"type": "int", "connect.type": "int8"}]
    assert fields["dec"][1]["logicalType"] == "decimal" and fields["dec"][1]["precision"] == 12
    assert fields["dec_noprec"][1]["precision"] == 64
    assert fields["cd"][1]["logicalType"] == "date" and fields["cts"][1]["logicalType"] == "timestamp-millis"
    assert fields["ts_us"][1] == {
        "type": "long",
        "connect.version": 1,
        "connect.name": "io.debezium.time.MicroTimestamp",
    }
    assert fields["with_default"][0]["type"] == "string" and fields["with_default"][1] == "null"
    assert fields["by_id"][1]["items"]["name"] == "MapEntry"


def test_avro_logical_types_without_connect_names_type_like_their_connect_twins(registry: RegistryDouble) -> None:
    """A writer other than AvroData (only Avro logical types): same Arrow types, integer wire values."""
    row = {
        "type": "record",
        "name": "Value",
        "namespace": "plain",
        "fields": [
            {"name": "id", "type": "int"},
            {"name": "d", "type": {"type": "int", "logicalType": "date"}},
            {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "t_us", "type": {"type": "long", "logicalType": "time-micros"}},
            {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "ts_us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None},
            {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 3}},
            {
                "name": "fixed_dec",
                "type": {"type": "fixed", "name": "F", "size": 4, "logicalType": "decimal", "precision": 8, "scale": 1},
            },
            {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}},
        ],
    }
    envelope = {
        "type": "record",
        "name": "Envelope",
        "namespace": "plain",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }
    after = {
        "id": 1,
        "d": -1,
        "t_ms": 1,
        "t_us": 2,
        "ts_ms": 3,
        "ts_us": -4,
        "dec": (-1234).to_bytes(2, "big", signed=True),
        "fixed_dec": (5).to_bytes(4, "big", signed=True),
        "uid": "c4b1f5a2-3b0e-4d1f-9a51-0d8e3f8a2b11",
        "colour": "GREEN",
    }
    value = frame(registry.register("plain-value", envelope), envelope, {"before": None, "after": after, "op": "c"})
    event = AvroDecoder(settings(registry.url)).decode(KafkaRecord("plain", 0, 0, None, value))
    assert isinstance(event, ChangeEvent) and event.after is not None and event.columns is not None
    types = {name: ctype.arrow for name, ctype in event.columns.items()}
    assert types == {
        "id": pa.int32(),
        "d": pa.date32(),
        "t_ms": pa.string(),
        "t_us": pa.string(),
        "ts_ms": pa.timestamp("us"),
        "ts_us": pa.timestamp("us"),
        "dec": pa.decimal128(9, 3),
        "fixed_dec": pa.decimal128(8, 1),
        "uid": pa.string(),
        "colour": pa.string(),
    }
    assert event.after["d"] == -1 and event.after["ts_us"] == -4  # integers, as JsonConverter sends them
    assert to_arrow([event.after["dec"]], event.columns["dec"]).to_pylist()[0].as_tuple() == (1, (1, 2, 3, 4), -3)
    assert str(to_arrow([event.after["fixed_dec"]], event.columns["fixed_dec"])[0]) == "0.5"
    assert to_arrow([event.after["ts_ms"]], event.columns["ts_ms"]).cast(pa.int64()).to_pylist() == [3000]
    assert to_arrow([event.after["t_us"]], event.columns["t_us"]).to_pylist() == ["00:00:00.000002"]


# -- noise --------------------------------------------------------------------------------------------


def sample_record(name: str, topic: str) -> KafkaRecord:
    value = next(SAMPLES.glob(f"{name}_*.json")).read_bytes()
    return KafkaRecord(topic, 0, 5, None, orjson.dumps(orjson.loads(value)))


def avro_of_payload(registry: RegistryDouble, subject: str, schema: dict[str, Any], payload: dict[str, Any]) -> bytes:
    return frame(registry.register(subject, schema), schema, payload)


def test_control_records_are_the_same_noise_as_in_json(registry: RegistryDouble) -> None:
    decoder = AvroDecoder(settings(registry.url))
    transaction = {
        "type": "record",
        "name": "TransactionMetadataValue",
        "namespace": "io.debezium.connector.common",
        "fields": [
            {"name": "status", "type": "string"},
            {"name": "id", "type": "string"},
            {"name": "event_count", "type": ["null", "long"], "default": None},
            {"name": "ts_ms", "type": "long"},
        ],
    }
    begin = {"status": "BEGIN", "id": "571:53195829", "event_count": None, "ts_ms": 1486500577125}
    json_begin = EnvelopeDecoder().decode(sample_record("06a", "dbserver1.transaction"))
    avro_begin = decoder.decode(
        KafkaRecord("dbserver1.transaction", 0, 5, None, avro_of_payload(registry, "tx", transaction, begin))
    )
    assert_same_event(json_begin, avro_begin)
    assert isinstance(avro_begin, Noise) and avro_begin.kind == "transaction"

    schema_change = {
        "type": "record",
        "name": "SchemaChangeValue",
        "namespace": "io.debezium.connector.mysql",
        "fields": [
            {"name": "databaseName", "type": "string"},
            {"name": "ddl", "type": ["null", "string"], "default": None},
            {"name": "ts_ms", "type": "long"},
        ],
    }
    change = {"databaseName": "inventory", "ddl": "ALTER TABLE x ADD c int", "ts_ms": 1}
    avro_change = decoder.decode(
        KafkaRecord("dbserver1", 0, 6, None, avro_of_payload(registry, "sc", schema_change, change))
    )
    assert isinstance(avro_change, Noise) and avro_change.kind == "schema_change"

    message = {
        "type": "record",
        "name": "Envelope",
        "namespace": "msg",
        "fields": [{"name": "op", "type": "string"}, {"name": "ts_ms", "type": "long"}],
    }
    avro_message = decoder.decode(
        KafkaRecord("dbserver1.message", 0, 7, None, avro_of_payload(registry, "m", message, {"op": "m", "ts_ms": 1}))
    )
    assert isinstance(avro_message, Noise) and avro_message.kind == "message"
    heartbeat = decoder.decode(KafkaRecord("__debezium-heartbeat.dbserver1", 0, 8, None, b"\x00\x00\x00\x00\x63"))
    assert isinstance(heartbeat, Noise) and heartbeat.kind == "heartbeat"
    assert decoder.decode(KafkaRecord(TOPIC, 0, 9, b"\x00\x00\x00\x00\x01", None)) == Noise(
        KafkaRecord(TOPIC, 0, 9, b"\x00\x00\x00\x00\x01", None), "tombstone"
    )
    assert registry.schema_requests() == 3  # one per schema, whatever the number of records


# -- poison records -----------------------------------------------------------------------------------


def good_avro(registry: RegistryDouble) -> KafkaRecord:
    return AvroConverter(registry).convert(matrix_records()[0])


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda v: b"\x01" + v[1:], "magic byte"),
        (lambda v: b"{" + v[1:], "magic byte"),
        (lambda v: v[:3], "fewer than the 5-byte"),
        (lambda v: v[:-7], "truncated"),
        (lambda v: v + b"\x00\x00", "bytes left after the record"),
        (lambda v: v[:1] + (999).to_bytes(4, "big") + v[5:], "schema id 999 is not in the registry"),
    ],
    ids=["magic-1", "json-in-avro", "short", "truncated", "trailing", "unknown-id"],
)
def test_undecodable_values_raise_decode_error_naming_the_position(
    registry: RegistryDouble, mangle: Any, reason: str
) -> None:
    record = good_avro(registry)
    bad = record._replace(offset=77, value=mangle(record.value))
    with pytest.raises(DecodeError) as info:
        AvroDecoder(settings(registry.url)).decode(bad)
    assert f"{TOPIC}[0]@77" in str(info.value) and reason in str(info.value)


def test_an_unknown_id_is_asked_once_then_remembered(registry: RegistryDouble) -> None:
    record = good_avro(registry)
    bad = record._replace(value=record.value[:1] + (4242).to_bytes(4, "big") + record.value[5:])  # type: ignore[index]
    decoder = AvroDecoder(settings(registry.url))
    before = registry.schema_requests()
    for _ in range(5):
        with pytest.raises(DecodeError):
            decoder.decode(bad)
    assert registry.schema_requests() - before == 1


def test_a_bad_key_is_a_decode_error_too(registry: RegistryDouble) -> None:
    record = good_avro(registry)
    with pytest.raises(DecodeError) as info:
        AvroDecoder(settings(registry.url)).decode(record._replace(key=b'{"id":7}'))
    assert "key starts with byte 0x7b" in str(info.value)


def test_a_value_written_with_another_schema_is_a_decode_error(registry: RegistryDouble) -> None:
    """The classic wrong-schema case: a value framed with the key's schema id."""
    record = good_avro(registry)
    assert record.key is not None and record.value is not None
    wrong = record._replace(value=record.key[:5] + record.value[5:])
    with pytest.raises(DecodeError) as info:
        AvroDecoder(settings(registry.url)).decode(wrong)
    assert f"{TOPIC}[0]@0" in str(info.value)


@pytest.mark.parametrize(
    ("schema", "schema_type", "reason"),
    [
        ('{"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}', "AVRO", "unknown named type"),
        ("not json", "AVRO", "not JSON"),
        ('syntax = "proto3"; message X {}', "PROTOBUF", "PROTOBUF schema, not Avro"),
        ('["int", "string"]', "AVRO", "union of 2 non-null types"),
    ],
)
def test_an_unreadable_writer_schema_is_a_decode_error(
    registry: RegistryDouble, schema: str, schema_type: str, reason: str
) -> None:
    registry.add_schema(500, schema, schema_type)
    record = KafkaRecord(TOPIC, 1, 3, None, b"\x00" + (500).to_bytes(4, "big") + b"\x02")
    with pytest.raises(DecodeError) as info:
        AvroDecoder(settings(registry.url)).decode(record)
    assert reason in str(info.value) and f"{TOPIC}[1]@3" in str(info.value)


# -- the registry unavailable is not poison -----------------------------------------------------------


@pytest.mark.parametrize("status", [503, 500, 429])
def test_an_unavailable_registry_is_retried_then_reported_as_transient(registry: RegistryDouble, status: int) -> None:
    record = good_avro(registry)
    registry.unavailable_status = status
    decoder = AvroDecoder(settings(registry.url, max_unavailable_s=0.3))
    with pytest.raises(RegistryUnavailable) as info:
        decoder.decode(record)
    assert isinstance(info.value, TransientError) and not isinstance(info.value, DecodeError)
    assert registry.schema_requests() >= 2  # retried, not given up at the first answer
    message = str(info.value)
    assert registry.url in message and f"{TOPIC}[0]@0" in message and f"HTTP {status}" in message
    assert str(pickle.loads(pickle.dumps(info.value))) == message  # crosses Spark's process boundary

    registry.unavailable_status = None  # the registry is back: the same decoder goes on
    assert isinstance(decoder.decode(record), ChangeEvent)


def test_a_refused_connection_is_retried_then_reported_without_credentials() -> None:
    with RegistryDouble() as double:
        schema = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "int"}]}
        value = frame(double.register("k", schema), schema, {"id": 1})
        url = double.url
    # The double is stopped: its port refuses connections.
    secret_url = url.replace("http://", "http://alice:hunter2@")
    decoder = AvroDecoder(settings(secret_url, max_unavailable_s=0.2))
    with pytest.raises(RegistryUnavailable) as info:
        decoder.decode(KafkaRecord(TOPIC, 2, 5, None, value))
    assert url in str(info.value) and "hunter2" not in str(info.value) and "alice" not in str(info.value)
    assert f"{TOPIC}[2]@5" in str(info.value) and "ConnectError" in str(info.value)


def test_a_malformed_answer_is_retried_like_an_outage(registry: RegistryDouble) -> None:
    record = good_avro(registry)
    registry.malformed = True
    with pytest.raises(RegistryUnavailable, match="malformed answer"):
        AvroDecoder(settings(registry.url, max_unavailable_s=0.2)).decode(record)


def test_a_wrong_registry_path_is_a_configuration_error_not_poison(registry: RegistryDouble) -> None:
    """A 404 without the registry's 'schema not found' code means the URL is not the registry API."""
    record = good_avro(registry)
    with pytest.raises(RegistryError, match="Confluent-compatible API"):
        AvroDecoder(settings(registry.url + "/wrong/base")).decode(record)


# -- credentials --------------------------------------------------------------------------------------


def test_basic_auth_password_from_a_file_reference(tmp_path: Path) -> None:
    password_file = tmp_path / "registry-password"
    password_file.write_text("s3cret-pw\n")
    with RegistryDouble(require_basic=("mirror", "s3cret-pw")) as double:
        record = AvroConverter(double).convert(matrix_records()[0])
        config = settings(
            double.url, basic_auth_user="mirror", basic_auth_password=SecretStr(f"${{file:{password_file}}}")
        )
        decoder = AvroDecoder(config)
        assert isinstance(decoder.decode(record), ChangeEvent)
        assert "s3cret-pw" not in repr(config) and "s3cret-pw" not in str(config)
        # Pickled for Spark's workers: the reference travels, not the secret.
        assert b"s3cret-pw" not in pickle.dumps(decoder)
        assert isinstance(pickle.loads(pickle.dumps(decoder)).decode(record._replace(offset=1)), ChangeEvent)


def test_wrong_credentials_stop_the_job_without_showing_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECTOR_SOURCE__VALUE_FORMAT", "avro")
    monkeypatch.setenv("CONNECTOR_SOURCE__SCHEMA_REGISTRY__BASIC_AUTH_USER", "mirror")
    monkeypatch.setenv("CONNECTOR_SOURCE__SCHEMA_REGISTRY__BASIC_AUTH_PASSWORD", "wrong-pw")
    with RegistryDouble(require_basic=("mirror", "right-pw")) as double:
        record = AvroConverter(double).convert(matrix_records()[0])
        monkeypatch.setenv("CONNECTOR_SOURCE__SCHEMA_REGISTRY__URL", double.url)
        source = load_settings(None).source
        assert source.schema_registry.basic_auth_password is not None
        assert "wrong-pw" not in str(source)
        with pytest.raises(RegistryError) as info:
            open_decoder(source).decode(record)
        assert "HTTP 401" in str(info.value) and "wrong-pw" not in str(info.value)
        assert double.requests[-1].authorization == "Basic " + b64(b"mirror:wrong-pw")


def test_bearer_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGISTRY_TOKEN", "tok-123")
    with RegistryDouble(require_bearer="tok-123") as double:
        record = AvroConverter(double).convert(matrix_records()[0])
        decoder = AvroDecoder(settings(double.url, bearer_token=SecretStr("${env:REGISTRY_TOKEN}")))
        assert isinstance(decoder.decode(record), ChangeEvent)
        assert double.requests[-1].authorization == "Bearer tok-123"


# -- the factory and the config ------------------------------------------------------------------------


def test_open_decoder_picks_the_format() -> None:
    assert isinstance(open_decoder(SourceSettings()), EnvelopeDecoder)
    with pytest.raises(ConfigError, match="schema_registry.url"):
        open_decoder(SourceSettings(value_format="avro"))
    decoder = open_decoder(
        SourceSettings(value_format="avro", schema_registry=SchemaRegistrySettings(url="http://r:8081")),
        TypePolicy((20, 4), "stop"),
    )
    assert isinstance(decoder, AvroDecoder)
    copy = pickle.loads(pickle.dumps(decoder))  # no client yet, nothing unpicklable
    assert copy.__getstate__()["policy"] == TypePolicy((20, 4), "stop")


def test_check_config_accepts_the_avro_keys(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "source:\n  kind: kafka\n  value_format: avro\n  schema_registry:\n    url: http://registry:8081\n"
        "    basic_auth_user: mirror\n    basic_auth_password: ${file:/run/secrets/registry}\n"
        "    max_unavailable_s: 120\n"
    )
    assert check_config_file(str(config)) == []
    assert load_settings(str(config)).source.schema_registry.max_unavailable_s == 120


def test_a_tombstones_key_layout_is_the_same_as_json(registry: RegistryDouble) -> None:
    """A tombstone's delete is typed by its key alone: the Avro key gives the JSON key's values and types."""
    record = matrix_records()[3]
    json_key = EnvelopeDecoder().key_layout(record)
    avro_key = AvroDecoder(settings(registry.url)).key_layout(AvroConverter(registry).convert(record))
    assert (avro_key.values, avro_key.fields) == (json_key.values, json_key.fields) == ({"id": 7}, ("id",))
    assert json_key.types is not None and avro_key.types is not None
    assert {n: t.arrow for n, t in avro_key.types.items()} == {n: t.arrow for n, t in json_key.types.items()}
    assert json_key.types["id"].arrow == pa.int32()
