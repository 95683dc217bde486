"""``python -m benchmarks.bench tables``: many Debezium topics, one batch touching every table, beside the limit.

1. N topics (one table each, ``--partitions`` partitions), ``--changes`` events per table, in a real broker.
2. Catch-up: ``python -m connector run --trigger available-now``; its batch lines give the batch time.
3. The service (``--trigger``, default 2s): after a warm-up batch, one more update per table → the batch
   time and the cost per changed table.
4. The limit: the same landing-zone requests (create + rename of one small file per table) made by a bare
   client with 16 threads, against the same landing zone (a local folder, or the DFS test double with
   ``--request-ms`` of latency added to every request).
5. The mirror is replayed (``connector.readback.replay``) and compared with what was produced: a fast
   wrong run is never reported.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from benchmarks.service import (
    broker,
    create_topics,
    debezium_event,
    flush_delivered,
    producer,
    send,
    start_connector,
)
from connector.storage import LocalStorage
from connector.storage.base import Storage

_ROOT = "bench.MountedRelationalDatabase/Files/LandingZone"
_FILESYSTEM = "workspace"


def table_topics(prefix: str, tables: int) -> list[str]:
    """``<prefix>.bench.t00000`` …: one topic per table (schema ``bench``)."""
    return [f"{prefix}.bench.t{n:05d}" for n in range(tables)]


def produce_changes(
    bootstrap: str, topics: list[str], partitions: int, changes: int, expected: dict[str, dict[int, int]]
) -> int:
    """``changes`` events per topic: creates of ``changes // 2`` keys then updates; ``expected`` is updated."""
    keys = max(1, changes // 2)
    prod = producer(bootstrap)
    count = 0
    for topic in topics:
        table = expected.setdefault(topic.split(".", 1)[1], {})
        for i in range(changes):
            row_id = i % keys
            version = table.get(row_id, -1) + 1
            key, value = debezium_event(row_id, version, "c" if version == 0 else "u", int(time.time() * 1000))
            send(prod, topic, row_id % partitions, key, value)
            table[row_id] = version
            count += 1
        prod.poll(0)
    flush_delivered(prod)
    return count


def produce_one_update(bootstrap: str, topics: list[str], partitions: int, expected: dict[str, dict[int, int]]) -> int:
    """One update of key 0 per topic."""
    prod = producer(bootstrap)
    for topic in topics:
        table = expected.setdefault(topic.split(".", 1)[1], {})
        version = table.get(0, -1) + 1
        key, value = debezium_event(0, version, "c" if version == 0 else "u", int(time.time() * 1000))
        send(prod, topic, 0, key, value)
        table[0] = version
    flush_delivered(prod)
    return len(topics)


def run_flags(bootstrap: str, prefix: str, url: str, scratch: str, produced: int) -> list[str]:
    """``run``'s flags for one benchmark: every topic of ``prefix``, a batch cap above what was produced."""
    return [
        "--bootstrap-servers", bootstrap,
        "--topics", rf"{prefix}\..*",
        "--landing-zone", url,
        "--checkpoint", f"{scratch}/cp",
        "--metrics-port", "0",
        "--max-offsets-per-trigger", str(max(200_000, produced * 2)),
    ]  # fmt: skip


def connector_environment(args: argparse.Namespace) -> dict[str, str]:
    """The connector's settings the benchmark varies, as ``CONNECTOR_*`` variables (dicts as JSON)."""
    env = {
        "CONNECTOR_MIRROR__PUBLISH_PARALLELISM": str(args.publish_parallelism),
        "CONNECTOR_SOURCE__PLANNER": args.planner,
    }
    if args.spark_conf:
        env["CONNECTOR_SPARK__CONF"] = orjson.dumps(args.spark_conf).decode()
    if args.kafka_option:
        env["CONNECTOR_SOURCE__KAFKA_OPTIONS"] = orjson.dumps(args.kafka_option).decode()
    return env


def bare_client_limit(storage: Storage, files: int, threads: int = 16) -> float:
    """Seconds for a bare client to create + rename ``files`` small files (one per table) with ``threads`` threads."""
    payload = os.urandom(2048)
    tag = uuid.uuid4().hex[:8]

    def one(n: int) -> None:
        staged = f"_limit-{tag}/_staged_{n:05d}.parquet"
        storage.create(staged, payload)
        storage.rename_new(staged, f"_limit-{tag}/t{n:05d}/{1:020d}.parquet")

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(files)))
    return time.perf_counter() - started


def verify_mirror(storage: Storage, expected: dict[str, dict[int, int]]) -> str | None:
    """Replay the landing zone; ``None`` when every table holds exactly the produced keys and versions."""
    from connector.readback.replay import replay_landing_zone

    states = replay_landing_zone(storage)
    if set(states) != set(expected):
        missing = sorted(set(expected) - set(states))[:5]
        extra = sorted(set(states) - set(expected))[:5]
        return f"tables differ: {len(states)} replayed, {len(expected)} produced; missing {missing}, extra {extra}"
    for table, rows in expected.items():
        state = states[table]
        ids = state.column("id").to_pylist()
        versions = state.column("version").to_pylist()
        got = dict(zip(ids, versions, strict=True))
        if len(ids) != len(got) or got != rows:
            return f"{table}: replayed {len(ids)} rows {sorted(got.items())[:4]}…, produced {sorted(rows.items())[:4]}…"
    return None


@contextlib.contextmanager
def landing_zone(kind: str, scratch: str, request_ms: float) -> Iterator[tuple[str, dict[str, str], Storage, Any]]:
    """(url for the connector, its environment, a storage for the bench's own reads and limit, the double or None)."""
    if kind == "local":
        url = f"{scratch}/lz"
        yield url, {}, LocalStorage(url), None
        return
    from tests.support.dfs_server import (
        OTHER_IDENTITY_VARIABLES,
        DfsTestServer,
        make_onelake_storage,
        managed_identity_environment,
    )

    with DfsTestServer(request_delay_s=request_ms / 1000) as server:
        server.create_filesystem(_FILESYSTEM)
        env = {k: v for k, v in os.environ.items() if k not in OTHER_IDENTITY_VARIABLES}
        env.update(managed_identity_environment(server))
        env["CONNECTOR_LANDING_ZONE__CREDENTIAL"] = "managed_identity"
        storage = make_onelake_storage(server, _ROOT, filesystem=_FILESYSTEM)
        # The item's landing-zone folder exists before run (Fabric creates it with the mirrored database).
        storage.create("_bench_ready", b"")
        storage.delete("_bench_ready")
        try:
            yield server.location_url(_FILESYSTEM, _ROOT), env, storage, server
        finally:
            storage.close()


def _summary(batches: list[dict[str, Any]]) -> str:
    return " ".join(
        f"[batch {b['batch_id']}: records={b['records']} tables={b['tables']} files={b['files']} "
        f"collect_s={b['collect_s']} sink_s={b['sink_s']} duration_s={b['duration_s']}]"
        for b in batches
    )


@dataclass(frozen=True)
class UpdateRound:
    """One update of every table with the service running: its batches' figures and the requests they made."""

    batch_s: float
    collect_s: float
    sink_s: float
    wall_s: float  # produced → committed, by the benchmark's clock (includes waiting for the trigger)
    requests: Counter[str]
    summary: str


def update_round(  # noqa: PLR0913 - the run's shared state, passed down unchanged
    service: Any,
    server: Any,
    bootstrap: str,
    topics: list[str],
    partitions: int,
    expected: dict[str, dict[int, int]],
    args: argparse.Namespace,
) -> UpdateRound:
    """Update every table once and wait until the service committed them all."""
    operations_before = Counter(server.operations) if server else Counter()
    time.sleep(1)
    warm = len(service.batches())
    produce_one_update(bootstrap, topics, partitions, expected)
    produced_at = time.perf_counter()
    batches = service.wait_for(
        lambda b: sum(x["records"] for x in b[warm:]) >= len(topics), args.timeout, "the update batch"
    )[warm:]
    # Produced → committed (its batch line logged), seen by polling every 0.2 s: includes the wait for the
    # trigger (at most one interval) and every part of the batch, whatever the log line counts.
    wall_s = time.perf_counter() - produced_at
    requests = (Counter(server.operations) - operations_before) if server else Counter()
    return UpdateRound(
        batch_s=sum(b["duration_s"] for b in batches),
        collect_s=sum(b["collect_s"] for b in batches),
        sink_s=sum(b["sink_s"] for b in batches),
        wall_s=wall_s,
        requests=requests,
        summary=_summary(batches),
    )


def bench_tables(args: argparse.Namespace) -> int:  # noqa: PLR0915 - one linear script, printed as it goes
    """Run the benchmark and print its figures; the last line is the one the README records."""
    tables, partitions = args.tables, args.partitions
    prefix = f"bt{uuid.uuid4().hex[:6]}"
    topics = table_topics(prefix, tables)
    expected: dict[str, dict[int, int]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-tables-") as scratch,
        broker(args.bootstrap_servers, f"{scratch}/kafka") as bootstrap,
        landing_zone(args.landing, scratch, args.request_ms) as (url, env, storage, server),
    ):
        started = time.perf_counter()
        create_topics(bootstrap, topics, partitions)
        produced = produce_changes(bootstrap, topics, partitions, args.changes, expected)
        print(f"{tables} topics × {partitions} partitions, {produced} events in {time.perf_counter() - started:.1f} s")
        common = run_flags(bootstrap, prefix, url, scratch, produced)
        env = {**env, **connector_environment(args)}

        # 1. Catch-up: everything waiting, one available-now run.
        requests_before = sum(server.requests.values()) if server else 0
        started = time.perf_counter()
        catch_up = start_connector([*common, "--trigger", "available-now"], Path(scratch) / "catch-up.log", env)
        code = catch_up.process.wait(args.timeout)
        wall = time.perf_counter() - started
        batches = catch_up.batches()
        if code != 0 or sum(b["records"] for b in batches) != produced:
            msg = f"catch-up run exited {code} with batches {_summary(batches)}:\n{catch_up.tail()}"
            raise RuntimeError(msg)
        catch_up_s = sum(b["duration_s"] for b in batches)
        catch_up_requests = (sum(server.requests.values()) - requests_before) if server else 0
        print(f"catch-up: process wall {wall:.1f} s (JVM start and Spark set-up included); {_summary(batches)}")

        # 2. The service running: a warm-up batch, then one update per table, twice: the first is the process's
        # first batch of each table (it checks each folder once), the second the steady state.
        service = start_connector([*common, "--trigger", args.trigger], Path(scratch) / "service.log", env)
        try:
            time.sleep(5)
            produce_one_update(bootstrap, topics[:1], partitions, expected)
            service.wait_for(lambda b: sum(x["records"] for x in b) >= 1, args.timeout, "the warm-up batch")
            rounds = [update_round(service, server, bootstrap, topics, partitions, expected, args) for _ in range(2)]
        finally:
            stop_code = service.stop()
        for name, figures in zip(("first", "steady"), rounds, strict=True):
            print(f"service (trigger {args.trigger}, exit {stop_code} on SIGTERM), {name} update: {figures.summary}")

        # 3. The mirror (before the limit writes its own files), 4. the limit.
        problem = verify_mirror(storage, expected)
        limit_s = bare_client_limit(storage, tables)
    if problem:
        print(f"MIRROR NOT EXACT: {problem}")
        return 1
    print(f"mirror exact: {tables} tables replayed from the landing zone match what was produced")
    if server is not None:
        print(
            f"DFS requests (each +{args.request_ms:g} ms): catch-up {catch_up_requests} "
            f"({catch_up_requests / tables:.1f} per table)"
        )
        for name, figures in zip(("first", "steady"), rounds, strict=True):
            spent = figures.requests
            by_operation = ", ".join(f"{op} {n / tables:.2f}" for op, n in spent.most_common())
            print(
                f"  {name} update batch: {spent.total()} "
                f"({spent.total() / tables:.1f} per changed table: {by_operation})"
            )
    print(
        f"limit: bare client, create+rename of {tables} small files with 16 threads on the same landing zone: "
        f"{limit_s:.2f} s ({limit_s * 1000 / tables:.2f} ms per table)"
    )
    first, steady = rounds
    print(
        f"landing={args.landing} request_ms={args.request_ms if args.landing == 'dfs' else 0:g} tables={tables} "
        f"partitions={partitions} catch_up_batch_s={catch_up_s:.1f} first_update_batch_s={first.batch_s:.2f} "
        f"update_batch_s={steady.batch_s:.2f} update_collect_s={steady.collect_s:.2f} "
        f"update_sink_s={steady.sink_s:.2f} ms_per_changed_table={steady.batch_s * 1000 / tables:.1f} "
        f"update_produced_to_committed_s={steady.wall_s:.2f} limit_s={limit_s:.2f} "
        f"ratio={limit_s / steady.batch_s:.2f}"
    )
    return 0


#: One trickle round's bursts, as shares of the tables: with 1,000 tables, bursts of 100-300 changed tables.
TRICKLE_SHARES = (100, 300, 150, 250, 200)
#: Each burst's updates are produced over this long (or a quarter of its slot, when that is shorter).
BURST_SPREAD_S = 2.0


def trickle_bursts(tables: int, shares: tuple[int, ...] = TRICKLE_SHARES) -> list[int]:
    """How many tables each burst updates: ``tables`` split in proportion to ``shares``, every table once."""
    total = sum(shares)
    bounds = [0]
    running = 0
    for share in shares:
        running += share
        bounds.append(round(tables * running / total))
    return [b - a for a, b in itertools.pairwise(bounds)]


def fit_line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``y = fixed + marginal × x`` through ``(x, y)`` points: ``(fixed, marginal)``.

    Raises ``ValueError`` when the points cannot fix a line (fewer than two distinct ``x``).
    """
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        msg = f"a line needs points at two different x at least, got {sorted(set(xs))}"
        raise ValueError(msg)
    n = len(points)
    mean_x = sum(xs) / n
    mean_y = sum(y for _, y in points) / n
    marginal = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x in xs)
    return mean_y - marginal * mean_x, marginal


def trickle_summary(batches: Sequence[dict[str, Any]]) -> tuple[list[str], tuple[float, float]]:
    """The steady batches' lines (changed tables, seconds) and the fit of seconds = fixed + marginal × tables."""
    points = [(float(b["tables"]), float(b["duration_s"])) for b in batches]
    lines = [
        f"batch {b['batch_id']}: {b['tables']} changed tables in {b['duration_s']:.2f} s "
        f"({b['duration_s'] * 1000 / max(1, b['tables']):.1f} ms per table; collect {b['collect_s']:.2f} s)"
        for b in batches
    ]
    return lines, fit_line(points)


def produce_trickle(  # noqa: PLR0913 - the run's shared state, passed down unchanged
    bootstrap: str,
    topics: list[str],
    partitions: int,
    expected: dict[str, dict[int, int]],
    seconds: float,
    order_seed: int = 34,
) -> None:
    """One update per table in bursts (``trickle_bursts``), the bursts spread evenly over ``seconds``.

    Each burst starts at its slot's beginning and is produced over ``BURST_SPREAD_S`` (a quarter of its slot at
    most), so a batch mostly sees one burst; tables are taken in a shuffled, seeded order.
    """
    order = list(topics)
    rng = random.Random(order_seed)
    rng.shuffle(order)
    bursts = trickle_bursts(len(order))
    slot = seconds / len(bursts)
    spread = min(BURST_SPREAD_S, slot / 4)
    prod = producer(bootstrap)
    started = time.monotonic()
    first = 0
    for number, size in enumerate(bursts):
        time.sleep(max(0.0, started + number * slot - time.monotonic()))
        burst_started = time.monotonic()
        for n, topic in enumerate(order[first : first + size]):
            time.sleep(max(0.0, burst_started + spread * n / size - time.monotonic()))
            table = expected.setdefault(topic.split(".", 1)[1], {})
            # A key of the table drawn at random, in the partition its key gives: each batch changes another set
            # of partitions, most of them idle, as a source's updates do.
            row_id = rng.choice(sorted(table)) if table else 0
            version = table.get(row_id, -1) + 1
            key, value = debezium_event(row_id, version, "c" if version == 0 else "u", int(time.time() * 1000))
            send(prod, topic, row_id % partitions, key, value)
            table[row_id] = version
            prod.poll(0)
        flush_delivered(prod)
        first += size


def bench_trickle(args: argparse.Namespace) -> int:
    """``--trickle``: one service catches up, then one update per table (a random key of it, so a different set of
    partitions each batch) arrives in bursts over ``--trickle-seconds`` (40 by default)."""
    from benchmarks.cpu import cpu_model, load_average, settings_varied

    tables, partitions = args.tables, args.partitions
    prefix = f"bt{uuid.uuid4().hex[:6]}"
    topics = table_topics(prefix, tables)
    expected: dict[str, dict[int, int]] = {}
    loads = [load_average()]
    with (
        tempfile.TemporaryDirectory(prefix="bench-trickle-") as scratch,
        broker(args.bootstrap_servers, f"{scratch}/kafka") as bootstrap,
        landing_zone(args.landing, scratch, args.request_ms) as (url, env, storage, _server),
    ):
        create_topics(bootstrap, topics, partitions)
        produced = produce_changes(bootstrap, topics, partitions, args.changes, expected)
        print(f"{tables} topics × {partitions} partitions, {produced} events waiting; service --trigger {args.trigger}")
        command = [*run_flags(bootstrap, prefix, url, scratch, produced), "--trigger", args.trigger]
        env = {**env, **connector_environment(args)}
        started = time.perf_counter()
        service = start_connector(command, Path(scratch) / "service.log", env)
        try:
            caught_up = service.wait_for(
                lambda b: sum(x["records"] for x in b) >= produced, args.timeout, "the catch-up"
            )
            catch_up_wall = time.perf_counter() - started
            loads.append(load_average())
            produce_trickle(bootstrap, topics, partitions, expected, args.trickle_seconds)
            everything = produced + tables
            batches = service.wait_for(
                lambda b: sum(x["records"] for x in b) >= everything, args.timeout, "the trickle's batches"
            )
            loads.append(load_average())
        finally:
            stop_code = service.stop()
        problem = verify_mirror(storage, expected)
        limit_s = bare_client_limit(storage, tables)
    catch_up = [b for b in caught_up if b["records"]]
    steady = [b for b in batches[len(caught_up) :] if b["records"]]
    catch_up_s = sum(b["duration_s"] for b in catch_up)
    print(
        f"catch-up: {catch_up_s:.1f} s in {len(catch_up)} batch(es) (process wall {catch_up_wall:.1f} s, the JVM's "
        f"start included); {_summary(catch_up)}"
    )
    lines, (fixed, marginal) = trickle_summary(steady)
    print(f"trickle: {tables} updates in bursts of {trickle_bursts(tables)} over {args.trickle_seconds:g} s:")
    for line in lines:
        print(f"  {line}")
    mean_ms = sum(b["duration_s"] for b in steady) * 1000 / max(1, sum(b["tables"] for b in steady))
    print(
        f"fit over {len(steady)} steady batches: batch_s = {fixed:.2f} s + {marginal * 1000:.1f} ms × changed tables "
        f"(mean {mean_ms:.1f} ms per changed table); service exit {stop_code} on SIGTERM"
    )
    print(f"limit: bare client, create+rename of {tables} small files with 16 threads: {limit_s:.2f} s")
    # The figure that travels between CPUs: a changed table's marginal cost over a bare create + rename of one file,
    # both measured in this run on this machine.
    per_file_ms = limit_s * 1000 / max(1, tables)
    marginal_ratio = marginal * 1000 / per_file_ms if per_file_ms > 0 else 0.0
    print(
        f"ratio: {marginal * 1000:.1f} ms per changed table = {marginal_ratio:.1f}x the bare client's "
        f"{per_file_ms:.2f} ms per file (create + rename) in this run"
    )
    print(f"cpu={cpu_model()} load_average(start,caught-up,end)={' '.join(loads)}")
    if problem:
        print(f"MIRROR NOT EXACT: {problem}")
        return 1
    print(f"mirror exact: {tables} tables replayed from the landing zone match what was produced")
    print(
        f"trickle tables={tables} partitions={partitions} trigger={args.trigger} "
        f"{settings_varied(args)} catch_up_batch_s={catch_up_s:.1f} "
        f"catch_up_wall_s={catch_up_wall:.1f} steady_batches={len(steady)} fixed_s={fixed:.2f} "
        f"marginal_ms_per_table={marginal * 1000:.1f} mean_ms_per_table={mean_ms:.1f} limit_s={limit_s:.2f} "
        f"marginal_ratio_to_bare_file={marginal_ratio:.1f} cpu={cpu_model()!r}"
    )
    return 0
