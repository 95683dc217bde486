"""``run --resume-from-ledger``: a new Spark checkpoint that starts exactly where the ledger ended.

When Spark's checkpoint is lost or does not belong with the ledger, the ledger still knows the Kafka end
offsets of the last batch it published. Resuming moves the Spark folder aside (never deletes it), restarts
the ledger's batch numbering (its tables, file numbers and TOAST stores stay) and keeps those offsets in
the ledger until the first new batch commits: Spark's new query starts from them (``startingOffsets``),
so the mirror goes on with the first record it does not have, no gap, no duplicate. Spark ignores
``startingOffsets`` once its checkpoint has a batch, so a crash before that first commit just resumes again.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import replace

import orjson
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from connector.config import SourceSettings
from connector.errors import ConfigError, LandingZoneCorrupt
from connector.kafka_client import client_security_options
from connector.publish.ledger import BatchLedger
from connector.publish.source_offsets import kafka_offsets
from connector.stream.spark_checkpoint import SparkCheckpoint

log = logging.getLogger("connector.run")

#: Spark's startingOffsets value for "the partition's first retained record".
EARLIEST = -2
_METADATA_TIMEOUT_S = 30.0


def resume_from_ledger(ledger: BatchLedger, spark: SparkCheckpoint) -> None:
    """Move Spark's checkpoint aside and make the ledger's last end offsets the next query's start.

    Raises:
        ConfigError: nothing to resume from (no batch published) or not a Kafka source.
        LandingZoneCorrupt: the ledger has no recorded offsets for its last batch.
    """
    state = ledger.state
    last = state.last_committed_batch
    if state.resume_offsets is not None:
        log.warning("resuming from the ledger's offsets already set aside: %s", state.resume_offsets)
        return
    if last < 0:
        msg = f"--resume-from-ledger: the ledger in {ledger.storage.url} has published no batch; run without the flag"
        raise ConfigError(msg)
    recorded = state.source(last)
    if recorded is None:
        msg = (
            f"--resume-from-ledger: the ledger in {ledger.storage.url} has no record of the source offsets of its "
            f"last batch {last}, so where to resume is unknown; restore the matching Spark checkpoint, or start "
            "over with a new checkpoint and an emptied landing zone"
        )
        raise LandingZoneCorrupt(msg)
    ends = kafka_offsets(recorded.offsets)
    if ends is None:
        msg = "--resume-from-ledger needs the Kafka source (the file source has no offsets to start from)"
        raise ConfigError(msg)
    if spark.folder.exists():
        aside = spark.folder.with_name(f"{spark.folder.name}.moved-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        spark.folder.rename(aside)
        log.warning("moved the Spark checkpoint %s aside to %s", spark.folder, aside)
    resumed = replace(state, last_committed_batch=-1, sources=(), resume_offsets=orjson.dumps(ends).decode())
    ledger.commit_state(resumed)
    log.warning("resuming from the ledger's end offsets of batch %d: %s", last, resumed.resume_offsets)


def starting_offsets(resume_offsets: str, source: SourceSettings) -> str:
    """Spark's ``startingOffsets`` JSON: the ledger's end offsets for every subscribed partition.

    Spark wants every partition its pattern subscribes named: one the ledger never read (a topic or
    partition created since) starts at its first retained record; one that no longer exists is left out.
    """
    ends: dict[str, dict[str, int]] = orjson.loads(resume_offsets)
    current = subscribed_partitions(source)
    start = {
        topic: {str(p): ends.get(topic, {}).get(str(p), EARLIEST) for p in sorted(partitions)}
        for topic, partitions in sorted(current.items())
    }
    return orjson.dumps(start).decode()


def subscribed_partitions(source: SourceSettings) -> dict[str, list[int]]:
    """Partitions of the topics ``source.topics`` matches (as Spark's subscribePattern: the whole name)."""
    options, _ = client_security_options(source)
    admin = AdminClient({**options, "bootstrap.servers": source.bootstrap_servers})
    try:
        metadata = admin.list_topics(timeout=_METADATA_TIMEOUT_S)
    except KafkaException as exc:
        msg = f"--resume-from-ledger: cannot list the topics of {source.bootstrap_servers}: {exc}"
        raise ConfigError(msg) from None
    pattern = re.compile(source.topics)
    return {
        name: list(topic.partitions)
        for name, topic in metadata.topics.items()
        if pattern.fullmatch(name) and topic.error is None
    }
