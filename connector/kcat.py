"""kcat's JSON envelope (``kcat -C -J``): one record per line → ``KafkaRecord``.

This is the offline twin of the Kafka source: ``convert`` reads topic dumps, and the streaming job's
embedded default reads a folder of them with Spark's file source.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.json as pa_json

from connector.errors import DecodeError
from connector.events import KafkaRecord


def record_from_kcat(obj: dict[str, Any]) -> KafkaRecord:
    """Build a record from one parsed kcat object (``key``/``payload`` are text or null)."""
    try:
        topic = obj["topic"]
        partition = int(obj["partition"])
        offset = int(obj["offset"])
    except (KeyError, TypeError, ValueError) as exc:
        msg = f"missing or invalid topic/partition/offset: {exc}"
        raise ValueError(msg) from exc
    if not isinstance(topic, str):
        msg = "topic must be a string"
        raise ValueError(msg)
    key = obj.get("key")
    payload = obj.get("payload")
    for name, value in (("key", key), ("payload", payload)):
        if value is not None and not isinstance(value, str):
            raise DecodeError(topic, partition, offset, f"kcat {name} must be a string or null")
    return KafkaRecord(
        topic=topic,
        partition=partition,
        offset=offset,
        key=key.encode() if key is not None else None,
        value=payload.encode() if payload is not None else None,
        headers=_headers(obj.get("headers")),
        timestamp_ms=obj.get("ts") if isinstance(obj.get("ts"), int) else None,
    )


def _headers(raw: Any) -> tuple[tuple[str, bytes | None], ...]:
    """Kcat writes headers as a flat list ``[name, value, name, value, ...]``."""
    if not raw:
        return ()
    if isinstance(raw, dict):
        return tuple((str(k), None if v is None else str(v).encode()) for k, v in raw.items())
    pairs = []
    for index in range(0, len(raw) - 1, 2):
        value = raw[index + 1]
        pairs.append((str(raw[index]), None if value is None else str(value).encode()))
    return tuple(pairs)


def parse_kcat_line(line: bytes | str) -> KafkaRecord:
    """One ``kcat -J`` line as a record.

    Raises:
        ValueError: the line is not a kcat record (``orjson.JSONDecodeError`` is a ``ValueError``).
    """
    obj = orjson.loads(line)
    if not isinstance(obj, dict):
        msg = "not a JSON object"
        raise ValueError(msg)
    return record_from_kcat(obj)


def kcat_line(record: KafkaRecord) -> bytes:
    """``record`` as one ``kcat -C -J`` line (for dumps a benchmark or a test writes)."""
    obj: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "tstype": "create",
        "ts": record.timestamp_ms if record.timestamp_ms is not None else 1_700_000_000_000,
        "broker": 1,
        "key": None if record.key is None else record.key.decode(),
        "payload": None if record.value is None else record.value.decode(),
    }
    if record.headers:
        obj["headers"] = [
            part for name, value in record.headers for part in (name, None if value is None else value.decode())
        ]
    return orjson.dumps(obj) + b"\n"


# The kcat fields a record needs; kcat's others (tstype, ts, broker) are ignored.
_KCAT_FIELDS = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("key", pa.string()),
        pa.field("payload", pa.string()),
        pa.field("headers", pa.list_(pa.string())),
    ]
)
# Spark's Kafka source gives headers as (key, value) structs.
_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def kcat_records_table(lines: Sequence[bytes]) -> pa.Table | None:
    """Whole kcat lines as the record columns Spark's Kafka source gives (topic, partition, offset, key, value).

    Parsed in one call of Arrow's JSON reader, so the columnar lane can take them like a Kafka micro-batch.
    ``None`` when the lines need the per-line reader: a line that is not a kcat record (it reports them one
    by one), or headers in a form other than kcat's flat ``[name, value, ...]`` list.
    """
    data = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines)
    if not lines:
        return None
    try:
        # One block: across blocks pyarrow 21's reader unifies inferred types unsafely (see columnar.py).
        table = pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1),
            parse_options=pa_json.ParseOptions(explicit_schema=_KCAT_FIELDS, unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != len(lines) or any(table.column(n).null_count for n in ("topic", "partition", "offset")):
        return None
    columns = {
        "topic": table.column("topic"),
        "partition": table.column("partition"),
        "offset": table.column("offset"),
        "key": table.column("key").cast(pa.binary()),
        "value": table.column("payload").cast(pa.binary()),
    }
    headers = table.column("headers").combine_chunks()
    if headers.null_count < len(headers):
        pairs = _header_pairs(headers)
        if pairs is None:
            return None
        columns["headers"] = pairs
    return pa.table(columns)


def _header_pairs(flat: pa.ListArray) -> pa.ListArray | None:
    """Kcat's ``[name, value, ...]`` lists as lists of (key, value) structs; ``None`` if malformed."""
    offsets = flat.offsets.to_numpy(zero_copy_only=False) - flat.offsets[0].as_py()
    if (offsets % 2).any():
        return None
    values = flat.flatten()
    names, contents = values[0::2], values[1::2]
    if names.null_count:
        return None
    pairs = pa.StructArray.from_arrays([names, contents.cast(pa.binary())], fields=list(_HEADER))
    return pa.ListArray.from_arrays(pa.array(offsets // 2, pa.int32()), pairs, mask=flat.is_null())
