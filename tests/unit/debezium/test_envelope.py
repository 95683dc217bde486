"""Decoding Debezium envelopes, on the real and documented samples (tests/data/debezium-samples)."""

from __future__ import annotations

import base64
import decimal
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from connector.debezium.arrow_values import to_arrow
from connector.debezium.envelope import ChangeEvent, EnvelopeDecoder, Noise
from connector.errors import DecodeError
from connector.events import KafkaRecord, Op

SAMPLES = Path(__file__).parents[2] / "data" / "debezium-samples"


def sample(name: str) -> bytes:
    return next(SAMPLES.glob(f"{name}_*.json")).read_bytes()


def record(
    value: bytes | None, topic: str = "dbserver1.public.customers", key: bytes | None = b'{"id":1}'
) -> KafkaRecord:
    return KafkaRecord(topic, 2, 41, key, value)


def decode(value: bytes | None, **kwargs: object) -> ChangeEvent | Noise:
    return EnvelopeDecoder().decode(record(value, **kwargs))  # type: ignore[arg-type]


def test_create_with_schema_reads_columns_in_source_order() -> None:
    event = decode(sample("01"))
    assert isinstance(event, ChangeEvent)
    assert event.op is Op.CREATE
    assert event.after == {"id": 1, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
    assert event.columns is not None
    assert list(event.columns) == ["id", "first_name", "last_name", "email"]
    assert event.columns["id"].arrow == pa.int32()
    assert event.source["connector"] == "postgresql"


@pytest.mark.parametrize("name", ["02", "03", "09", "11", "12", "13"])
def test_schemaless_and_placeholder_schema_samples_decode(name: str) -> None:
    event = decode(sample(name))
    assert isinstance(event, ChangeEvent)
    assert event.columns is None
    assert event.op in {"u", "d", "r"}


def test_update_default_identity_has_before_with_key_only() -> None:
    event = decode(sample("02"))
    assert isinstance(event, ChangeEvent)
    assert event.before == {"id": 1}
    assert event.after is not None and event.after["first_name"] == "Anne Marie"


def test_field_order_is_not_fixed() -> None:
    """MySQL sample 12 serialises 'transaction' before 'op'; payload keys are read by name."""
    event = decode(sample("12"), topic="mysql.inventory.customers")
    assert isinstance(event, ChangeEvent)
    assert event.op == "r"
    reordered = orjson.dumps(
        {"payload": orjson.loads(sample("16"))["payload"], "schema": orjson.loads(sample("16"))["schema"]}
    )
    event2 = decode(reordered)
    assert isinstance(event2, ChangeEvent)
    assert event2.columns is not None and "decimal_test_5_2" in event2.columns


def test_decimals_from_real_output_are_exact() -> None:
    event = decode(sample("16"))
    assert isinstance(event, ChangeEvent) and event.columns is not None and event.after is not None
    cols = event.columns
    assert to_arrow([event.after["decimal_test_5_2"]], cols["decimal_test_5_2"]).to_pylist() == [
        decimal.Decimal("123.45")
    ]
    # Wider than Delta's 38 digits: exact text by default (mirror.wide_decimals).
    big = to_arrow([event.after["decimal_test_39_6"]], cols["decimal_test_39_6"]).to_pylist()[0]
    assert big == "585691028598451546227916918584388.123456"
    assert cols["decimal_test_39_6"].arrow == pa.string()


def test_variable_scale_decimal_is_exact() -> None:
    event = decode(sample("17"))
    assert isinstance(event, ChangeEvent) and event.columns is not None and event.after is not None
    vs_columns = [name for name, c in event.columns.items() if c.wire == "vsdecimal_text"]
    assert vs_columns
    values = to_arrow([event.after[vs_columns[0]]], event.columns[vs_columns[0]]).to_pylist()
    assert values == ["123456.789"]  # exact text by default (mirror.variable_scale_decimal)
    assert event.before is None  # DEFAULT identity update: real output has no before


def test_snapshot_list_of_real_reads() -> None:
    values = orjson.loads(sample("18"))
    decoder = EnvelopeDecoder()
    events = [decoder.decode(record(orjson.dumps(v), key=b'{"id":1}')) for v in values]
    assert [e.op for e in events if isinstance(e, ChangeEvent)] == ["r", "r", "r", "r"]


@pytest.mark.parametrize(
    ("value", "topic", "kind"),
    [
        (None, "dbserver1.public.customers", "tombstone"),
        (b"", "dbserver1.public.customers", "tombstone"),
        (b'{"schema":null,"payload":null}', "dbserver1.public.customers", "tombstone"),
        (b'{"ts_ms":1}', "__debezium-heartbeat.dbserver1", "heartbeat"),
        (None, "dbserver1.transaction", "transaction"),
    ],
)
def test_noise_is_classified(value: bytes | None, topic: str, kind: str) -> None:
    if kind == "transaction":
        value = sample("06a")
    result = decode(value, topic=topic)
    assert isinstance(result, Noise) and result.kind == kind


def test_transaction_end_schema_change_and_message_are_noise() -> None:
    assert decode(sample("06b"), topic="dbserver1.transaction") == Noise(
        record(sample("06b"), "dbserver1.transaction"), "transaction"
    )
    change = decode(sample("14"), topic="mysql")
    assert isinstance(change, Noise) and change.kind == "schema_change"
    message = decode(sample("05"))
    assert isinstance(message, Noise) and message.kind == "message"


def test_truncate_decodes_as_op_t() -> None:
    event = decode(sample("04"), key=None)
    assert isinstance(event, ChangeEvent) and event.op is Op.TRUNCATE


def test_keys_in_both_shapes() -> None:
    with_schema = decode(sample("01"), key=sample("08"))
    assert isinstance(with_schema, ChangeEvent)
    assert with_schema.key == {"id": 1004} and with_schema.key_fields == ("id",)
    bare = decode(sample("01"), key=b'{"a":1,"b":"x"}')
    assert isinstance(bare, ChangeEvent) and bare.key_fields == ("a", "b")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"schema":{"type":"struct"},"payload":{"op":"c"', "not valid JSON"),
        (b"[1,2]", "not an object"),
        (b'{"op":"x","after":{}}', "unknown op"),
        (b'{"op":["c"],"after":{}}', "unknown op"),  # unhashable: was a TypeError past the decoder
        (b'{"op":{"c":1},"after":{}}', "unknown op"),
        (b'{"op":"c","after":null}', "without an 'after' row"),
        (b'{"foo":1}', "no 'op'"),
    ],
)
def test_malformed_values_name_topic_partition_offset(value: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode(value)
    assert str(info.value).startswith("dbserver1.public.customers[2]@41: ")
    assert reason in str(info.value)


def test_schema_cache_reused_and_correct_for_changed_schema() -> None:
    decoder = EnvelopeDecoder()
    compact = orjson.dumps(orjson.loads(sample("01")))  # JsonConverter writes compact JSON
    first = decoder.decode(record(compact))
    second = decoder.decode(record(compact))
    assert isinstance(first, ChangeEvent) and isinstance(second, ChangeEvent)
    assert first.columns is second.columns  # parsed once
    value = orjson.loads(sample("01"))
    value["schema"]["fields"][1]["fields"].append({"type": "string", "optional": True, "field": "extra"})
    value["payload"]["after"]["extra"] = "x"
    third = decoder.decode(record(orjson.dumps(value)))
    assert isinstance(third, ChangeEvent) and third.columns is not None and "extra" in third.columns


def test_row_fields_a_values_schema_does_not_declare_are_ignored_as_jsonconverter_does() -> None:
    """Kafka Connect's JsonConverter builds a struct from its schema's fields and ignores the payload's others."""
    value = orjson.loads(sample("01"))
    value["payload"]["after"]["undeclared"] = "x"
    value["payload"]["before"] = {"id": 1, "also_undeclared": 2}
    event = decode(orjson.dumps(value))
    assert isinstance(event, ChangeEvent) and event.columns is not None
    assert event.after == {"id": 1, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
    assert event.before == {"id": 1}
    # Without a schema the payload is all there is: every field is a column.
    schemaless = decode(orjson.dumps(value["payload"]))
    assert isinstance(schemaless, ChangeEvent) and schemaless.columns is None
    assert schemaless.after is not None and schemaless.after["undeclared"] == "x"


def test_avro_read_as_json_says_to_set_value_format_avro() -> None:
    """Real Debezium Avro output (tests/data/real_pg_avro) decoded as JSON: the error says what to change."""
    line = orjson.loads((SAMPLES.parent / "real_pg_avro" / "records.jsonl").read_bytes().splitlines()[0])
    key, value = base64.b64decode(line["key_b64"]), base64.b64decode(line["value_b64"])
    with pytest.raises(DecodeError) as info:
        decode(value)
    assert "value is not valid JSON" in str(info.value)
    assert "set source.value_format: avro" in str(info.value)
    with pytest.raises(DecodeError, match="key is not valid JSON.*set source.value_format: avro"):
        EnvelopeDecoder.parse_key(record(b"{}", key=key))
    with pytest.raises(DecodeError) as plain:
        decode(b"not json at all")
    assert "value_format" not in str(plain.value)  # only Avro-looking bytes get the hint


def test_a_keys_layout_types_its_columns_when_it_carries_its_schema() -> None:
    """What a tombstone's delete row is typed by: the key's Connect schema; a schemaless key gives no types."""
    schema = {
        "type": "struct",
        "fields": [
            {"field": "id", "type": "int64"},
            {"field": "at", "type": "int64", "name": "io.debezium.time.MicroTimestamp"},
        ],
    }
    keyed = KafkaRecord("t", 0, 4, orjson.dumps({"schema": schema, "payload": {"id": 1, "at": 5}}), None)
    layout = EnvelopeDecoder().key_layout(keyed)
    assert (layout.values, layout.fields) == ({"id": 1, "at": 5}, ("id", "at"))
    assert layout.types is not None
    assert {n: t.arrow for n, t in layout.types.items()} == {"id": pa.int64(), "at": pa.timestamp("us")}
    bare = EnvelopeDecoder().key_layout(keyed._replace(key=b'{"id":1}'))
    assert bare == ({"id": 1}, ("id",), None)
    assert EnvelopeDecoder().key_layout(keyed._replace(key=None)) == (None, None, None)
    with pytest.raises(DecodeError, match=r"t\[0\]@4"):
        EnvelopeDecoder().key_layout(keyed._replace(key=b"{not json"))
