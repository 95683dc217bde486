"""kcat's JSON envelope (``kcat -C -J``): one record per line → ``KafkaRecord``.

This is the offline twin of the Kafka source: ``convert`` reads topic dumps, and the streaming job's
embedded default reads a folder of them with Spark's file source.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

import orjson

from connector.errors import DecodeError
from connector.events import KafkaRecord


class KcatLineError(ValueError):
    """A line that is not a kcat record; names the file and line."""


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


def read_kcat(stream: IO[bytes], source: str) -> Iterator[KafkaRecord | KcatLineError]:
    """Yield records, or a ``KcatLineError`` for a line that cannot be read (the caller decides)."""
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            yield parse_kcat_line(line)
        except ValueError as exc:
            yield KcatLineError(f"{source}:{number}: not a kcat -J record: {exc}")
