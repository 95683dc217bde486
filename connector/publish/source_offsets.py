"""Does Spark's checkpoint agree with the ledger about what a batch id read from the source?

Spark numbers micro-batches and keeps, per batch id, the source offsets it read (its offsets log); the
ledger keeps, per committed batch id, the offsets that batch published. The two are separate folders an
operator can delete or restore independently. If they disagree, trusting the batch id alone is silent
data loss: a new batch whose id the ledger already committed would be skipped as "already published"
while Spark commits its offsets. So a batch id counts as published only when both give it the same
offsets, and every disagreement is refused with what each side says and how to recover.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from connector.errors import ConfigError, LandingZoneCorrupt
from connector.publish.ledger_state import BatchSource, LedgerState

RECOVERY = (
    "To recover, restore the Spark checkpoint folder that belongs with this ledger (both are parts of one "
    "checkpoint: back them up and restore them together), or start over with a new, empty checkpoint folder "
    "AND an emptied landing zone (every table is then published again from the topics' retained records), or "
    "(Kafka source) run once with `run --resume-from-ledger`, which moves the Spark checkpoint aside and starts "
    "a new one from the Kafka offsets the ledger's last published batch ended at"
)


OTHER_SOURCE_RECOVERY = (
    "Give this source its own checkpoint folder (--checkpoint) and its own landing zone (--landing-zone), or "
    "start over with an emptied checkpoint folder and an emptied landing zone"
)


def check_offsets_log(spark_offsets: tuple[str, ...], batch_id: int, kind: str, topics: str, where: str) -> None:
    """Before Spark starts: Spark's last offsets entry must come from the source this run reads.

    Spark resumes a query from its offsets log and cannot read one source's offsets with another: a file
    source's ``{"logOffset":1}`` given to the Kafka source fails inside Spark, and Kafka offsets of topics the
    pattern no longer matches (another broker's, another database's) end in a misleading data-loss error.
    When some of the topics still match but others do not, the pattern was narrowed: refused with the way to apply
    it (``--resume-from-ledger``), since Spark itself would stop with a misleading data-loss error for every
    partition that leaves the subscription. A widened pattern is fine (new topics start at their first record).

    Args:
        spark_offsets: The offsets lines of Spark's latest offsets log entry.
        batch_id: That entry's batch id, for messages.
        kind: ``source.kind`` of this run (``kafka`` or ``files``).
        topics: ``source.topics`` (Spark's subscribePattern: the whole topic name must match).
        where: The Spark checkpoint folder, for messages.

    Raises:
        ConfigError: the checkpoint was written by the other kind of source, for none of these topics, or for
            topics the pattern no longer matches.
    """
    ends = kafka_offsets(spark_offsets)
    written_by = "kafka" if ends is not None else "files" if _is_file_source(spark_offsets) else None
    if written_by is None:
        return  # not a log this connector's sources write: verify_ledger and Spark judge it
    logged = f"its offsets log for batch {batch_id}"
    if written_by != kind:
        if ends is not None:
            was = f"the Kafka source ({logged}: topics {_topic_list(ends)})"
        else:
            was = f"the file source ({logged}: {' '.join(spark_offsets)})"
        reads = "Kafka (source.kind: kafka)" if kind == "kafka" else "kcat files (source.kind: files)"
        msg = (
            f"Spark's checkpoint {where} was written by {was}, but this run reads {reads}: Spark cannot resume "
            f"one source from the other's offsets, and this checkpoint belongs to another source. "
            f"{OTHER_SOURCE_RECOVERY}"
        )
        raise ConfigError(msg)
    if ends:
        _check_topics_still_match(ends, topics, where, logged)


def _check_topics_still_match(ends: dict[str, dict[str, int]], topics: str, where: str, logged: str) -> None:
    """Kafka offsets of the checkpoint against ``source.topics``: none matched, or some no longer matched."""
    try:
        pattern = re.compile(topics)
    except re.error:
        return  # a Java-only regex: Spark judges it
    if not any(pattern.fullmatch(topic) for topic in ends):
        msg = (
            f"Spark's checkpoint {where} was written for the Kafka topics {_topic_list(ends)} ({logged}), none "
            f"of which matches source.topics {topics!r}: this checkpoint belongs to another source (another "
            f"broker, database or topic set), whose topics Spark would report as deleted. {OTHER_SOURCE_RECOVERY}"
        )
        raise ConfigError(msg)
    dropped = sorted(topic for topic in ends if not pattern.fullmatch(topic))
    if dropped:
        partitions = ", ".join(f"{t}[{p}]" for t in dropped for p in sorted(ends[t], key=int))
        msg = (
            f"source.topics {topics!r} was narrowed: it no longer matches {len(dropped)} of the topics Spark's "
            f"checkpoint {where} reads ({_topic_list({t: ends[t] for t in dropped})}; partitions {partitions}), and "
            "Spark cannot drop partitions from a checkpointed query (nothing is lost: the pattern changed). To apply "
            "the narrower pattern, run once with `run --resume-from-ledger`: the Spark checkpoint is moved aside and "
            "a new one starts from the Kafka offsets the ledger's last published batch ended at, for the topics the "
            "pattern still matches; the tables of the dropped topics keep what they have. Or run with the previous "
            "source.topics"
        )
        raise ConfigError(msg)


def _is_file_source(lines: tuple[str, ...]) -> bool:
    return bool(lines) and all(isinstance(p := _parsed(line), dict) and "logOffset" in p for line in lines)


def _topic_list(ends: dict[str, dict[str, int]], shown: int = 5) -> str:
    names = sorted(ends)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def same_offsets(ours: tuple[str, ...], theirs: tuple[str, ...]) -> bool:
    """Whether two offsets logs name the same positions (JSON compared by value, not by spelling)."""
    return len(ours) == len(theirs) and all(_parsed(a) == _parsed(b) for a, b in zip(ours, theirs, strict=True))


def describe(source: BatchSource, previous: BatchSource | None) -> str:
    """``orders[0] offsets 10..20, orders[1] offsets 5..9`` for Kafka; the log lines verbatim otherwise.

    Spark records only where a batch ends; where it starts is where the previous batch ended.
    """
    ends = kafka_offsets(source.offsets)
    if ends is None:
        return "source offsets " + " ".join(source.offsets)
    starts = kafka_offsets(previous.offsets) if previous is not None else None
    parts = []
    for topic, partitions in sorted(ends.items()):
        for partition, end in sorted(partitions.items(), key=lambda item: int(item[0])):
            start = (starts or {}).get(topic, {}).get(partition)
            span = f"{start}..{end}" if start is not None else f"up to {end}"
            parts.append(f"{topic}[{partition}] offsets {span}")
    return ", ".join(parts) or "no Kafka offsets"


def check_batch(state: LedgerState, batch_id: int, spark_offsets: tuple[str, ...] | None, where: str) -> bool:
    """Check batch ``batch_id`` that Spark is about to run against the ledger; ``True`` when already published.

    Args:
        state: The ledger's committed state.
        batch_id: Spark's batch id.
        spark_offsets: Spark's offsets log lines for ``batch_id`` (``None``: no such log).
        where: The Spark checkpoint folder, for messages.

    Raises:
        LandingZoneCorrupt: the ledger and Spark's checkpoint disagree, with both sides and the recovery.
    """
    last = state.last_committed_batch
    if spark_offsets is None:
        msg = (
            f"Spark's checkpoint {where} has no offsets log for batch {batch_id}, which Spark is running; "
            f"refusing to publish a batch whose source offsets are unknown. {RECOVERY}"
        )
        raise LandingZoneCorrupt(msg)
    if batch_id > last:
        if last >= 0 and batch_id > last + 1:
            msg = (
                f"Spark's checkpoint {where} is at batch {batch_id}, but the ledger's last published batch is "
                f"{last}: Spark committed batches {last + 1}..{batch_id - 1} that were never published (the "
                f"ledger was restored from an older copy, or the Spark checkpoint belongs to another ledger). "
                f"{RECOVERY}"
            )
            raise LandingZoneCorrupt(msg)
        return False
    recorded = state.source(batch_id)
    if recorded is None:
        if not state.sources and batch_id == last:
            return True  # a ledger from before offsets were recorded: Spark re-runs the batch it committed last
        msg = (
            f"Spark's checkpoint {where} runs batch {batch_id} ({_spark_side(batch_id, spark_offsets, state)}), "
            f"but the ledger, whose last published batch is {last}, has no record of what batch {batch_id} "
            "published: its batch count is ahead of Spark's checkpoint (edited, or Spark's checkpoint was "
            f"replaced), and treating the batch as published would lose its records. {RECOVERY}"
        )
        raise LandingZoneCorrupt(msg)
    if not same_offsets(recorded.offsets, spark_offsets):
        raise LandingZoneCorrupt(
            _mismatch(state, recorded, f"says {_spark_side(batch_id, spark_offsets, state)}", where)
        )
    return True


def check_start(
    state: LedgerState, spark_offsets: tuple[str, ...] | None, spark_committed: int | None, where: str
) -> None:
    """Before Spark starts: the last batch the ledger published must be in Spark's checkpoint, with its offsets.

    Args:
        state: The ledger's committed state (after completing an interrupted batch).
        spark_offsets: Spark's offsets log lines for the ledger's last committed batch (``None``: missing).
        spark_committed: The highest batch id in Spark's commit log (``None``: none).
        where: The Spark checkpoint folder, for messages.

    Raises:
        LandingZoneCorrupt: Spark's checkpoint is missing, behind, ahead of, or different from the ledger.
    """
    last = state.last_committed_batch
    if last < 0:
        return
    if spark_committed is not None and spark_committed > last:
        msg = (
            f"Spark's checkpoint {where} committed batch {spark_committed}, but the ledger's last published batch "
            f"is {last}: batches {last + 1}..{spark_committed} would never be published (the ledger was restored "
            f"from an older copy, or the Spark checkpoint belongs to another ledger). If the ledger is an older copy, "
            f"run once with `run --resume-from-ledger`: it takes each table's next file number from the landing zone "
            f"and resumes from the newest Kafka offsets recorded. {RECOVERY}"
        )
        raise LandingZoneCorrupt(msg)
    recorded = state.source(last)
    if recorded is None and state.sources:
        msg = (
            f"the ledger's last published batch is {last}, but it has no record of that batch's source offsets "
            f"(it recorded batches {state.sources[0].batch_id}..{state.sources[-1].batch_id}): its batch count was "
            f"changed outside the connector, and Spark's batches up to {last} would be skipped as published. "
            f"{RECOVERY}"
        )
        raise LandingZoneCorrupt(msg)
    if spark_offsets is None:
        published = describe(recorded, state.source(last - 1)) if recorded is not None else "its records"
        msg = (
            f"the ledger says batch {last} published {published}, but Spark's checkpoint {where} has no offsets "
            f"log for batch {last} (deleted, or restored from an older copy): Spark would number new batches "
            f"from an earlier id, and those would be skipped as already published. {RECOVERY}"
        )
        raise LandingZoneCorrupt(msg)
    if recorded is not None and not same_offsets(recorded.offsets, spark_offsets):
        raise LandingZoneCorrupt(_mismatch(state, recorded, f"says {_spark_side(last, spark_offsets, state)}", where))


def _mismatch(state: LedgerState, recorded: BatchSource, spark_says: str, where: str) -> str:
    batch_id = recorded.batch_id
    return (
        f"the ledger says batch {batch_id} published {describe(recorded, state.source(batch_id - 1))}, but "
        f"Spark's checkpoint {where} {spark_says} for batch {batch_id}: the Spark checkpoint does not belong with "
        f"this ledger (restored from another copy), and its batches would be skipped as published. {RECOVERY}"
    )


def _spark_side(batch_id: int, offsets: tuple[str, ...], state: LedgerState) -> str:
    return describe(BatchSource(batch_id, offsets), state.source(batch_id - 1))


def _parsed(line: str) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return line


def kafka_offsets(lines: tuple[str, ...]) -> dict[str, dict[str, int]] | None:
    """Kafka end offsets per topic and partition, ``None`` when the log is not a Kafka source's."""
    out: dict[str, dict[str, int]] = {}
    for line in lines:
        parsed = _parsed(line)
        if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
            return None
        for topic, partitions in parsed.items():
            out.setdefault(topic, {}).update({str(p): int(o) for p, o in partitions.items()})
    return out
