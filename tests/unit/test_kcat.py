"""kcat -J lines → record columns for the columnar lane, and the per-line fallback for what it cannot read."""

from __future__ import annotations

import orjson
import pyarrow as pa

from connector.events import KafkaRecord
from connector.kcat import kcat_line, kcat_records_table, parse_kcat_line


def record(offset: int, key: bytes | None = b'{"id":1}', value: bytes | None = b'{"op":"c"}') -> KafkaRecord:
    return KafkaRecord("db.public.t", offset % 2, offset, key, value)


def test_lines_become_the_kafka_source_columns() -> None:
    records = [record(0), record(1, key=None, value=None), record(2, value='{"n":"é ✓"}'.encode())]
    table = kcat_records_table([kcat_line(r) for r in records])
    assert table is not None
    assert table.schema == pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
        ]
    )
    assert table.to_pylist() == [
        {"topic": r.topic, "partition": r.partition, "offset": r.offset, "key": r.key, "value": r.value}
        for r in records
    ]


def test_headers_become_key_value_structs_as_spark_gives_them() -> None:
    records = [
        KafkaRecord("t", 0, 0, None, b"{}", (("__debezium.oldkey", b'{"id":1}'), ("n", None))),
        KafkaRecord("t", 0, 1, None, b"{}"),
    ]
    table = kcat_records_table([kcat_line(r) for r in records])
    assert table is not None
    assert table.column("headers").to_pylist() == [
        [{"key": "__debezium.oldkey", "value": b'{"id":1}'}, {"key": "n", "value": None}],
        None,
    ]


def test_a_line_the_arrow_reader_cannot_take_leaves_the_batch_to_the_per_line_reader() -> None:
    good = kcat_line(record(0))
    object_payload = orjson.dumps({"topic": "t", "partition": 0, "offset": 1, "key": None, "payload": {"op": "c"}})
    no_offset = orjson.dumps({"topic": "t", "partition": 0, "key": None, "payload": "{}"})
    odd_headers = orjson.dumps({"topic": "t", "partition": 0, "offset": 2, "payload": "{}", "headers": ["a"]})
    for bad in (object_payload, no_offset, b"not json", odd_headers):
        assert kcat_records_table([good, bad + b"\n"]) is None, bad


def test_parse_kcat_line_names_the_position_of_a_non_string_payload() -> None:
    line = orjson.dumps({"topic": "t", "partition": 3, "offset": 9, "key": None, "payload": {"op": "c"}})
    try:
        parse_kcat_line(line)
    except Exception as exc:  # DecodeError: the record is positioned, so the error names it
        assert "t[3]@9" in str(exc)
    else:
        raise AssertionError("a non-string payload must not parse")
