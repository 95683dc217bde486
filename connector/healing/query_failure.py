"""A failed streaming query's JVM exception text, turned into one line an operator can act on.

When the query fails, PySpark hands the driver one long exception text: Spark's error, the JVM stack, and
for a failure inside ``foreachBatch`` the Python traceback too. The few failures with a known cause and a
known recovery are picked out here by their stable wording (Spark's ``KAFKA_DATA_LOSS`` conditions, the
Kafka client's authentication errors, the connector's own errors raised in the batch); anything else stays
a full report for a person to read. Either way the job reports one ``error:`` line (``report_query_failure``):
the stacks are in Spark's debug log (``connector.spark.spark_log``), which the line names.
"""

from __future__ import annotations

import re
from pathlib import Path

from connector.errors import ConnectorError


class SourceDataLost(ConnectorError):
    """Records the checkpoint still has to read are gone from Kafka (retention, deleted records or topic).

    The job stops instead of skipping them (``failOnDataLoss`` is on): the mirror would silently lack
    their changes. The message names ``topic[partition]@offset`` and the ways to recover.
    """


class SourceRefused(ConnectorError):
    """The Kafka brokers refused the job's credentials while the query ran."""


class BatchFailed(ConnectorError):
    """A connector error raised in ``foreachBatch``, or planning a batch (our source): carried out of Spark as text."""


class QueryFailed(ConnectorError):
    """The query failed for a reason not recognised here; its first line is the message, the rest is in the log."""


_STOP_RECOVERY = (
    "Recovery: set mirror.on_data_lost: rebuild and start again, which rebuilds only the tables these partitions "
    "carry (folder deleted, Debezium incremental snapshot) and reads on past the gap while every other table goes "
    "on; or re-snapshot every table into a new landing zone with a new checkpoint; raise the topic's retention.ms "
    "so the connector's lag cannot outrun it again"
)
_REBUILD_RECOVERY = (
    "mirror.on_data_lost is rebuild: the tables these partitions carry are rebuilt at the next start (folder "
    "deleted, Debezium incremental snapshot) and reading goes on past the gap, every other table without a "
    "pause; restart the job (Kubernetes does). Raise the topic's retention.ms so the connector's lag cannot "
    "outrun it again"
)


def data_lost_recovery(on_data_lost: str) -> str:
    """What an operator does about lost records, under ``mirror.on_data_lost`` (``rebuild`` or ``stop``)."""
    return _REBUILD_RECOVERY if on_data_lost == "rebuild" else _STOP_RECOVERY


# (pattern, how to read topic, partition and offset from its groups), most specific first. Kafka's
# TopicPartition prints as "<topic>-<partition>"; topic names may contain '-', the partition is the last part.
_DATA_LOSS_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Cannot fetch offset (?P<offset>\d+) \(GroupId: [^,]*, TopicPartition: (?P<tp>\S+?)\)"), "fetch"),
    (re.compile(r"Starting offset for (?P<tp>\S+) was (?P<offset>\d+) but consumer reset to (?P<to>\d+)"), "reset"),
    (
        re.compile(r"Partition (?P<tp>\S+)'?s? offset was changed from (?P<offset>\d+) to (?P<to>\d+)"),
        "changed",
    ),
    (
        re.compile(
            r"Could not read records in offset \[(?P<offset>\d+), (?P<to>\d+)\) for topic partition (?P<tp>\S+)"
        ),
        "range",
    ),
    (re.compile(r"Added partition (?P<tp>\S+) starts from (?P<offset>\d+)"), "added"),
)
# INITIAL_OFFSET_NOT_FOUND_FOR_PARTITIONS and PARTITIONS_DELETED print a Scala Set of TopicPartitions,
# "Set(a-0)" or, past four, "HashSet(a-0, b-1, ...)"; topic names hold dots and dashes but never a parenthesis
# or a comma (Kafka allows only [a-zA-Z0-9._-]).
_PARTITIONS = re.compile(r"(?:Cannot find initial offsets for partitions|Partitions) (?P<set>\w*Set\([^()]*\))")
_DATA_LOSS_MARKERS = ("KAFKA_DATA_LOSS", "Some data may have been lost", "OffsetOutOfRangeException")
_AUTH_MARKERS = ("SaslAuthenticationException", "AuthenticationException", "SslAuthenticationException")
# A connector exception at the end of a Python traceback inside the JVM text:
# "connector.storage.errors.StorageError: cannot write ...".
_CONNECTOR_ERROR_LINE = re.compile(r"^(?P<type>connector(?:\.\w+)+?\.(?P<name>\w+)): (?P<message>.+)$", re.MULTILINE)
# Spark's wrapping of an error raised in one of the Python data source's planning steps (the connector's own Kafka
# source, ``source.planner: python``): PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR (its planner: initialOffset,
# latestOffset, partitions, ...) and PYTHON_DATA_SOURCE_ERROR (creating the source, planning its read).
_PLANNING_FAILED = re.compile(
    r"Failed when Python streaming data source perform \w+:|Failed to (?:create|plan) Python data source"
)


_PYTHON_TRACEBACK = "Traceback (most recent call last):"
_SHOWN = 400


def report_query_failure(text: str, debug_log: Path | None, on_data_lost: str = "stop") -> ConnectorError:
    """The one error a failed query ``text`` is reported as: known ones explained, any other by its gist.

    The message ends by naming ``debug_log``, where the JVM's stack traces and ``text`` in full were written
    (``None``: the operator's own log configuration has them, and the job logs ``text`` itself).
    """
    where = f" (stack traces in {debug_log})" if debug_log is not None else ""
    known = explain_query_failure(text, on_data_lost)
    if known is not None:
        return type(known)(f"{known}{where}")
    return QueryFailed(f"streaming query failed: {_gist(text)}{where}")


def _gist(text: str) -> str:
    """What a failure text amounts to in one line: the Python exception a batch raised, else the first line.

    A Python traceback inside the JVM text ends with the exception's ``Type: message`` line, the first line
    after its header that is not indented (the frames are); the last traceback is the one that ended the batch.
    """
    if _PYTHON_TRACEBACK in text:
        tail = text[text.rindex(_PYTHON_TRACEBACK) + len(_PYTHON_TRACEBACK) :].splitlines()
        raised = next((line for line in tail if line.strip() and not line[0].isspace()), None)
        if raised is not None:
            return raised.strip()[:_SHOWN]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "no message")
    return first[:_SHOWN]


def explain_query_failure(text: str, on_data_lost: str = "stop") -> ConnectorError | None:
    """The connector error that ``text`` (a failed query's exception) amounts to, or ``None`` when unknown.

    Lost records found while the query runs end it when Spark's own reader found them (it cannot skip them for
    one table only) or ``on_data_lost`` is ``stop``: ``on_data_lost`` says what the next start does about them.
    The executors' own reader (``source.reader: direct``) reads past them under ``rebuild`` and the batch heals
    them in-process (``connector.healing.data_loss_healing.heal_in_batch``), so they never end the query.
    """
    if any(marker in text for marker in _DATA_LOSS_MARKERS):
        return SourceDataLost(_data_loss_message(text, data_lost_recovery(on_data_lost)))
    auth = next((marker for marker in _AUTH_MARKERS if marker in text), None)
    if auth is not None:
        detail = _line_after(text, auth)
        return SourceRefused(
            f"the Kafka brokers refused the job's credentials ({auth}{': ' + detail if detail else ''}); "
            "check source.kafka_options (security.protocol, sasl.mechanism, sasl.jaas.config)"
        )
    raised = list(_CONNECTOR_ERROR_LINE.finditer(text))
    if raised:
        last = raised[-1]
        planning = _PLANNING_FAILED.search(text, 0, last.start())
        where = "while planning a micro-batch" if planning else "in a micro-batch"
        return BatchFailed(f"{last['message'].strip()} ({last['name']} {where})")
    return None


def _data_loss_message(text: str, recovery: str) -> str:
    for pattern, kind in _DATA_LOSS_PATTERNS:
        match = pattern.search(text)
        if match is None:
            continue
        topic, partition = _split_topic_partition(match["tp"])
        where = f"{topic}[{partition}]@{match['offset']}"
        if kind == "reset" or kind == "changed":
            detail = f"the log now starts at offset {match['to']}"
        elif kind == "range":
            detail = f"offsets [{match['offset']}, {match['to']}) cannot be read"
        elif kind == "added":
            detail = "a new partition does not start at offset 0"
        else:
            detail = "the offset is no longer in the log"
        return f"Kafka data lost at {where}: {detail} (aged out by retention, or deleted). {recovery}"
    partitions = _PARTITIONS.search(text)
    where = f" (partitions {_partition_list(partitions['set'])})" if partitions else ""
    return f"Kafka data lost{where}: records the checkpoint has yet to read are gone from Kafka. {recovery}"


def _partition_list(scala_set: str) -> str:
    """``HashSet(db.public.a-0, db.public.b-1)`` → ``db.public.a[0], db.public.b[1]``."""
    inner = scala_set[scala_set.index("(") + 1 : -1]
    names = [_split_topic_partition(part.strip()) for part in inner.split(",") if part.strip()]
    return ", ".join(f"{topic}[{partition}]" for topic, partition in names)


def _split_topic_partition(text: str) -> tuple[str, str]:
    """``orders-db.public.orders-3`` → (``orders-db.public.orders``, ``3``)."""
    topic, _, partition = text.strip(".,;)").rpartition("-")
    return (topic, partition) if partition.isdigit() else (text, "?")


def _line_after(text: str, marker: str) -> str:
    """The rest of the line that names ``marker``, after ``marker:``."""
    match = re.search(re.escape(marker) + r":\s*(.+)", text)
    return match[1].strip()[:300] if match else ""
