"""``run --resume-from-ledger``: a new Spark checkpoint that starts exactly where the ledger ended.

When Spark's checkpoint is lost, garbled or does not belong with the ledger, the ledger still knows the Kafka end
offsets of the last batch it published (and a ledger restored from an older copy is recognised by the file numbers
the landing zone holds beyond it). Resuming moves the Spark folder aside (never deletes it), restarts
the ledger's batch numbering (its tables, file numbers and TOAST stores stay) and keeps those offsets in
the ledger until the first new batch commits: Spark's new query starts from them (``startingOffsets``),
so the mirror goes on with the first record it does not have, no gap, no duplicate. Spark ignores
``startingOffsets`` once its checkpoint has a batch, so a crash before that first commit just resumes again.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import replace

import orjson
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from connector.config import SourceSettings
from connector.errors import ConfigError, LandingZoneCorrupt
from connector.kafka.spark_checkpoint import SparkCheckpoint
from connector.kafka_client import client_config
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_state import LedgerState, TableState
from connector.publish.publisher import highest_number
from connector.publish.source_offsets import kafka_offsets
from connector.storage.base import Storage

log = logging.getLogger(__name__)

#: Spark's startingOffsets value for "the partition's first retained record".
EARLIEST = -2
_METADATA_TIMEOUT_S = 30.0


def resume_from_ledger(
    ledger: BatchLedger,
    spark: SparkCheckpoint,
    landing: Storage,
    *,
    past_gaps: Mapping[tuple[str, int], int | None] | None = None,
) -> None:
    """Move Spark's checkpoint aside and make the newest recorded end offsets the next query's start.

    Every case a start-up refusal sends the operator here ends exact:

    * Spark's checkpoint deleted, older, foreign or garbled: the ledger's last batch's offsets;
    * the ledger's batch count changed (inflated): the newest batch it recorded offsets for;
    * the ledger restored from an older copy (the landing zone holds file numbers it does not know): each
      table's next number is taken from the landing zone, and the query resumes from the newer of the ledger's
      and the Spark checkpoint's last committed offsets (Spark commits a batch only after it was published;
      what the lost ledger published after them is read again, as the upserts, updates and deletes it was).

    ``past_gaps`` (``connector.healing.data_loss_healing``) moves partitions whose records Kafka no longer holds to
    where their log starts now (``None``: the partition is gone, left out); the caller has committed their
    tables' rebuilds first. It applies to offsets already set aside too: a new checkpoint that has not committed
    its first batch fixed its start in its own folder, so that folder is moved aside again.

    Raises:
        ConfigError: nothing to resume from (no batch published) or not a Kafka source.
        LandingZoneCorrupt: no source offsets are recorded anywhere.
    """
    state = ledger.state
    if state.resume_offsets is not None and not past_gaps:
        log.warning("resuming from the ledger's offsets already set aside: %s", state.resume_offsets)
        return
    if state.resume_offsets is not None:
        ends, tables, origin = orjson.loads(state.resume_offsets), state.tables, "the offsets already set aside"
    else:
        ends, tables, origin = _recorded_ends(ledger, spark, landing)
    if past_gaps:
        ends = _past(ends, past_gaps)
        origin += ", moved past the records Kafka no longer holds"
    if spark.folder.exists():
        aside = spark.folder.with_name(f"{spark.folder.name}.moved-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        spark.folder.rename(aside)
        log.warning("moved the Spark checkpoint %s aside to %s", spark.folder, aside)
    resumed = replace(
        state, last_committed_batch=-1, sources=(), tables=tables, resume_offsets=orjson.dumps(ends).decode()
    )
    ledger.commit_state(resumed)
    log.warning("resuming from the Kafka end offsets of %s: %s", origin, resumed.resume_offsets)


def _recorded_ends(
    ledger: BatchLedger, spark: SparkCheckpoint, landing: Storage
) -> tuple[dict[str, dict[str, int]], dict[str, TableState], str]:
    """The end offsets a resume starts from, the tables numbered after the landing zone, and where they come from."""
    state = ledger.state
    last = state.last_committed_batch
    if last < 0:
        msg = f"--resume-from-ledger: the ledger in {ledger.storage.url} has published no batch; run without the flag"
        raise ConfigError(msg)
    recorded = state.source(last) or (state.sources[-1] if state.sources else None)
    ends = kafka_offsets(recorded.offsets) if recorded is not None else None
    if recorded is not None and ends is None:
        msg = "--resume-from-ledger needs the Kafka source (the file source has no offsets to start from)"
        raise ConfigError(msg)
    tables, behind = _tables_from_landing(landing, state)
    newest = spark.newest_committed_offsets()
    origin = f"the ledger's batch {recorded.batch_id}" if recorded is not None else ""
    if newest is not None and (ends is None or (behind and _covers(newest[1], ends))):
        origin = f"Spark's last committed batch {newest[0]} (the ledger is older than the landing zone)"
        ends = newest[1]
    if ends is None:
        msg = (
            f"--resume-from-ledger: neither the ledger in {ledger.storage.url} nor the Spark checkpoint {spark.folder} "
            "records the Kafka offsets of a published batch, so where to resume is unknown; start over with a new, "
            "empty checkpoint folder and an emptied landing zone (every table is published again from the topics' "
            "retained records)"
        )
        raise LandingZoneCorrupt(msg)
    return ends, tables, origin


def _past(
    ends: dict[str, dict[str, int]], past_gaps: Mapping[tuple[str, int], int | None]
) -> dict[str, dict[str, int]]:
    """``ends`` with each gap's partition at the offset reading goes on at, or left out when it is gone."""
    out = {topic: dict(partitions) for topic, partitions in ends.items()}
    for (topic, partition), offset in past_gaps.items():
        if offset is None:
            out.get(topic, {}).pop(str(partition), None)
        else:
            out.setdefault(topic, {})[str(partition)] = offset
    return {topic: partitions for topic, partitions in out.items() if partitions}


def _tables_from_landing(landing: Storage, state: LedgerState) -> tuple[dict[str, TableState], bool]:
    """The ledger's tables, each numbered after the highest file the landing zone holds; whether any was behind."""
    tables = dict(state.tables)
    behind = False
    for tid, table in state.tables.items():
        highest = highest_number(landing, table.folder)
        if highest >= table.next_number:
            log.warning(
                "table %s: the landing zone holds files up to %d, the ledger knew %d: numbering goes on after %d",
                tid,
                highest,
                table.next_number - 1,
                highest,
            )
            tables[tid] = replace(
                table,
                next_number=highest + 1,
                files_published=table.files_published + highest + 1 - table.next_number,
            )
            behind = True
    return tables, behind


def _covers(newer: dict[str, dict[str, int]], older: dict[str, dict[str, int]]) -> bool:
    """Whether ``newer`` is at or past ``older`` in every partition ``older`` names."""
    return all(
        int(newer.get(topic, {}).get(partition, -1)) >= int(offset)
        for topic, partitions in older.items()
        for partition, offset in partitions.items()
    )


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
    admin = AdminClient(client_config(source))
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
