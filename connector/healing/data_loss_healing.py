"""When Kafka no longer holds what the mirror needs: rebuild exactly the tables it carried, read on past the gap.

Invariant 12 (docs/guarantees.md). At ``run``'s start, before Spark's query starts, the next offset the mirror expects
per partition is compared with what the brokers hold (``connector.healing.data_loss``). Each gap found is mapped to the
table its topic carries, and then, with ``mirror.on_data_lost: rebuild`` (the default):

1. one ledger commit records every gap (``DataGap``) and begins each affected table's rebuild (``Lifecycle``:
   delete the folder, wait for Fabric, ask Debezium for an incremental snapshot, ``connector.publish.rebuild``);
2. only then is Spark moved past the gap: its checkpoint is set aside and the new one starts from the ledger's
   end offsets, with each lost partition's offset moved to where its log now starts (``resume_from_ledger``).

While the query runs (``source.reader: direct``), a batch's tasks read on past a gap and name it, and the driver
compares the topics' ids once per batch; ``heal_in_batch`` records those gaps and begins their tables' rebuilds
in one commit before the batch is planned: no exit, every other table goes on.

So a gap is never read past before its table's rebuild is committed, and a crash between the two steps finds
the same gap again at the next start: the record is kept once (deduplicated by topic, partition and first
offset) and only the move is redone. Every other table keeps its offsets and goes on publishing. Partitions
that carry no table (Debezium's heartbeats) are read on past with a record and no rebuild.

With ``stop`` the job ends with one ``error:`` line naming every gap and its table, and nothing changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

import orjson

from connector.collect.kafka_read import ReadGap
from connector.config import MirrorSettings, SourceSettings
from connector.healing.data_loss import (
    DataLossCheck,
    LostRange,
    Partition,
    check_offsets,
    expected_from_map,
    recreated_by_id,
)
from connector.healing.query_failure import SourceDataLost, data_lost_recovery
from connector.healing.resume import resume_from_ledger
from connector.kafka.spark_checkpoint import SparkCheckpoint
from connector.landing_zone.layout import table_for_topic
from connector.operate import metrics
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_state import DataGap, LedgerState, TableState
from connector.publish.source_identity import topic_prefix
from connector.publish.source_offsets import kafka_offsets
from connector.storage.base import Storage

log = logging.getLogger(__name__)

#: Asks the brokers which of the expected offsets they no longer hold (``check_offsets``, bound to the source):
#: given the expected offsets, the subscribed topics and the topic ids the ledger recorded.
OffsetsCheck = Callable[[Mapping[Partition, int], Collection[str], Mapping[str, str]], DataLossCheck]


def expected_offsets(state: LedgerState, spark: SparkCheckpoint) -> dict[Partition, int] | None:
    """The next offset Spark reads, per partition; ``None`` on a first start (nothing read yet).

    A resume under way (``state.resume_offsets``, set until the new checkpoint's first batch commits) is where the
    next query starts. Otherwise Spark goes on after its newest committed batch (re-running one the ledger may
    have published already, which ``published_offsets`` tells apart); without a Spark checkpoint (one being moved
    aside when the job died), after the ledger's last batch.
    """
    if state.resume_offsets is not None:
        return expected_from_map(orjson.loads(state.resume_offsets))
    newest = spark.newest_committed_offsets()
    if newest is not None:
        return expected_from_map(newest[1])
    return published_offsets(state) or None


def published_offsets(state: LedgerState) -> dict[Partition, int]:
    """Per partition, the end offset of the ledger's last committed batch: everything before it is published."""
    recorded = state.source(state.last_committed_batch)
    ends = kafka_offsets(recorded.offsets) if recorded is not None else None
    return (expected_from_map(ends) or {}) if ends else {}


def unpublished(lost: Sequence[LostRange], published: Mapping[Partition, int]) -> list[LostRange]:
    """The part of each lost range the mirror had not published; a range it had published entirely is dropped.

    A batch the ledger committed and Spark did not (the job died between the two) is read again by Spark, but its
    records are in the landing zone already: losing them from Kafka loses nothing, Spark only needs moving past.
    """
    out = []
    for r in lost:
        done = published.get(Partition(r.topic, r.partition), r.first)
        if done <= r.first:
            out.append(r)
        elif r.last is None or done <= r.last:
            out.append(replace(r, first=done))
    return out


def table_of(topic: str, state: LedgerState, mirror: MirrorSettings) -> str | None:
    """The table id ``topic`` carries; ``None`` for a topic that carries no table rows (heartbeats and the like).

    The ledger's record of the topic comes first (it holds what was published, whatever the configuration says
    now); a topic not mirrored yet maps as its events would (``table_for_topic``).
    """
    known = sorted(tid for tid, table in state.tables.items() if table.topic == topic)
    if known:
        return known[0]
    if topic_prefix(topic) is None:
        return None
    return table_for_topic(topic, mirror).id


def gaps_for(lost: Sequence[LostRange], state: LedgerState, mirror: MirrorSettings, now: float) -> tuple[DataGap, ...]:
    """One ``DataGap`` per lost range, naming the table its partition carries (one per partition and first offset)."""
    gaps: dict[tuple[str, int, int], DataGap] = {}
    for r in lost:
        gap = DataGap(
            table=table_of(r.topic, state, mirror),
            topic=r.topic,
            partition=r.partition,
            first=r.first,
            last=r.last,
            kind=r.kind,
            detected_at=now,
        )
        gaps.setdefault(gap.key, gap)
    return tuple(gaps.values())


def with_rebuilds(state: LedgerState, gaps: Sequence[DataGap], mirror: MirrorSettings, now: float) -> LedgerState:
    """``state`` recording ``gaps`` not recorded yet and with each of their tables' rebuild begun.

    Past ``rebuild.max_automatic`` automatic rebuilds (within a day) the table is stopped instead.

    A gap recorded already (found before a crash) begins nothing again: its table's rebuild was committed with it.
    Nor does one of a table whose rebuild has not yet asked for its snapshot (that snapshot comes after the gap).
    """
    new = tuple(g for g in gaps if not state.has_gap(g.topic, g.partition, g.first))
    tables = dict(state.tables)
    for table_id in sorted({g.table for g in new if g.table is not None}):
        where = ", ".join(g.describe() for g in new if g.table == table_id)
        topic = next(g.topic for g in new if g.table == table_id)
        table = tables.get(table_id) or TableState(folder=table_for_topic(topic, mirror).folder, topic=topic)
        if table.lifecycle.is_rebuilding:
            continue
        # An automatic rebuild like any other: counted against rebuild.max_automatic, so retention that keeps
        # outrunning the connector stops the table (with the reason) instead of re-reading it for ever.
        lifecycle = table.lifecycle.stop(f"data lost at {where}", mirror, now=now, rebuild=True)
        tables[table_id] = replace(table, topic=table.topic or topic, lifecycle=lifecycle)
    return replace(state, tables=tables).with_gaps(new)


def offsets_past(lost: Sequence[LostRange]) -> dict[tuple[str, int], int | None]:
    """Where each lost partition is read on: its log start now; ``None`` for a partition that is gone."""
    return {(r.topic, r.partition): r.resume_from for r in lost}


def heal_data_loss(
    ledger: BatchLedger,
    spark: SparkCheckpoint,
    landing: Storage,
    mirror: MirrorSettings,
    check: OffsetsCheck,
    *,
    subscribed: Collection[str],
    now: float,
) -> tuple[DataGap, ...]:
    """Find the gaps Kafka left under the mirror and heal them as ``mirror.on_data_lost`` says; returns them.

    Raises:
        SourceDataLost: a gap was found and ``on_data_lost`` is ``stop`` (nothing was changed).
        OffsetsUnknown: the brokers did not say where the partitions start (whether records are lost is unknown).
    """
    expected = expected_offsets(ledger.state, spark)
    if not expected:
        return ()
    checked = check(expected, subscribed, ledger.state.topic_ids)
    if not checked.lost:
        return ()
    needed = unpublished(checked.lost, published_offsets(ledger.state))
    gaps = gaps_for(needed, ledger.state, mirror, now)
    if gaps and mirror.on_data_lost == "stop":
        raise SourceDataLost(stop_message(gaps))
    # Before any offset moves past a gap; with the topics' ids now, so a re-created topic is judged once.
    _record_gaps(ledger.commit_state, ledger.state, gaps, mirror, checked.topic_ids, now=now)
    # Partitions whose lost records were all published resume at the ledger's end offsets, past them too.
    resume_from_ledger(ledger, spark, landing, past_gaps=offsets_past(needed))
    return gaps


def _record_gaps(
    commit: Callable[[LedgerState], None],
    state: LedgerState,
    gaps: Sequence[DataGap],
    mirror: MirrorSettings,
    topic_ids: Mapping[str, str],
    *,
    now: float,
) -> list[DataGap]:
    """Commit the gaps not recorded yet with their tables' rebuilds begun and the topics' ids; log each gap."""
    new = [g for g in gaps if not state.has_gap(g.topic, g.partition, g.first)]
    after = with_rebuilds(state, new, mirror, now) if new else state
    after = after.with_topic_ids(dict(topic_ids)) if gaps else after
    if after is not state:
        commit(after)
    for gap in gaps:
        if gap in new and gap.table is not None:
            metrics.DATA_LOST.labels(table=gap.table).inc()
        what = f"rebuilding table {gap.table}" if gap.table else "it carries no table: read on past it"
        log.warning("Kafka no longer holds %s (%s): %s", gap.describe(), gap.kind, what)
    return new


def lost_in_batch(state: LedgerState, topic_ids: Mapping[str, str], read: Sequence[ReadGap]) -> list[LostRange]:
    """What a running batch found gone: topics whose id changed since the last batch, and the gaps its tasks read past.

    A topic created again is judged by its id even when its new log already reaches past the offsets the mirror
    expects (then its ranges read the new log's records, which the table's rebuild does not need).
    """
    lost = recreated_by_id(state.topic_ids, topic_ids, published_offsets(state))
    lost += [LostRange(g.topic, g.partition, g.first, g.last, g.kind, None) for g in read]
    return lost


def heal_in_batch(
    state: LedgerState,
    lost: Sequence[LostRange],
    mirror: MirrorSettings,
    commit: Callable[[LedgerState], None],
    topic_ids: Mapping[str, str],
    *,
    now: float,
) -> list[DataGap]:
    """Heal gaps a running batch found, in this process: the gaps not recorded yet (their rebuilds begun).

    One ``commit`` records them and begins the rebuild of exactly the tables they carried, before the batch is
    planned: the batch then reads on past them, the rebuilt tables' events skipped or upserted as their rebuild
    says, every other table published as usual. No exit, no restart.

    Raises:
        SourceDataLost: a gap was found and ``mirror.on_data_lost`` is ``stop`` (nothing was changed).
    """
    gaps = gaps_for(lost, state, mirror, now)
    if not gaps:
        return []
    if mirror.on_data_lost == "stop":
        raise SourceDataLost(stop_message(gaps))
    return _record_gaps(commit, state, gaps, mirror, topic_ids, now=now)


def stop_message(gaps: Sequence[DataGap]) -> str:
    """The one line ``on_data_lost: stop`` ends the job with: every gap, its table, and the ways on."""
    where = ", ".join(f"{g.describe()} ({g.kind}{', table ' + g.table if g.table else ''})" for g in gaps)
    recovery = data_lost_recovery("stop")
    return f"Kafka data lost at {where}: records the mirror has yet to read are gone from Kafka. {recovery}"


def kafka_check(source: SourceSettings) -> OffsetsCheck:
    """``check_offsets`` against ``source``'s brokers."""
    return lambda expected, subscribed, recorded_ids: check_offsets(
        source, expected, subscribed=subscribed, recorded_ids=recorded_ids
    )
