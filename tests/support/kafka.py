"""Producing test records to the real broker, and running the connector as its own process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import Producer

from connector.events import KafkaRecord

REPO_ROOT = Path(__file__).resolve().parents[2]


def produce(bootstrap: str, records: Iterable[KafkaRecord]) -> int:
    """Send records to their topic and partition, in order (idempotent producer keeps per-partition order)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    count = 0
    for record in records:
        producer.produce(
            record.topic,
            value=record.value,
            key=record.key,
            partition=record.partition,
            headers=list(record.headers) or None,
        )
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        msg = f"{remaining} records not delivered"
        raise RuntimeError(msg)
    return count


def run_connector(
    *args: str, env: dict[str, str] | None = None, wrapper: str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python -m connector ARGS`` (or a wrapper module) in a fresh process; output captured."""
    command = [sys.executable, "-m", wrapper or "connector", *args]
    return subprocess.run(
        command,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
