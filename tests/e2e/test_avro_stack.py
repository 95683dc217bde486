"""Debezium with the Avro converter against a real schema registry: the records decode as expected.

The stack of ``avro_stack`` (conftest) runs the Debezium PostgreSQL connector with Apicurio's Avro converter
in Confluent-compatible mode against a real Apicurio Registry, and a JSON twin connector on the same
database. The tests make known changes, read the Avro topics with confluent-kafka's ``Consumer``, decode
keys and values the way a Confluent-format consumer does (magic byte 0, 4-byte big-endian schema id,
writer schema from ``SchemaRegistryClient`` on the registry's Confluent-compatible API, Avro binary read
with ``fastavro.schemaless_reader``) and compare with the JSON twin's records of the same changes.

With ``AVRO_SAMPLES_OUT=DIR`` the records used here are also written to DIR (raw bytes, writer schemas and
the JSON twin's records: the ``tests/data/real_pg_avro`` samples, see its PROVENANCE.md).
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import psycopg
import pytest
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient

from tests.e2e import workload
from tests.e2e.conftest import AVRO_TWIN_PREFIX, SNAPSHOT_ROWS, StackCtl

pytestmark = pytest.mark.e2e

CONSUME_TIMEOUT_S = 180
PLACEHOLDER = "__debezium_unavailable_value"
PREFIX = "dbserver1"

# Keys well away from the workload's snapshot keys.
ALL_TYPES_ID = 990_001
TOASTED_ID = 990_002
FULL_ID = 990_003
TENANT = 990_004

TS = dt.datetime(2024, 2, 29, 13, 14, 15, 123456)  # timestamp without time zone
TSTZ = dt.datetime(2024, 2, 29, 13, 14, 15, 654321, tzinfo=dt.timezone(dt.timedelta(hours=1)))
DATE = dt.date(2024, 2, 29)
EPOCH = dt.datetime(1970, 1, 1)  # Debezium's MicroTimestamp: microseconds since this (naive) epoch
# Stored out of line (the workload sets STORAGE EXTERNAL: no compression, TOASTed above ~2 kB).
BIG_TEXT = "".join(chr(0x41 + (i * 7919) % 26) + chr(0x3B1 + (i * 104729) % 24) for i in range(1500))
BIG_BLOB = bytes((i * 2654435761) % 251 for i in range(3000))


def _micros(value: dt.datetime) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _insert_sql(table: str, row: dict[str, Any]) -> str:
    t = workload.TABLES_BY_NAME[table]
    cols = ", ".join(f'"{c}"' for c in row)
    values = ", ".join(
        workload.sql_literal(v, t.column(c).sql_type.replace("{enum}", f"public.{workload.ENUM_TYPE}"))
        for c, v in row.items()
    )
    return f'INSERT INTO public."{table}" ({cols}) VALUES ({values})'


ALL_TYPES_ROW: dict[str, Any] = {
    "id": ALL_TYPES_ID,
    "c_int": -7,
    "c_bigint": 9_000_000_000,
    "c_numeric": Decimal("12345.67"),
    "c_numeric_free": Decimal("-0.0001234567"),  # scale 10: mirrored as its exact text ("-0.0001234567")
    "c_real": 1.5,
    "c_double": -2.25,
    "c_bool": True,
    "c_text": "naïve café 日本語 emoji🚀",
    "c_varchar": "varchar ü",
    "c_bytea": b"\x00\x01\xfe\xff",
    "c_date": DATE,
    "c_time": dt.time(23, 59, 58, 999999),
    "c_timestamp": TS,
    "c_timestamptz": TSTZ,
    "c_uuid": uuid.UUID("12345678-1234-5678-9abc-def012345678"),
    "c_json": '{"a": [1, 2]}',
    "c_jsonb": '{"b": {"c": true}}',
    "c_enum": "très bien",
}

# Statements, each in its own transaction, in this order.
CHANGES: tuple[str, ...] = (
    _insert_sql("all_types", ALL_TYPES_ROW),
    f"UPDATE public.all_types SET c_numeric = -0.01, c_date = DATE '1969-12-31', "
    f"c_timestamp = TIMESTAMP '1969-12-31 23:59:59.5', c_text = NULL WHERE id = {ALL_TYPES_ID}",
    f"DELETE FROM public.all_types WHERE id = {ALL_TYPES_ID}",
    _insert_sql(
        "toasted",
        {"id": TOASTED_ID, "version": 1, "note": "n1", "body": BIG_TEXT, "blob": BIG_BLOB, "updated_at": TSTZ},
    ),
    f"UPDATE public.toasted SET note = 'n2', version = 2 WHERE id = {TOASTED_ID}",  # body/blob: placeholders
    _insert_sql(
        "full_identity",
        {"id": FULL_ID, "amount": Decimal("1.10"), "status": "ok", "attrs": '{"k": 1}', "body": "b", "updated_at": TS},
    ),
    f"UPDATE public.full_identity SET amount = 2.20, status = 'happy' WHERE id = {FULL_ID}",
    _insert_sql(
        "composite_key",
        {
            "tenant_id": TENANT,
            "item_code": "AVRO-1",
            "qty": 3,
            "price": Decimal("-12.3456"),
            "label": "l",
            "valid_from": DATE,
            "changed_at": TSTZ,
        },
    ),
    # A key change: Debezium sends a delete of the old key, its tombstone, then a create of the new key.
    f"UPDATE public.composite_key SET item_code = 'AVRO-2', qty = 4 WHERE tenant_id = {TENANT}",
)

# Per table: (our key value of the first key column, the records expected for it, in order).
EXPECTED: dict[str, tuple[int, tuple[str, ...]]] = {
    "all_types": (ALL_TYPES_ID, ("c", "u", "d", "tombstone")),
    "toasted": (TOASTED_ID, ("c", "u")),
    "full_identity": (FULL_ID, ("c", "u")),
    "composite_key": (TENANT, ("c", "d", "tombstone", "c")),
}
FIRST_KEY_COLUMN = {"all_types": "id", "toasted": "id", "full_identity": "id", "composite_key": "tenant_id"}


class ConfluentAvro:
    """Confluent wire format: magic byte 0, 4-byte big-endian schema id, Avro binary (writer schema by id)."""

    def __init__(self, url: str) -> None:
        self.client = SchemaRegistryClient({"url": url})
        self.schemas: dict[int, Any] = {}
        self.schema_strs: dict[int, str] = {}  # exactly as the registry returned them
        self._parsed: dict[int, Any] = {}

    def decode(self, data: bytes) -> tuple[int, Any]:
        assert len(data) >= 5, data
        assert data[0] == 0, f"magic byte {data[0]}"
        schema_id = int.from_bytes(data[1:5], "big")
        if schema_id not in self._parsed:
            self.schema_strs[schema_id] = self.client.get_schema(schema_id).schema_str
            schema = json.loads(self.schema_strs[schema_id])
            self.schemas[schema_id] = schema
            self._parsed[schema_id] = fastavro.parse_schema(schema)
        return schema_id, fastavro.schemaless_reader(io.BytesIO(data[5:]), self._parsed[schema_id], None)


@dataclass
class Rec:
    topic: str
    partition: int
    offset: int
    key_raw: bytes | None
    value_raw: bytes | None
    key: Any = None
    value: Any = None  # None for a tombstone
    key_schema_id: int | None = None
    value_schema_id: int | None = None

    @property
    def op(self) -> str:
        return "tombstone" if self.value is None else str(self.value["op"])


@dataclass
class Captured:
    avro: dict[str, list[Rec]] = field(default_factory=dict)  # table -> our records, in topic order
    json: dict[str, list[Rec]] = field(default_factory=dict)
    avro_snapshot: dict[str, Rec] = field(default_factory=dict)  # table -> first snapshot read
    avro_all_snapshot: dict[str, list[Rec]] = field(default_factory=dict)  # table -> all snapshot reads
    json_snapshot: dict[str, list[Rec]] = field(default_factory=dict)  # table -> all snapshot reads
    decoder: ConfluentAvro | None = None


def _consume(
    bootstrap: str, prefix: str, decode: Any, done: Any, timeout: float = CONSUME_TIMEOUT_S
) -> dict[str, list[Rec]]:
    """Every record of PREFIX.public.<table> per table (key and value decoded), until ``done(records)``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"e2e-avro-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    out: dict[str, list[Rec]] = {t: [] for t in workload.table_names()}
    try:
        consumer.subscribe([f"{prefix}.public.{t}" for t in workload.table_names()])
        deadline = time.monotonic() + timeout
        while not done(out):
            assert time.monotonic() < deadline, {t: [r.op for r in rs[-8:]] for t, rs in out.items()}
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            topic = msg.topic()
            assert topic is not None
            rec = Rec(topic, msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value())
            rec.key_schema_id, rec.key = decode(rec.key_raw)
            if rec.value_raw is not None:
                rec.value_schema_id, rec.value = decode(rec.value_raw)
            out[topic.rsplit(".", 1)[1]].append(rec)
    finally:
        consumer.close()
    return out


def _ours(records: dict[str, list[Rec]]) -> dict[str, list[Rec]]:
    return {
        t: [r for r in rs if r.key[FIRST_KEY_COLUMN[t]] == EXPECTED[t][0]] for t, rs in records.items() if t in EXPECTED
    }


def _all_arrived(records: dict[str, list[Rec]]) -> bool:
    ours = _ours(records)
    return all(len(ours[t]) >= len(ops) for t, (_, ops) in EXPECTED.items())


def _json_decode(data: bytes) -> tuple[None, Any]:
    envelope = json.loads(data)
    assert set(envelope) == {"schema", "payload"}, "JsonConverter with schemas.enable=true"
    return None, envelope["payload"]


@pytest.fixture(scope="module")
def captured(avro_stack: dict[str, str]) -> Iterator[Captured]:
    """Make CHANGES, then read both connectors' topics until every expected record has arrived."""
    with psycopg.connect(avro_stack["postgres"], autocommit=True) as conn:
        for statement in CHANGES:
            conn.execute(statement)  # type: ignore[arg-type]

    decoder = ConfluentAvro(avro_stack["schema.registry.url"])
    cap = Captured(decoder=decoder)
    avro_all = _consume(avro_stack["bootstrap.servers"], PREFIX, decoder.decode, _all_arrived)
    json_all = _consume(avro_stack["bootstrap.servers"], AVRO_TWIN_PREFIX, _json_decode, _all_arrived)
    cap.avro = _ours(avro_all)
    cap.json = _ours(json_all)
    for table, recs in avro_all.items():
        cap.avro_all_snapshot[table] = [r for r in recs if r.op == "r"]
        cap.avro_snapshot[table] = cap.avro_all_snapshot[table][0]
        cap.json_snapshot[table] = [r for r in json_all[table] if r.op == "r"]
    yield cap
    if os.environ.get("AVRO_SAMPLES_OUT"):
        _save_samples(Path(os.environ["AVRO_SAMPLES_OUT"]), cap)


# ------------------------------------------------------------------------------------------------ tests
def test_stack_status_shows_registry_and_both_connectors(avro_stack: dict[str, str], avro_stack_ctl: StackCtl) -> None:
    status = avro_stack_ctl("status")
    assert re.search(r"^registry: running registry\.url=http://127\.0\.0\.1:\d+$", status, re.M), status
    assert re.search(rf"^connector: {re.escape(avro_stack['connector'])} RUNNING", status, re.M), status
    assert re.search(rf"^connector: {re.escape(avro_stack['json_connector'])} RUNNING", status, re.M), status
    assert avro_stack["schema.registry.url"] == avro_stack["registry.url"] + "/apis/ccompat/v7"


def test_records_are_in_confluent_wire_format_with_registered_ids(
    avro_stack: dict[str, str], captured: Captured
) -> None:
    client = SchemaRegistryClient({"url": avro_stack["schema.registry.url"]})
    subjects = set(client.get_subjects())
    for table, recs in captured.avro.items():
        topic = f"{PREFIX}.public.{table}"
        assert {f"{topic}-key", f"{topic}-value"} <= subjects, subjects
        assert [r.op for r in recs] == list(EXPECTED[table][1]), table
        for rec in recs:
            assert rec.key_raw is not None
            assert rec.key_raw[0] == 0
            assert (rec.value_raw is None) == (rec.op == "tombstone")
        # The ids in the payload are the registry's ids of the subjects' schemas.
        latest_value = client.get_latest_version(f"{topic}-value")
        assert recs[0].value_schema_id == latest_value.schema_id, table
        assert recs[0].key_schema_id == client.get_latest_version(f"{topic}-key").schema_id
    for table, rec in captured.avro_snapshot.items():
        assert rec.value["source"]["snapshot"] != "false", table
    assert len(captured.json_snapshot["all_types"]) == SNAPSHOT_ROWS


def test_all_types_create_update_delete_decode(captured: Captured) -> None:
    create, update, delete, tombstone = captured.avro["all_types"]
    assert create.key == {"id": ALL_TYPES_ID}
    assert tombstone.key == {"id": ALL_TYPES_ID}
    assert tombstone.value is None

    assert create.value["op"] == "c"
    assert create.value["before"] is None
    after = create.value["after"]
    assert after["c_numeric"] == Decimal("12345.67")  # Avro decimal (bytes, scale 2): fastavro decodes it
    assert after["c_numeric_free"]["scale"] == 10  # io.debezium.data.VariableScaleDecimal {scale, value}
    free = int.from_bytes(after["c_numeric_free"]["value"], "big", signed=True)
    assert Decimal(free).scaleb(-after["c_numeric_free"]["scale"]) == Decimal("-0.0001234567")
    assert after["c_date"] == (DATE - dt.date(1970, 1, 1)).days  # io.debezium.time.Date: days since epoch
    assert after["c_timestamp"] == _micros(TS)  # io.debezium.time.MicroTimestamp
    assert after["c_timestamptz"] == "2024-02-29T12:14:15.654321Z"  # io.debezium.time.ZonedTimestamp, UTC
    assert after["c_time"] == ((23 * 60 + 59) * 60 + 58) * 1_000_000 + 999999  # io.debezium.time.MicroTime
    assert after["c_int"] == -7
    assert after["c_bigint"] == 9_000_000_000
    assert after["c_real"] == 1.5
    assert after["c_double"] == -2.25
    assert after["c_bool"] is True
    assert after["c_text"] == ALL_TYPES_ROW["c_text"]
    assert after["c_bytea"] == b"\x00\x01\xfe\xff"
    assert after["c_uuid"] == "12345678-1234-5678-9abc-def012345678"
    assert json.loads(after["c_jsonb"]) == {"b": {"c": True}}
    assert after["c_enum"] == "très bien"

    source = create.value["source"]
    assert source["connector"] == "postgresql"
    assert source["name"] == PREFIX
    assert source["db"] == "mirror"
    assert source["schema"] == "public"
    assert source["table"] == "all_types"
    assert source["snapshot"] == "false"
    assert isinstance(source["lsn"], int)
    assert isinstance(source["txId"], int)
    assert source["version"].endswith(".Final")

    assert update.value["op"] == "u"
    assert update.value["before"] is None  # REPLICA IDENTITY DEFAULT
    after = update.value["after"]
    assert after["c_numeric"] == Decimal("-0.01")
    assert after["c_date"] == -1
    assert after["c_timestamp"] == -500_000
    assert after["c_text"] is None
    assert after["c_enum"] == "très bien"
    assert update.value["source"]["lsn"] > source["lsn"]

    assert delete.value["op"] == "d"
    assert delete.value["after"] is None
    assert delete.value["before"]["id"] == ALL_TYPES_ID
    assert delete.value["before"]["c_numeric"] is None  # only the key under REPLICA IDENTITY DEFAULT


def test_writer_schemas_carry_connect_and_logical_types(captured: Captured) -> None:
    assert captured.decoder is not None
    schema_id = captured.avro["all_types"][0].value_schema_id
    assert schema_id is not None
    envelope = captured.decoder.schemas[schema_id]
    assert envelope["name"] == "Envelope"
    assert envelope["namespace"] == f"{PREFIX}.public.all_types"
    value = next(f for f in envelope["fields"] if f["name"] == "before")["type"][1]
    types = {f["name"]: f["type"][1] if isinstance(f["type"], list) else f["type"] for f in value["fields"]}
    assert types["c_numeric"]["logicalType"] == "decimal"
    assert (types["c_numeric"]["precision"], types["c_numeric"]["scale"]) == (12, 2)
    assert types["c_numeric"]["connect.name"] == "org.apache.kafka.connect.data.Decimal"
    assert types["c_numeric_free"]["connect.name"] == "io.debezium.data.VariableScaleDecimal"
    assert types["c_date"]["connect.name"] == "io.debezium.time.Date"
    assert types["c_timestamp"]["connect.name"] == "io.debezium.time.MicroTimestamp"
    assert types["c_timestamptz"]["connect.name"] == "io.debezium.time.ZonedTimestamp"
    assert types["c_enum"]["connect.parameters"]["allowed"] == ",".join(workload.ENUM_LABELS)


def test_toast_placeholders_full_identity_and_key_change(captured: Captured) -> None:
    create, update = captured.avro["toasted"]
    assert create.value["after"]["body"] == BIG_TEXT
    assert create.value["after"]["blob"] == BIG_BLOB
    assert update.value["after"]["note"] == "n2"
    assert update.value["after"]["body"] == PLACEHOLDER
    assert update.value["after"]["blob"] == PLACEHOLDER.encode()

    _, update = captured.avro["full_identity"]
    assert update.value["before"]["amount"] == Decimal("1.10")  # REPLICA IDENTITY FULL: the old row
    assert update.value["after"]["amount"] == Decimal("2.20")
    assert update.value["after"]["status"] == "happy"

    create, delete, tombstone, recreate = captured.avro["composite_key"]
    assert create.key == {"tenant_id": TENANT, "item_code": "AVRO-1"}
    assert create.value["after"]["price"] == Decimal("-12.3456")
    assert create.value["after"]["valid_from"] == (DATE - dt.date(1970, 1, 1)).days
    assert delete.key == tombstone.key == {"tenant_id": TENANT, "item_code": "AVRO-1"}
    assert recreate.key == {"tenant_id": TENANT, "item_code": "AVRO-2"}
    assert recreate.value["op"] == "c"
    assert recreate.value["after"]["qty"] == 4


def _as_json_payload(value: Any) -> Any:
    """An Avro-decoded Debezium value in the JsonConverter's representation (decimals and bytes base64)."""
    if isinstance(value, dict):
        if set(value) == {"scale", "value"} and isinstance(value["value"], bytes):
            return {"scale": value["scale"], "value": base64.b64encode(value["value"]).decode()}
        return {k: _as_json_payload(v) for k, v in value.items()}
    if isinstance(value, Decimal):
        unscaled = int(value.scaleb(-value.as_tuple().exponent))  # type: ignore[operator]
        length = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1  # as Java's toByteArray
        return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def test_json_twin_carries_the_same_changes(captured: Captured) -> None:
    """Both encodings of each change: same op, same WAL position, same before/after values."""
    for table, avro_recs in captured.avro.items():
        json_recs = captured.json[table]
        assert [r.op for r in json_recs] == [r.op for r in avro_recs], table
        for a, j in zip(avro_recs, json_recs, strict=True):
            assert j.key == _as_json_payload(a.key), table
            if a.value is None:
                continue
            assert j.value["source"]["lsn"] == a.value["source"]["lsn"], table
            assert j.value["source"]["txId"] == a.value["source"]["txId"], table
            for side in ("before", "after"):
                assert j.value[side] == _as_json_payload(a.value[side]), (table, a.op, side)


# ------------------------------------------------------------------------------------------------ samples
def _size(rec: Rec) -> int:
    return len(rec.value_raw or b"")


def _save_samples(out: Path, cap: Captured) -> None:
    """Write the records of this run as decoder test data (see tests/data/real_pg_avro/PROVENANCE.md)."""
    assert cap.decoder is not None
    (out / "schemas").mkdir(parents=True, exist_ok=True)

    def b64(data: bytes | None) -> str | None:
        return None if data is None else base64.b64encode(data).decode()

    def twin(j: Rec) -> dict[str, Any]:
        return {
            "topic": j.topic,
            "key": None if j.key_raw is None else j.key_raw.decode(),
            "value": None if j.value_raw is None else j.value_raw.decode(),
        }

    pairs: list[tuple[str, Rec, Rec]] = []
    for table, first in cap.avro_snapshot.items():
        # The first snapshot read of each table, unless it is big (toasted): then the smallest one.
        a = first if len(first.value_raw or b"") < 4096 else min(cap.avro_all_snapshot[table], key=_size)
        key = _as_json_payload(a.key)
        j = next(r for r in cap.json_snapshot[table] if r.key == key)
        pairs.append(("snapshot read", a, j))
    for table, recs in cap.avro.items():
        pairs.extend(
            (f"{table}: CHANGES of test_avro_stack.py", a, j) for a, j in zip(recs, cap.json[table], strict=True)
        )

    lines = []
    for note, a, j in pairs:
        lines.append(
            json.dumps(
                {
                    "note": note,
                    "topic": a.topic,
                    "partition": a.partition,
                    "offset": a.offset,
                    "op": a.op,
                    "key_schema_id": a.key_schema_id,
                    "value_schema_id": a.value_schema_id,
                    "key_b64": b64(a.key_raw),
                    "value_b64": b64(a.value_raw),
                    "json_twin": twin(j),
                },
                ensure_ascii=False,
            )
        )
    (out / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for schema_id, schema_str in sorted(cap.decoder.schema_strs.items()):
        (out / "schemas" / f"{schema_id}.json").write_text(schema_str + "\n", encoding="utf-8")


# -- the connector on the Avro topics: the mirror equals the source, and equals the JSON twin's mirror ----------


def _wait_for_watermarks(avro_stack: dict[str, str]) -> None:
    """A watermark row must reach both the Avro topic and the JSON twin's: Debezium streams the WAL in order."""
    from connector.config import SchemaRegistrySettings
    from connector.debezium.avro import AvroDecoder
    from connector.debezium.envelope import ChangeEvent, EnvelopeDecoder
    from connector.events import KafkaRecord

    token = uuid.uuid4().hex
    with psycopg.connect(avro_stack["postgres"], autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.e2e_watermark (token text PRIMARY KEY)")
        conn.execute("INSERT INTO public.e2e_watermark VALUES (%s)", (token,))
    decoders = {
        f"{PREFIX}.public.e2e_watermark": AvroDecoder(SchemaRegistrySettings(url=avro_stack["schema.registry.url"])),
        f"{AVRO_TWIN_PREFIX}.public.e2e_watermark": EnvelopeDecoder(),
    }
    consumer = Consumer(
        {
            "bootstrap.servers": avro_stack["bootstrap.servers"],
            "group.id": f"watermark-{token}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 2000,
        }
    )
    seen: set[str] = set()
    try:
        consumer.subscribe(list(decoders))
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while time.monotonic() < deadline and len(seen) < len(decoders):
            msg = consumer.poll(1.0)
            if msg is None or msg.error() is not None or msg.value() is None:
                continue
            record = KafkaRecord(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
            event = decoders[msg.topic()].decode(record)
            if isinstance(event, ChangeEvent) and (event.after or {}).get("token") == token:
                seen.add(msg.topic())
    finally:
        consumer.close()
    assert len(seen) == len(decoders), f"watermark reached only {sorted(seen)} within {CONSUME_TIMEOUT_S}s"


def _run_mirror(avro_stack: dict[str, str], root: Path, topics: str, avro: bool) -> None:
    from tests.support.kafka import run_connector

    config = root / "config.yaml"
    root.mkdir(parents=True, exist_ok=True)
    source = (
        f"source:\n  value_format: avro\n  schema_registry:\n    url: {avro_stack['schema.registry.url']}\n"
        if avro
        else ""
    )
    config.write_text(f"mirror:\n  toast_policy: keep-last\n  max_rows_per_file: 300\n{source}")
    result = run_connector(
        "run",
        "--config",
        str(config),
        "--bootstrap-servers",
        avro_stack["bootstrap.servers"],
        "--topics",
        topics,
        "--landing-zone",
        str(root / "lz"),
        "--checkpoint",
        str(root / "cp"),
        "--trigger",
        "available-now",
        "--max-offsets-per-trigger",
        "500",
        "--metrics-port",
        "0",
    )
    assert result.returncode == 0, result.stderr[-5000:]


def test_mirror_from_avro_equals_the_source_and_the_json_twins_mirror(
    avro_stack: dict[str, str], tmp_path: Path
) -> None:
    from connector.readback.replay import replay_landing_zone
    from connector.readback.validate import validate_landing_zone
    from connector.readback.verify import verify
    from connector.storage import LocalStorage

    with psycopg.connect(avro_stack["postgres"], autocommit=True) as conn:
        workload.streaming_phase(conn, 250, seed=707)
    _wait_for_watermarks(avro_stack)
    _run_mirror(avro_stack, tmp_path / "avro", avro_stack["topics"], avro=True)
    _run_mirror(avro_stack, tmp_path / "json", avro_stack["json_topics"], avro=False)
    avro_lz, json_lz = LocalStorage(tmp_path / "avro" / "lz"), LocalStorage(tmp_path / "json" / "lz")
    assert [str(p) for p in validate_landing_zone(avro_lz)] == []
    reports = verify(avro_stack["postgres"], str(tmp_path / "avro" / "lz"))
    assert {f"public.{name}" for name in workload.table_names()} <= {r.table for r in reports}
    for report in reports:
        assert report.ok, report.line() + "\n" + "\n".join(report.examples)
        assert report.source_rows == report.mirror_rows
    # Same changes through either converter: the same tables, rows and Arrow types in the landing zone.
    from_avro, from_json = replay_landing_zone(avro_lz), replay_landing_zone(json_lz)
    assert sorted(from_avro) == sorted(from_json)
    for table, rows in from_avro.items():
        assert rows.schema == from_json[table].schema, table
        assert sorted(rows.to_pylist(), key=repr) == sorted(from_json[table].to_pylist(), key=repr), table
