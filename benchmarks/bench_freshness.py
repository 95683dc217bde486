"""``python -m benchmarks.bench freshness``: from an event's source time to its row being visible in the mirror.

A steady stream at ``--rate`` events/s for ``--seconds`` into one table's topic (``--partitions`` partitions)
while ``python -m connector run --trigger 10s`` (the default trigger) runs. Each event's ``ts_ms`` is the time
it was produced, and the same instant is in a data column (``produced_ms``: the mirror keeps row columns,
not the envelope). A watcher lists the table's folder in the local landing zone every 50 ms; when a numbered
file appears it reads the file's ``produced_ms`` column, so each row's freshness is (the moment its file was
first seen) − (its source time). p50 and p95 are over every row produced during the steady stream.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from benchmarks.service import (
    broker,
    create_topics,
    debezium_event,
    percentile,
    producer,
    send,
    start_connector,
)
from connector.landing_zone.layout import parse_data_file_name


class FolderWatcher(threading.Thread):
    """Notes when each numbered data file of ``folder`` is first seen, and its rows' ``produced_ms`` then."""

    def __init__(self, folder: Path, interval: float = 0.05) -> None:
        super().__init__(daemon=True, name="freshness-watcher")
        self.folder = folder
        self.interval = interval
        self.seen: dict[str, float] = {}
        self.latencies_ms: list[tuple[int, float]] = []  # (produced_ms, seen − produced in ms)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.scan()
            time.sleep(self.interval)

    def scan(self) -> None:
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return
        now_ms = time.time() * 1000
        for name in sorted(names):
            if name in self.seen or parse_data_file_name(name) is None:
                continue
            self.seen[name] = now_ms
            produced = pq.read_table(self.folder / name, columns=["produced_ms"]).column(0).to_pylist()
            self.latencies_ms.extend((p, now_ms - p) for p in produced if p is not None)


def bench_freshness(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures; the last line is the one the README records."""
    prefix = f"bf{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}.bench.fresh"
    with (
        tempfile.TemporaryDirectory(prefix="bench-freshness-") as scratch,
        broker(args.bootstrap_servers, f"{scratch}/kafka") as bootstrap,
    ):
        create_topics(bootstrap, [topic], args.partitions)
        landing = Path(scratch) / "lz"
        watcher = FolderWatcher(landing / "bench.schema" / "fresh")
        service = start_connector(
            [
                "--bootstrap-servers", bootstrap,
                "--topics", rf"{prefix}\..*",
                "--landing-zone", str(landing),
                "--checkpoint", f"{scratch}/cp",
                "--metrics-port", "0",
                "--trigger", args.trigger,
            ],
            Path(scratch) / "service.log",
        )  # fmt: skip
        prod = producer(bootstrap)
        try:
            # Warm-up: the JVM's start and the first batch are not part of a steady stream.
            key, value = debezium_event(0, 0, "c", int(time.time() * 1000))
            send(prod, topic, 0, key, value)
            prod.flush(30)
            service.wait_for(lambda b: sum(x["records"] for x in b) >= 1, args.timeout, "the warm-up batch")
            warm = len(service.batches())
            watcher.start()
            steady_from_ms = int(time.time() * 1000)  # events carry whole milliseconds too
            sent, produced_s = _produce_at_rate(prod, topic, args)
            deadline = time.monotonic() + args.timeout
            while sum(1 for p, _ in watcher.latencies_ms if p >= steady_from_ms) < sent:
                if time.monotonic() > deadline or service.process.poll() is not None:
                    msg = f"only {len(watcher.latencies_ms)} of {sent} rows became visible:\n{service.tail()}"
                    raise RuntimeError(msg)
                time.sleep(0.2)
            watcher.done.set()
            watcher.join(5)
            batches = service.batches()[warm:]
        finally:
            watcher.done.set()
            service.stop()
    _print_figures(args, sent, produced_s, batches, watcher, steady_from_ms)
    return 0


def _produce_at_rate(prod: Any, topic: str, args: argparse.Namespace) -> tuple[int, float]:
    """``args.rate`` events a second for ``args.seconds``, on a fixed schedule: (events sent, seconds it took)."""
    interval = 0.01
    per_tick = args.rate * interval
    started = time.monotonic()
    sent, next_id, owed = 0, 1, 0.0
    while (elapsed := time.monotonic() - started) < args.seconds:
        owed += per_tick
        while owed >= 1:
            key, value = debezium_event(next_id, 0, "c", int(time.time() * 1000))
            send(prod, topic, next_id % args.partitions, key, value)
            next_id, sent, owed = next_id + 1, sent + 1, owed - 1
        prod.poll(0)
        # Keep the schedule: sleep to the next tick, not a fixed interval after this one's work.
        time.sleep(max(0.0, (elapsed // interval + 1) * interval - (time.monotonic() - started)))
    prod.flush(60)
    return sent, time.monotonic() - started


def _print_figures(
    args: argparse.Namespace,
    sent: int,
    produced_s: float,
    batches: list[dict[str, Any]],
    watcher: FolderWatcher,
    steady_from_ms: int,
) -> None:
    """The run's figures; the last line is the one the README records."""
    latencies = [lat for p, lat in watcher.latencies_ms if p >= steady_from_ms]
    durations = [b["duration_s"] for b in batches]
    print(
        f"{sent} events at {sent / produced_s:.0f}/s for {produced_s:.0f} s into {args.partitions} partitions, "
        f"trigger {args.trigger}; {len(batches)} batches, {len(watcher.seen)} files"
    )
    print(
        "batches (duration_s collect_s sink_s records): "
        + " ".join(f"{b['duration_s']}/{b['collect_s']}/{b['sink_s']}/{b['records']}" for b in batches)
    )
    print(
        f"limit: a row waits for its trigger (uniform over {args.trigger}, mean half of it) plus its batch "
        f"(median batch {percentile(durations, 0.5):.2f} s, max {max(durations, default=0):.2f} s)"
    )
    print(
        f"rate={args.rate:g} seconds={args.seconds:g} trigger={args.trigger} rows={len(latencies)} "
        f"p50_s={percentile(latencies, 0.5) / 1000:.2f} p95_s={percentile(latencies, 0.95) / 1000:.2f} "
        f"max_s={max(latencies, default=0) / 1000:.2f}"
    )
