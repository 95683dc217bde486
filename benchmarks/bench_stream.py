"""``python -m benchmarks.bench stream``: Kafka topic → streaming job → local landing zone, beside two raw limits.

(a) a plain confluent-kafka consumer reading the same topic and decoding nothing, and (b) pyarrow alone
writing the same rows as Parquet. The job's rate is events over the streaming query's wall time
(Spark's session start-up is excluded; loading the source, as ``run`` does after the session, reading Kafka and
every batch are included).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.cpu import (
    ExecutorCpu,
    ThreadCpu,
    cpu_model,
    cpu_seconds,
    load_average,
    settings_varied,
    stage_task_cpu_seconds,
)
from benchmarks.events import BENCH_TOPIC, expected_ids, generated_events
from connector.config import load_settings
from connector.operate.health import HealthState
from connector.sink import MirrorSink
from connector.spark.worker_warmup import warm_up
from connector.storage import LocalStorage

_KAFKA_SH = Path(__file__).resolve().parents[1] / "deploy" / "local" / "kafka.sh"


@dataclass(frozen=True)
class BatchSample:
    """What the benchmark notes when ``foreachBatch`` returns."""

    ended: float  # perf_counter
    rss_mb: float  # the driver's Python
    jvm_rss_mb: float  # the JVM PySpark started
    executor_cpu_s: float = 0.0  # the executors' CPU from the query's start to this batch's end
    jvm_threads: dict[str, float] = field(default_factory=dict)  # the JVM's CPU by thread group, likewise


def current_rss_mb(pid: int | str = "self") -> float:
    """Resident memory of a process now (not the peak); 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            pages = int(statm.read().split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _start_broker(state_dir: str) -> str:
    result = subprocess.run(
        ["bash", str(_KAFKA_SH), "start"],
        env={**os.environ, "STATE_DIR": state_dir},
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return result.stdout.strip().split("=", 1)[1]


def _stop_broker(state_dir: str) -> None:
    subprocess.run(
        ["bash", str(_KAFKA_SH), "stop"], env={**os.environ, "STATE_DIR": state_dir}, check=False, timeout=120
    )


def _fill(bootstrap: str, topic: str, events: int, partitions: int, with_schema: bool) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(60)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            # Each partition in the order produced, as Debezium's Connect producer keeps it: without idempotence a
            # retried batch (the new topic's leader not ready yet) lands after later ones.
            "enable.idempotence": True,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for count, record in enumerate(generated_events(events, with_schema, partitions), start=1):
        while True:
            try:
                producer.produce(topic, record.value, record.key, partition=record.partition)
                break
            except BufferError:
                producer.poll(0.5)
        if count % 50_000 == 0:
            producer.poll(0)
    producer.flush(120)


@dataclass(frozen=True)
class ConsumerLimit:
    """(a) A plain consumer's read of the same topic: its rate and the CPU it used."""

    records_per_s: float
    cpu_s: float  # this process over the whole read (librdkafka's threads are in it), connecting included


def consumer_limit(bootstrap: str, topic: str, events: int) -> ConsumerLimit:
    """(a) A plain consumer that decodes nothing: records/s from its first record, CPU-s over its whole read."""
    from confluent_kafka import Consumer

    cpu_before = cpu_seconds()

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    started = None
    while seen < events:
        batch = consumer.consume(10_000, timeout=5)
        if not batch:
            continue
        started = started or time.perf_counter()
        seen += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    return ConsumerLimit(seen / elapsed if elapsed else float("inf"), cpu_seconds() - cpu_before)


def writer_limit(events: int, batch: int, folder: str, with_schema: bool) -> float:
    """(b) Rows/s of pyarrow alone writing the same 10-column rows as snappy Parquet, batch by batch."""
    stream = generated_events(events, with_schema)
    elapsed = 0.0
    import orjson

    for number in itertools.count():
        values = [orjson.loads(r.value or b"{}") for r in itertools.islice(stream, batch)]
        chunk = [v.get("payload", v).get("after") or {"id": 0} for v in values]
        if not chunk:
            break
        table = pa.Table.from_pylist(chunk)
        started = time.perf_counter()
        pq.write_table(table, f"{folder}/{number:020d}.parquet", compression="snappy")
        elapsed += time.perf_counter() - started
    return events / elapsed


def _check_mirror(landing_zone: str, events: int) -> None:
    """A fast wrong run is never reported: the replayed mirror must hold exactly the ids the events leave."""
    from connector.readback.replay import replay_landing_zone

    tables = replay_landing_zone(LocalStorage(landing_zone))
    ids = {i for table in tables.values() for i in table.column("id").to_pylist()}
    rows = sum(table.num_rows for table in tables.values())
    want = expected_ids(events)
    if ids != want or rows != len(want):
        msg = f"MIRROR NOT EXACT: {rows} rows, {len(ids ^ want)} ids differ from the {len(want)} the events leave"
        raise RuntimeError(msg)
    print(f"mirror exact: {rows} rows, the ids the events leave")


def _class_archive(choice: str) -> str | None:
    """The driver's class archive the run maps, as the image's driver does: written first if it is missing."""
    from connector.spark.class_archive import archive_for_this_java, write_class_archive

    if choice == "none":
        return None
    archive = archive_for_this_java() if choice == "cache" else Path(choice)
    if not archive.is_file():
        print(f"writing the class archive {archive} (python -m connector class-archive), before the measured run")
        write_class_archive(archive)
    return str(archive)


def bench_stream(args: argparse.Namespace) -> int:  # noqa: PLR0915 - one linear script, printed as it goes
    """Run the benchmark and print its figures; the last line is the one the README records."""
    from connector.kafka.spark_checkpoint import SparkCheckpoint
    from connector.spark.source import kafka_read_spec, stream
    from connector.spark.spark_session import spark_session
    from connector.stream.batch_writer import BatchWriter, DriverBatchWriter, ExecutorBatchWriter, ExecutorCollect

    events, partitions = args.events, args.partitions
    topic = f"{BENCH_TOPIC}.{uuid.uuid4().hex[:6]}"
    class_archive = _class_archive(args.class_archive)
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as scratch:
        broker_state = f"{scratch}/kafka"
        bootstrap = args.bootstrap_servers or _start_broker(broker_state)
        try:
            _fill(bootstrap, topic, events, partitions, args.with_schema)
            consumer = consumer_limit(bootstrap, topic, events)
            limit_a = consumer.records_per_s
            os.makedirs(f"{scratch}/raw")
            limit_b = writer_limit(events, args.max_offsets_per_trigger, f"{scratch}/raw", args.with_schema)
            settings = load_settings(
                None,
                **{
                    "source.kind": "kafka",
                    "source.bootstrap_servers": bootstrap,
                    "source.topics": topic.replace(".", r"\."),
                    "source.max_offsets_per_trigger": args.max_offsets_per_trigger,
                    "trigger": "available-now",
                    "landing_zone.url": f"{scratch}/lz",
                    "checkpoint": f"{scratch}/cp",
                    "metrics.port": 0,
                    "spark.decode_on": args.decode_on,
                    "spark.columnar_decode": not args.row_path,
                    "spark.master": args.spark_master,
                    "spark.class_archive": class_archive,
                    # Only here: the REST API (stage task metrics) needs the UI, which run keeps off.
                    "spark.conf": {"spark.ui.enabled": "true", "spark.ui.port": "0", **args.spark_conf},
                    "source.kafka_options": args.kafka_option,
                    "source.planner": args.planner,
                },
            )
            spark = spark_session(settings)
            sink = MirrorSink(LocalStorage(f"{scratch}/lz"), LocalStorage(f"{scratch}/cp"), settings.mirror)
            spark_checkpoint = SparkCheckpoint(Path(f"{scratch}/cp/spark"))
            writer: BatchWriter
            if settings.spark.decode_on == "driver":
                columnar = settings.spark.columnar_decode
                writer = DriverBatchWriter(sink, HealthState(), spark_checkpoint, columnar=columnar)
            else:
                collect = ExecutorCollect(
                    settings.landing_zone.location.absolute(),
                    settings.spark.columnar_decode,
                    kafka_read_spec(settings)[0],
                )
                writer = ExecutorBatchWriter(sink, HealthState(), spark_checkpoint, collect)
            batches: list[BatchSample] = []
            # The JVM (driver and, in local mode, the executors) is the gateway process PySpark started.
            jvm_pid = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]

            app_id = spark.sparkContext.applicationId
            executors = ExecutorCpu(jvm_pid if args.spark_master.startswith("local") else None, app_id)
            jvm_threads = ThreadCpu(jvm_pid)
            executors.sample()
            jvm_threads.sample()

            def measured(frame, batch_id):  # type: ignore[no-untyped-def]
                writer(frame, batch_id)
                executors.sample()
                jvm_threads.sample()
                batches.append(
                    BatchSample(
                        time.perf_counter(),
                        current_rss_mb(),
                        current_rss_mb(jvm_pid),
                        executors.total(),
                        jvm_threads.by_group(),
                    )
                )

            driver_cpu0 = cpu_seconds()
            started = time.perf_counter()
            # In ``run``'s order: the workers' warm-up, then the source's loading (a Python source's lookup and
            # creation run then), then the query's start; the workers' CPU counts from zero.
            warm_up(spark, settings)
            query = (
                stream(spark, settings)
                .writeStream.foreachBatch(measured)
                .option("checkpointLocation", f"{scratch}/cp/spark")
                .trigger(availableNow=True)
            )
            query.start().awaitTermination()
            writer.close()  # the last batch may still be published behind
            finished = time.perf_counter()
            driver_cpu = cpu_seconds() - driver_cpu0
            executors.sample()
            jvm_threads.sample()
            task_cpu = stage_task_cpu_seconds(spark.sparkContext.uiWebUrl, app_id)
            spark.stop()
            _check_mirror(f"{scratch}/lz", events)
        finally:
            if not args.bootstrap_servers:
                _stop_broker(broker_state)
    rate = events / (finished - started)
    print(
        f"events={events} partitions={partitions} max_offsets_per_trigger={args.max_offsets_per_trigger} "
        f"decode_on={args.decode_on} columnar_decode={not args.row_path} with_schema={args.with_schema} "
        f"batches={len(batches)} {settings_varied(args)} class_archive={class_archive}"
    )
    _print_memory(batches)
    first_events = min(events, args.max_offsets_per_trigger)
    first_s, later_rate = _print_batch_times(started, [b.ended for b in batches], finished, first_events, events)
    per_million, executor_cpu = 1_000_000 / events, executors.total()
    print(
        f"CPU-s per 1M events: driver Python {driver_cpu * per_million:.2f} (/proc/self/stat over the query); "
        f"executors {executor_cpu * per_million:.2f} ({executors.source}); Spark REST stage metrics "
        f"executorCpuTime {task_cpu * per_million:.2f} (JVM task threads only, no Python workers); "
        f"plain consumer {consumer.cpu_s * per_million:.2f} (the same events, this process, librdkafka included)"
    )
    # In local[*] the executors are this JVM (its threads named by their job); on a cluster it is only the driver.
    groups = jvm_threads.by_group() if args.spark_master.startswith("local") else {}
    if groups:
        _print_jvm_threads(groups, executor_cpu, per_million, len(executors.last) - 1)
    later_cpu_per_million = _print_later_cpu(batches, executor_cpu, groups, events, first_events)
    print(f"cpu={cpu_model()} load_average={load_average()} spark={_spark_version()}")
    # The figures that travel between CPUs: the executors' CPU per event over the plain consumer's, both this run.
    consumer_per_million = consumer.cpu_s * per_million
    cpu_ratio = executor_cpu * per_million / consumer_per_million if consumer_per_million else 0.0
    later_cpu_ratio = later_cpu_per_million / consumer_per_million if consumer_per_million else 0.0
    print(
        f"ratio: executors {cpu_ratio:.2f}x the plain consumer's CPU per event over the whole run, "
        f"{later_cpu_ratio:.2f}x after the first batch; later batches {later_rate / limit_a:.2f}x its rate"
    )
    print(
        f"master={args.spark_master} events_per_second={rate:.0f} consumer_limit={limit_a:.0f} "
        f"writer_limit={limit_b:.0f} ratio={rate / min(limit_a, limit_b):.2f} "
        f"driver_cpu_s_per_1m={driver_cpu * per_million:.2f} executor_cpu_s_per_1m={executor_cpu * per_million:.2f} "
        f"consumer_cpu_s_per_1m={consumer.cpu_s * per_million:.2f} "
        f"later_executor_cpu_s_per_1m={later_cpu_per_million:.2f} "
        f"first_batch_s={first_s:.2f} later_events_per_second={later_rate:.0f} "
        f"later_ratio={later_rate / limit_a:.2f} "
        f"executor_cpu_ratio={cpu_ratio:.2f} later_executor_cpu_ratio={later_cpu_ratio:.2f} cpu={cpu_model()!r}"
    )
    return 0


def _print_jvm_threads(groups: dict[str, float], executor_cpu: float, per_million: float, workers: int) -> None:
    """Where the local JVM's CPU went, by thread name; the rest of the executors' figure is its Python workers."""
    jvm = sum(groups.values())
    top = ", ".join(f"{name} {used * per_million:.2f}" for name, used in list(groups.items())[:10])
    print(
        f"CPU-s per 1M events by JVM thread (the driver's JVM): total {jvm * per_million:.2f}: {top}; "
        f"outside the JVM ({workers} Python processes: the daemon and the workers it forked) "
        f"{(executor_cpu - jvm) * per_million:.2f}"
    )


def _print_later_cpu(
    batches: list[BatchSample], executor_cpu: float, groups: dict[str, float], events: int, first_events: int
) -> float:
    """The executors' CPU-s per 1M events over the batches after the first: a running service's, warmed up.

    The first batch carries the query's start and most of the JIT's compiling, which a service pays once.
    """
    if len(batches) < 2 or events <= first_events:
        return math.nan
    per_million = 1_000_000 / (events - first_events)
    first = batches[0].jvm_threads
    later = {name: used - first.get(name, 0.0) for name, used in groups.items()}
    top = ", ".join(f"{name} {used * per_million:.2f}" for name, used in sorted(later.items(), key=lambda i: -i[1])[:6])
    cpu = (executor_cpu - batches[0].executor_cpu_s) * per_million
    print(f"after the first batch: executors {cpu:.2f} CPU-s per 1M events; by JVM thread: {top}")
    return cpu


def _spark_version() -> str:
    import pyspark

    return pyspark.__version__


def _print_batch_times(
    started: float, ends: list[float], finished: float, first_events: int, events: int
) -> tuple[float, float]:
    """The first batch apart from the others: it pays the source's loading and the query's start (planning, Python
    workers, a cold JIT), as ``run``'s first batch does.

    Returns the first batch's seconds and the later batches' events/s (NaN when there are not two batches).
    """
    if len(ends) < 2:
        return math.nan, math.nan
    spans = " ".join(f"{b - a:.2f}" for a, b in itertools.pairwise([started, *ends]))
    print(f"batch seconds (from loading the source or the batch before to foreachBatch's return): {spans}")
    later = (events - first_events) / (finished - ends[0])
    print(f"first batch {ends[0] - started:.2f} s; later batches {later:.0f} events/s (a running service's rate)")
    return ends[0] - started, later


def _print_memory(batches: list[BatchSample]) -> None:
    if not batches:
        return
    for name, series in (
        ("driver_rss_mb", [b.rss_mb for b in batches]),
        ("jvm_rss_mb", [b.jvm_rss_mb for b in batches]),
    ):
        # The whole series: flat means bounded by maxOffsetsPerTrigger, not growing with the backlog.
        print(f"{name} first_batch={series[0]:.0f} max={max(series):.0f} last_batch={series[-1]:.0f}")
        print(f"{name} per batch: " + " ".join(f"{v:.0f}" for v in series))
