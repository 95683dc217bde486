"""Seeded fuzz of both decoders: truncated, bit-flipped, spliced and wrong-schema payloads, JSON and Avro.

The contract that keeps a poison record from crashing the job or corrupting a table: every record
decodes to a ``ChangeEvent`` or ``Noise``, or raises ``DecodeError`` naming ``topic[partition]@offset``;
and every value of a decoded event converts to its column's Arrow type or raises ``ConversionError``
(which the sink turns into a stopped table naming the record). Never any other exception. The Avro
writer schemas are served by ``RegistryDouble``, a **test double** of the Confluent registry API.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from connector.config import SchemaRegistrySettings
from connector.debezium import schema_registry
from connector.debezium.arrow_values import ConversionError, to_arrow
from connector.debezium.avro import AvroDecoder
from connector.debezium.decoder import Decoder
from connector.debezium.envelope import ChangeEvent, EnvelopeDecoder, Noise
from connector.errors import DecodeError
from connector.events import KafkaRecord
from connector.kcat import record_from_kcat
from tests.support.registry_double import RegistryDouble
from tests.unit.debezium.test_avro import AvroConverter, matrix_records

SEED = 20251121
CASES = 3000
DATA = Path(__file__).parents[2] / "data"


@pytest.fixture(scope="module")
def registry() -> Iterator[RegistryDouble]:
    for cache in (schema_registry._WRITER_SCHEMAS, schema_registry._UNREADABLE, schema_registry._MISSING):
        cache.clear()
    with RegistryDouble() as double:
        yield double


def json_corpus() -> list[KafkaRecord]:
    records = []
    for path in sorted((DATA / "real_pg").glob("*.jsonl")):
        records.extend(record_from_kcat(json.loads(line)) for line in path.read_text().splitlines() if line.strip())
    for index, path in enumerate(sorted((DATA / "debezium-samples").glob("*.json"))):
        value = orjson.dumps(orjson.loads(path.read_bytes()))
        records.append(KafkaRecord("dbserver1.public.sample", 0, index, None, value))
    records.extend(r for r in matrix_records() if r.value is not None)
    return records


def has_connect_schema(record: KafkaRecord) -> bool:
    """Whether JsonConverter wrote the record with its schema (what an Avro converter needs)."""
    for raw in (record.key, record.value):
        if raw is not None:
            document = orjson.loads(raw)
            if not isinstance(document, dict) or not isinstance(document.get("schema"), dict):
                return False
            if "type" not in document["schema"]:
                return False
    return record.value is not None


def flip_bits(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        position = rng.randrange(len(out))
        out[position] ^= 1 << rng.randrange(8)
    return bytes(out)


def mutate(rng: random.Random, record: KafkaRecord, corpus: list[KafkaRecord], schema_ids: list[int]) -> KafkaRecord:
    """One damaged copy of ``record`` (its value, sometimes its key)."""
    value = record.value or b""
    other = rng.choice(corpus)
    kind = rng.choice(["truncate", "flip", "splice", "wrong-schema", "garbage", "key"])
    if kind == "truncate":
        value = value[: rng.randrange(len(value) + 1)]
    elif kind == "flip" and value:
        value = flip_bits(rng, value)
    elif kind == "splice":
        donor = other.value or b""
        value = value[: rng.randrange(len(value) + 1)] + donor[rng.randrange(len(donor) + 1) :]
    elif kind == "wrong-schema":
        if value[:1] == b"\x00" and len(value) >= 5:
            value = b"\x00" + rng.choice(schema_ids).to_bytes(4, "big") + value[5:]
        elif value.startswith(b'{"schema":') and (other.value or b"").startswith(b'{"schema":'):
            mine, theirs = orjson.loads(value), orjson.loads(other.value or b"")
            value = orjson.dumps({"schema": theirs["schema"], "payload": mine["payload"]})
    elif kind == "garbage":
        value = rng.randbytes(rng.randrange(64))
    elif kind == "key":
        key = record.key or b""
        return record._replace(key=flip_bits(rng, key) if key and rng.random() < 0.5 else key[: len(key) // 2])
    return record._replace(value=value)


def check_outcome(decoder: Decoder, record: KafkaRecord) -> str:
    """Decode ``record``; fail the test on any outcome outside the contract. Returns the outcome's name."""
    try:
        event = decoder.decode(record)
    except DecodeError as exc:
        assert record.position in str(exc), str(exc)
        return "DecodeError"
    assert isinstance(event, (ChangeEvent, Noise)), type(event)
    if isinstance(event, ChangeEvent) and event.columns is not None:
        for row in (event.before, event.after):
            for name, ctype in event.columns.items():
                if row is not None and name in row:
                    try:
                        to_arrow([row[name]], ctype)
                    except ConversionError:
                        pass
    return type(event).__name__


def test_damaged_records_only_ever_decode_or_raise_decode_error(registry: RegistryDouble) -> None:
    rng = random.Random(SEED)
    json_records = json_corpus()
    converter = AvroConverter(registry)
    avro_records = [converter.convert(r) for r in json_records if has_connect_schema(r)]
    corpus = json_records + avro_records
    schema_ids = list(registry.ids())
    decoders: list[tuple[str, Decoder]] = [
        ("json", EnvelopeDecoder()),
        ("avro", AvroDecoder(SchemaRegistrySettings(url=registry.url, max_unavailable_s=5))),
    ]
    outcomes: dict[tuple[str, str, str], int] = {}
    for case in range(CASES):
        base = rng.choice(corpus)
        damaged = mutate(rng, base, corpus, schema_ids)._replace(offset=1_000_000 + case)
        fmt = "avro" if base in avro_records else "json"
        for name, decoder in decoders:
            outcome = check_outcome(decoder, damaged)
            key = (fmt, name, outcome)
            outcomes[key] = outcomes.get(key, 0) + 1
    # The fuzz reached every interesting place: each decoder rejected records and accepted some of its own.
    assert outcomes.get(("json", "json", "DecodeError"), 0) > 100
    assert outcomes.get(("avro", "avro", "DecodeError"), 0) > 100
    assert outcomes.get(("json", "json", "ChangeEvent"), 0) > 50
    assert outcomes.get(("avro", "avro", "ChangeEvent"), 0) > 50
    assert outcomes.get(("json", "avro", "ChangeEvent"), 0) == 0  # JSON is never mistaken for Avro


def test_undamaged_records_decode_alike(registry: RegistryDouble) -> None:
    """The fuzz starts from good records (both forms classified alike), so rejections come from the damage."""
    records = [r for r in json_corpus() if has_connect_schema(r)]
    converter = AvroConverter(registry)
    avro = AvroDecoder(SchemaRegistrySettings(url=registry.url))
    outcomes = [(check_outcome(EnvelopeDecoder(), r), check_outcome(avro, converter.convert(r))) for r in records]
    assert all(j == a for j, a in outcomes)
    # Only the documentation's MySQL key sample (a key, not an envelope) is rejected.
    assert [j for j, _ in outcomes].count("DecodeError") == 1


# The fuzz found these; each is pinned here so a regression names itself.


def test_a_schema_field_without_its_name_is_a_decode_error() -> None:
    """One flipped bit in ``"field"`` leaves valid JSON whose schema is no Connect schema."""
    record = json_corpus()[0]
    assert record.value is not None and record.key is not None
    value = record.value.replace(b'"field":"c_int"', b'"fielf":"c_int"')
    with pytest.raises(DecodeError, match="value schema is not a Connect schema"):
        EnvelopeDecoder().decode(record._replace(value=value))
    key = record.key.replace(b'"field":"id"', b'"fiel":"id"', 1)
    with pytest.raises(DecodeError, match="key schema is not a Connect schema"):
        EnvelopeDecoder().decode(record._replace(key=key))


def test_a_variable_scale_decimal_without_its_scale_is_a_conversion_error() -> None:
    event = EnvelopeDecoder().decode(json_corpus()[0])
    assert isinstance(event, ChangeEvent) and event.columns is not None
    with pytest.raises(ConversionError):
        to_arrow([{"scalf": 2, "value": "AQ=="}], event.columns["c_numeric_free"])
