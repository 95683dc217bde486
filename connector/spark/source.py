"""Spark sources: Kafka (ours or Spark's Java source, ``source.planner``), or a folder of kcat ``-J`` dumps.

Ours is ``connector.kafka.stream_source``; the packaged sample of kcat dumps is the embedded default.

All end as the same thing in ``foreachBatch``: an Arrow table of records that ``records_from_arrow``
turns into ``KafkaRecord`` objects for the core.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from connector.collect.kafka_spec import DEBEZIUM_CONTEXT_HEADERS, DEBEZIUM_HEADERS, HeaderChoice, KafkaReadSpec
from connector.collect.poison import dead_letter_in_use
from connector.config import ConnectorSettings, MirrorSettings, SourceSettings
from connector.errors import ConfigError
from connector.kafka_client import client_security_options
from connector.spark.class_archive import archive_java_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SAMPLE_EVENTS = Path(__file__).resolve().parent.parent / "sample"
_REPO_JARS = Path(__file__).resolve().parents[2] / ".cache" / "jars" / "spark-kafka"
_KAFKA_SOURCE_JAR = re.compile(r"spark-sql-kafka-0-10_[0-9.]+-([0-9]+\.[0-9]+\.[0-9]+[^/]*)\.jar")

#: Consumer settings for Spark's Kafka source unless ``source.kafka_options`` sets them. Spark's consumer
#: polls 500 records at a time by default; bigger polls and fetches double its read rate (see README).
#: A partition whose offset range ends at the end of the log waits ``fetch.max.wait.ms`` (500 ms by default)
#: on a fetch past its last record, once per partition read: a caught-up micro-batch took 1.7 s longer at 500,
#: and with a thousand tables even 50 ms was most of a batch (1,000 changed tables: 41 ms each at 50, 19 at 5).
KAFKA_READ_DEFAULTS = {
    "kafka.max.poll.records": "20000",
    "kafka.max.partition.fetch.bytes": str(8 << 20),
    "kafka.fetch.max.bytes": str(32 << 20),
    "kafka.fetch.max.wait.ms": "5",
}


#: librdkafka settings of the executors' own reads (``source.reader: direct``): Spark's semantics (every record,
#: committed or not, as Spark's Java consumer reads by default; a missing offset is an error, never a reset),
#: the end of each partition reported (a range may end in offsets the log skips), large fetches (a 2M-record
#: read took 14.3 s with librdkafka's 1 MB per partition, 4.6 s with these), and no consumer group.
DIRECT_READ_DEFAULTS = {
    "isolation.level": "read_uncommitted",
    "auto.offset.reset": "error",
    "enable.partition.eof": "true",
    "enable.auto.commit": "false",
    "group.id": "debezium-fabric-mirror-direct-read",
    "fetch.wait.max.ms": "5",
    "fetch.max.bytes": str(32 << 20),
    # A task reads one range and unassigns: what librdkafka fetched past the range's end is thrown away and
    # fetched again by the next batch's task. Fetches of 2 MB a partition and a prefetch queue of 4 MB (librdkafka
    # keeps fetching until 64 MB or 100,000 messages are queued) halved its fetch threads' CPU in `bench stream`
    # (1.57 -> 0.87 CPU-s over 2M events of 25,000-record ranges) with the same rate.
    "max.partition.fetch.bytes": str(2 << 20),
    "queued.max.messages.kbytes": "4096",
    # A reused consumer's partition whose queue was full (prefetched past the last range) waited 1 s (the
    # default) before its next range's first fetch: 1.05 s instead of 0.05 s a 25,000-record range.
    "fetch.queue.backoff.ms": "10",
}

CONSUMER_CACHE_CAPACITY = "spark.kafka.consumer.cache.capacity"
C1_ONLY = "-XX:TieredStopAtLevel=1"
SERIAL_GC = "-XX:+UseSerialGC"


def kafka_jars() -> list[str]:
    """Spark's Kafka connector jars: ``CONNECTOR_SPARK_JARS_DIR`` (the image), else the repo's cache.

    The connector must be the installed Spark's own release line: one built for another minor fails deep in a
    micro-batch (a missing method), so a mismatch stops the start-up here, naming both versions.
    """
    import pyspark

    folder = Path(os.environ.get("CONNECTOR_SPARK_JARS_DIR", str(_REPO_JARS)))
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not jars:
        msg = (
            f"no Spark Kafka connector jars in {folder}; run `deploy/local/fetch-jars.sh spark-kafka` "
            "or set CONNECTOR_SPARK_JARS_DIR"
        )
        raise ConfigError(msg)
    check_kafka_jar_version(jars, pyspark.__version__)
    return jars


def check_kafka_jar_version(jars: list[str], spark_version: str) -> None:
    """Refuse a ``spark-sql-kafka`` jar of another Spark minor than ``spark_version`` (patch levels may differ)."""
    built_for = [m[1] for m in (_KAFKA_SOURCE_JAR.fullmatch(Path(j).name) for j in jars) if m]
    if not built_for:
        msg = f"no spark-sql-kafka-0-10 jar among {', '.join(jars)}; run `deploy/local/fetch-jars.sh spark-kafka`"
        raise ConfigError(msg)
    minor = spark_version.split(".")[:2]
    if any(version.split(".")[:2] != minor for version in built_for):
        msg = (
            f"Spark's Kafka connector jar is for Spark {', '.join(built_for)} but pyspark {spark_version} is "
            "installed: install the pyspark of requirements/test.txt (or runtime.txt), or fetch the jars again with "
            "`deploy/local/fetch-jars.sh spark-kafka` after setting its pom's spark.version"
        )
        raise ConfigError(msg)


def source_path(source: SourceSettings) -> str:
    """Folder of kcat dumps for the file source (the packaged sample when none is configured)."""
    path = Path(source.path) if source.path else SAMPLE_EVENTS
    if not path.is_dir():
        msg = f"source.path {path} is not a folder of kcat -J files"
        raise ConfigError(msg)
    return str(path.resolve())


def stream(spark: SparkSession, settings: ConnectorSettings) -> DataFrame:
    """The streaming DataFrame of records, Kafka or files."""
    source = settings.source
    if source.kind == "files":
        from pyspark.sql import functions as func

        lines = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(source_path(source))
        return lines.select(func.col("value").alias("line"), func.input_file_name().alias("file"))
    if not source.bootstrap_servers:
        msg = "source.bootstrap_servers is required for source.kind=kafka (--bootstrap-servers)"
        raise ConfigError(msg)
    headers = header_choice(settings.mirror)
    if plans_with_python(source):
        return _python_planned(spark, settings, headers)
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", source.bootstrap_servers)
        .option("subscribePattern", whole_name_pattern(source.topics))
        .option("startingOffsets", source.starting_offsets)
        .option("includeHeaders", str(headers != "none").lower())
        # A gap in a topic (retention deleted unread records) must stop the job, not skip silently.
        .option("failOnDataLoss", "true")
    )
    for option, value in _batch_shape_options(source).items():
        reader = reader.option(option, value)
    for key, value in {**KAFKA_READ_DEFAULTS, **source.resolved_kafka_options()}.items():
        reader = reader.option(key, value)
    records = reader.load()
    if headers == "none":
        return records.select("topic", "partition", "offset", "key", "value")
    if headers == "all":
        # A poison record is dead-lettered with its headers exactly as Kafka held them, and which record is
        # poison is known only once it is decoded: every record keeps every header. The columnar lane never
        # reads them; the record-by-record path pays a few percent (records_from_arrow).
        from pyspark.sql import functions as func

        # ... and with its Kafka timestamp (milliseconds, as Kafka keeps it).
        timestamp_ms = func.unix_millis("timestamp").alias("timestamp_ms")
        return records.select("topic", "partition", "offset", "key", "value", "headers", timestamp_ms)
    from pyspark.sql import functions as func

    # keep-last alone reads only Debezium's key-change header; the others (__debezium.context.* on every
    # record, an application's tracing headers) would only cost transfer.
    debezium = func.filter(
        "headers", lambda h: h["key"].startswith(DEBEZIUM_HEADERS) & ~h["key"].startswith(DEBEZIUM_CONTEXT_HEADERS)
    )
    return records.select("topic", "partition", "offset", "key", "value", debezium.alias("headers"))


def plans_with_python(source: SourceSettings) -> bool:
    """Whether the connector's own source plans the micro-batches (``source.planner``), so no Kafka jars are needed.

    Spark's Java source plans them when ``source.kafka_options`` hold options librdkafka has no form of.
    """
    if source.kind != "kafka" or source.planner != "python":
        return False
    return not client_security_options(source)[1]


def _python_planned(spark: SparkSession, settings: ConnectorSettings, headers: HeaderChoice) -> DataFrame:
    """The records of ``connector.kafka.stream_source``: already in the columns ``stream`` selects from Spark's."""
    from connector.kafka.stream_source import SOURCE_NAME, PlanOptions, configured_source

    source = settings.source
    security, _ = client_security_options(source)
    admin = {**security, "bootstrap.servers": str(source.bootstrap_servers)}
    read_options = tuple(sorted({**DIRECT_READ_DEFAULTS, **admin}.items()))
    spec = KafkaReadSpec(read_options, headers=headers, timestamps=headers == "all")
    # The client options (secrets included) travel in the registered class, never in the reader's options.
    spark.dataSource.register(configured_source(admin, spec))
    options = {
        # Absolute: Spark's planner process need not share the driver's working directory.
        "checkpoint": str(Path(settings.checkpoint).absolute() / "spark"),
        "subscribePattern": whole_name_pattern(source.topics),
        "startingOffsets": source.starting_offsets,
        "headers": headers,
        **_batch_shape_options(source),
    }
    PlanOptions.of(options)  # a setting Spark's planner process would refuse is refused now, with its name
    return spark.readStream.format(SOURCE_NAME).options(**options).load()


def whole_name_pattern(topics: str) -> str:
    r"""``source.topics`` as Spark must be given it: anchored, so that it matches whole topic names.

    Spark's ``subscribePattern`` finds the pattern anywhere in a name (``abc\.x`` takes ``zabc.x`` and ``abc.xz``
    too), while every check before Spark starts (the topics listed, the checkpoint's, the data-loss check, a
    resume) matches whole names: unanchored, a topic created later whose name merely contains the pattern would
    be mirrored unchecked.
    """
    return f"^(?:{topics})$"


def _batch_shape_options(source: SourceSettings) -> dict[str, str]:
    """Spark's options for a micro-batch's size and split into tasks, from the source settings that are set."""
    options = {
        "maxOffsetsPerTrigger": source.max_offsets_per_trigger,
        "minOffsetsPerTrigger": source.min_offsets_per_trigger,
        "maxTriggerDelay": source.max_trigger_delay,
        "minPartitions": source.min_partitions,
        "maxRecordsPerPartition": source.max_records_per_partition,
    }
    return {option: str(value) for option, value in options.items() if value is not None}


def with_consumer_cache(settings: ConnectorSettings, partitions: int) -> ConnectorSettings:
    """``settings`` with Spark's Kafka consumer cache sized for ``partitions`` (unless ``spark.conf`` sizes it).

    Each executor keeps one consumer per topic-partition it reads, 64 at most by default: with more, consumers are
    closed and opened again every batch (Spark warns "Pool exceeds its soft max size").
    """
    if CONSUMER_CACHE_CAPACITY in settings.spark.conf:
        return settings
    capacity = max(64, partitions + partitions // 4)  # room for topics created later
    conf = {**settings.spark.conf, CONSUMER_CACHE_CAPACITY: str(capacity)}
    return settings.model_copy(update={"spark": settings.spark.model_copy(update={"conf": conf})})


def kafka_read_spec(settings: ConnectorSettings) -> tuple[KafkaReadSpec | None, str]:
    """How the executors read Kafka themselves (``source.reader: direct``), or ``None`` and why Spark's source does."""
    source = settings.source
    if source.kind != "kafka":
        return None, "the source is a folder of files"
    if source.reader == "spark":
        return None, "source.reader is spark"
    if settings.spark.decode_on == "driver":
        return None, "spark.decode_on is driver"
    security, skipped = client_security_options(source)
    if skipped:
        return None, f"source.kafka_options {', '.join(sorted(skipped))} have no librdkafka form"
    options = {**DIRECT_READ_DEFAULTS, **security, "bootstrap.servers": str(source.bootstrap_servers)}
    headers = header_choice(settings.mirror)
    spec = KafkaReadSpec(tuple(sorted(options.items())), headers=headers, timestamps=headers == "all")
    return spec, "source.reader is direct"


def jvm_options(settings: ConnectorSettings) -> dict[str, str]:
    """Spark's JVM options, unless ``spark.conf`` sets them: C1 only, and the driver's class archive.

    C1 only for a job whose executors read Kafka themselves: the JVMs then only schedule tasks and keep the
    checkpoint; C2, the optimising JIT, cost 1.8 CPU-s per 1M records compiling that (``bench stream``) and bought
    nothing. Spark's own Kafka source, whose per-record JVM work C2 compiles for good, keeps the default. Such a
    driver's heap holds little but Spark's plans (400-470 MB resident in ``bench stream``): the serial collector
    (what the JVM picks itself in a container of one core) spent 0.3 CPU-s less per 2M events than G1's threads,
    with pauses of milliseconds. The class archive (``spark.class_archive``): ``connector.spark.class_archive``.
    """
    driver: list[str] = []
    executor: list[str] = []
    if kafka_read_spec(settings)[0] is not None:
        driver.extend((C1_ONLY, SERIAL_GC))
        executor.append(C1_ONLY)
    archive = archive_java_options(settings.spark.class_archive)
    if archive:
        driver.append(archive)
    options = {"spark.driver.extraJavaOptions": " ".join(driver), "spark.executor.extraJavaOptions": " ".join(executor)}
    return {key: value for key, value in options.items() if value and key not in settings.spark.conf}


def header_choice(mirror: MirrorSettings) -> HeaderChoice:
    """Which Kafka headers the records carry, whichever reader reads them.

    ``all`` (with the Kafka timestamp) when records may be dead-lettered: a poison record goes out with its headers
    exactly as Kafka held them, and which record is poison is known only once it is decoded. ``debezium`` for
    ``keep-last`` TOAST stores, which read only Debezium's key-change header (the others would only cost transfer).
    """
    if dead_letter_in_use(mirror):
        return "all"
    return "debezium" if headers_needed(mirror) else "none"


def headers_needed(mirror: MirrorSettings) -> bool:
    """Whether records need their Kafka headers: reading them costs Spark about a tenth more CPU.

    ``keep-last`` TOAST stores use Debezium's key-change header; dead letters keep every header, raw.
    """
    keep_last = mirror.toast_policy == "keep-last" or any(t.toast_policy == "keep-last" for t in mirror.tables.values())
    return keep_last or dead_letter_in_use(mirror)
