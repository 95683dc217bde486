"""What ``bench tables`` and ``bench freshness`` share: a broker, Debezium topics, and ``python -m connector run``.

The connector runs as its own process, as a user runs it (``python -m connector run``), and the figures come
from its service log: one JSON line per micro-batch (``"event": "batch"`` with ``collect_s``, ``sink_s`` and
``duration_s``).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from benchmarks.bench_stream import _start_broker, _stop_broker
from benchmarks.events import postgres_envelope

REPO_ROOT = Path(__file__).resolve().parents[1]
_BATCH_MARK = b'{"event":"batch"'


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in 0..1) of ``values``; NaN when there are none."""
    if not values:
        return math.nan
    if not 0.0 <= fraction <= 1.0:
        msg = f"percentile fraction must be within 0..1, got {fraction}"
        raise ValueError(msg)
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def batch_lines(log_text: bytes | str) -> list[dict[str, Any]]:
    """The service log's per-batch JSON objects, in order (any log prefix before the JSON is ignored)."""
    raw = log_text.encode() if isinstance(log_text, str) else log_text
    out = []
    for line in raw.splitlines():
        start = line.find(_BATCH_MARK)
        if start >= 0:
            with contextlib.suppress(orjson.JSONDecodeError):
                out.append(orjson.loads(line[start:]))
    return out


def debezium_event(row_id: int, version: int, op: str, ts_ms: int) -> tuple[bytes, bytes]:
    """(key, value) of a schemaless Debezium JSON change event of a small table.

    ``produced_ms`` is a data column holding the same instant as the envelope's ``ts_ms`` (the mirror keeps
    row columns, not the envelope), so a reader of the landing zone sees each row's source time.
    """
    after = {"id": row_id, "version": version, "note": f"row {row_id} version {version}", "produced_ms": ts_ms}
    # Debezium's whole envelope (its ``source`` block names a table; the topic, not the block, routes the row).
    value = postgres_envelope(None, after, op, ts_ms, "t", row_id + version)
    return orjson.dumps({"id": row_id}), orjson.dumps(value)


@contextlib.contextmanager
def broker(bootstrap_servers: str | None, state_dir: str) -> Iterator[str]:
    """The given broker, or one started with ``deploy/local/kafka.sh`` (and stopped afterwards)."""
    if bootstrap_servers:
        yield bootstrap_servers
        return
    bootstrap = _start_broker(state_dir)
    try:
        yield bootstrap
    finally:
        _stop_broker(state_dir)


def create_topics(bootstrap: str, topics: Iterable[str], partitions: int) -> None:
    """Create the topics (100 per admin request), waiting for each."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = list(topics)
    for start in range(0, len(names), 100):
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names[start : start + 100]],
            operation_timeout=60,
        )
        for future in futures.values():
            future.result(120)
    # A created topic can still be unknown to the broker for a while (its metadata catching up under load): a
    # record produced meanwhile fails with UNKNOWN_TOPIC_OR_PART. Wait until every partition has a leader.
    deadline = time.monotonic() + 300
    while True:
        known = admin.list_topics(timeout=30).topics
        missing = [
            name
            for name in names
            if name not in known
            or len(known[name].partitions) != partitions
            or any(p.leader < 0 for p in known[name].partitions.values())
        ]
        if not missing:
            return
        if time.monotonic() > deadline:
            msg = f"{len(missing)} created topics still have no leader, the first: {missing[0]}"
            raise RuntimeError(msg)
        time.sleep(1)


def producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
        }
    )


#: Records the broker refused or that timed out (``topic[partition]: error``): a flush counts them as done.
UNDELIVERED: list[str] = []


def _delivered(err: Any, msg: Any) -> None:
    if err is not None:
        UNDELIVERED.append(f"{msg.topic()}[{msg.partition()}]: {err}")


def send(prod: Any, topic: str, partition: int, key: bytes, value: bytes) -> None:
    """Produce one record, waiting for room in the producer's queue when it is full."""
    while True:
        try:
            prod.produce(topic, value, key, partition=partition, on_delivery=_delivered)
            return
        except BufferError:
            prod.poll(0.2)


def flush_delivered(prod: Any, timeout_s: float = 120) -> None:
    """Wait until every record sent is delivered; a record the broker refused fails the benchmark, named."""
    if prod.flush(timeout_s):
        msg = "not every record was delivered"
        raise RuntimeError(msg)
    if UNDELIVERED:
        msg = f"{len(UNDELIVERED)} records were not delivered, the first: {UNDELIVERED[0]}"
        raise RuntimeError(msg)


@dataclass
class Connector:
    """One ``python -m connector run`` process whose log (stderr) goes to a file."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def batches(self) -> list[dict[str, Any]]:
        return batch_lines(self.log_path.read_bytes())

    def wait_for(self, predicate: Any, timeout: float, what: str) -> list[dict[str, Any]]:
        """Wait until ``predicate(batches)`` holds; fail with the log's tail if the process ends or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            batches = self.batches()
            if predicate(batches):
                return batches
            if self.process.poll() is not None:
                msg = f"the connector exited ({self.process.returncode}) before {what}:\n{self.tail()}"
                raise RuntimeError(msg)
            if time.monotonic() > deadline:
                msg = f"timed out after {timeout:.0f} s waiting for {what}:\n{self.tail()}"
                raise RuntimeError(msg)
            time.sleep(0.2)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM (a graceful stop: the current batch is committed) and wait; SIGKILL if it hangs."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        return self.process.returncode


def start_connector(args: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> Connector:
    """``python -m connector run ARGS`` from the repository root, its stderr and stdout into ``log_path``."""
    log = log_path.open("wb")
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "connector", "run", *args],
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()
    return Connector(process, log_path)
