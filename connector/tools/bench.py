"""``bench``: throughput figures printed beside the raw limits measured in the same run.

This machine is shared and noisy: ratios are stable, absolute times are not, so nothing here is a test.
"""

from __future__ import annotations

import argparse
import base64
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

from connector.config import MirrorSettings
from connector.events import KafkaRecord
from connector.kcat import kcat_line

BENCH_TOPIC = "bench.public.orders"
_BATCH = 100_000

_VALUE_SCHEMA = {
    "type": "struct",
    "name": "bench.public.orders.Envelope",
    "fields": [
        {
            "field": field,
            "type": "struct",
            "optional": True,
            "name": "bench.public.orders.Value",
            "fields": [
                {"field": "id", "type": "int64", "optional": False},
                {"field": "customer_id", "type": "int32", "optional": False},
                {"field": "status", "type": "string", "optional": True},
                {"field": "note", "type": "string", "optional": True},
                {
                    "field": "amount",
                    "type": "bytes",
                    "optional": True,
                    "name": "org.apache.kafka.connect.data.Decimal",
                    "parameters": {"scale": "2", "connect.decimal.precision": "12"},
                },
                {"field": "quantity", "type": "int32", "optional": True},
                {"field": "ratio", "type": "double", "optional": True},
                {"field": "paid", "type": "boolean", "optional": True},
                {"field": "created_at", "type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp"},
                {"field": "ship_date", "type": "int32", "optional": True, "name": "io.debezium.time.Date"},
            ],
        }
        for field in ("before", "after")
    ]
    + [
        {"field": "op", "type": "string", "optional": False},
        {"field": "ts_ms", "type": "int64", "optional": True},
    ],
}
_KEY_SCHEMA = {"type": "struct", "fields": [{"field": "id", "type": "int64", "optional": False}]}


def generated_events(count: int, with_schema: bool, partitions: int = 1) -> Iterator[KafkaRecord]:
    """``count`` Debezium events of a 10-column table: 70% creates, 25% updates, 5% deletes."""
    amount = base64.b64encode((123456).to_bytes(4, "big", signed=True)).decode()
    for offset in range(count):
        row_id = offset if offset % 20 < 14 else offset // 2
        op = "c" if offset % 20 < 14 else ("u" if offset % 20 < 19 else "d")
        row = {
            "id": row_id,
            "customer_id": offset % 9973,
            "status": "shipped" if offset % 3 else "new",
            "note": f"order note number {offset}",
            "amount": amount,
            "quantity": offset % 17,
            "ratio": offset / 7.0,
            "paid": offset % 2 == 0,
            "created_at": 1_700_000_000_000_000 + offset,
            "ship_date": 19_000 + offset % 365,
        }
        payload: dict[str, object] = {
            "before": {"id": row_id} if op == "d" else None,
            "after": None if op == "d" else row,
            "source": {"connector": "postgresql", "db": "bench"},
            "op": op,
            "ts_ms": 1_700_000_000_000 + offset,
        }
        key: dict[str, object] = {"id": row_id}
        value: dict[str, object] = payload
        if with_schema:
            key = {"schema": _KEY_SCHEMA, "payload": key}
            value = {"schema": _VALUE_SCHEMA, "payload": payload}
        yield KafkaRecord(
            BENCH_TOPIC, offset % partitions, offset // partitions, orjson.dumps(key), orjson.dumps(value)
        )


def bench_convert(events: int, with_schema: bool) -> tuple[float, float]:
    """Events per second of ``convert`` on a kcat dump, and peak RSS in MB.

    Measured: reading the dump, the lane (or the record path), Parquet and publishing. Writing the dump is not.
    """
    from connector.tools.convert import convert

    with tempfile.TemporaryDirectory(prefix="bench-convert-") as scratch:
        dump = Path(scratch) / "dump.jsonl"
        with dump.open("wb") as out:
            for record in generated_events(events, with_schema):
                out.write(kcat_line(record))
        started = time.perf_counter()
        summary = convert([str(dump)], f"{scratch}/lz", f"{scratch}/cp", MirrorSettings(), _BATCH)
        elapsed = time.perf_counter() - started
        if not summary.ok or summary.records != events:
            msg = f"bench convert did not convert every event: {summary}"
            raise RuntimeError(msg)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return events / elapsed, peak_mb


def json_parse_limit(events: int, with_schema: bool) -> float:
    """Values/s of parsing the same values with orjson and nothing else (the floor of any JSON decoder)."""
    values = [r.value for r in generated_events(events, with_schema)]
    started = time.perf_counter()
    for value in values:
        orjson.loads(value or b"null")
    return events / (time.perf_counter() - started)


def bench_command(args: argparse.Namespace) -> int:
    """Run the benchmark named by ``args.target``."""
    if args.target == "convert":
        rate, peak = bench_convert(args.events, args.with_schema)
        parse = json_parse_limit(min(args.events, 200_000), args.with_schema)
        print(f"events={args.events} with_schema={args.with_schema}")
        print(f"raw limit: orjson.loads of the same values alone = {parse:.0f} values/s (ratio {rate / parse:.2f})")
        print(f"events_per_second={rate:.0f} peak_rss_mb={peak:.0f}")
        return 0
    from connector.tools.bench_stream import bench_stream

    return bench_stream(args)
