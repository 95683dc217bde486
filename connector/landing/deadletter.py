"""Dead-letter outputs for poison records: a folder outside the landing zone, or a Kafka topic.

Under ``poison_policy: dead-letter`` a record that cannot be decoded is kept here, raw (key, value and
headers exactly as Kafka held them) with where it came from and why it failed, and its table goes on.
The writer is called once per micro-batch, before the batch's landing-zone files are published, so a
record is never lost: either it is in the dead-letter output, or the batch failed and Spark replays it.

Replays are why ``write`` is idempotent per batch id for the folder (a replayed batch finds its file and
adds only what is missing) and at-least-once for Kafka (a replayed batch is produced again; consumers
of the dead-letter topic dedupe by the ``deadletter.topic`` / ``.partition`` / ``.offset`` headers).
"""

from __future__ import annotations

import base64
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from connector.config import (
    ConnectorSettings,
    DeadLetterSettings,
    MirrorSettings,
    SourceSettings,
    redact,
    resolve_secret_references,
)
from connector.errors import ConfigError, ConnectorError, TransientError
from connector.events import KafkaRecord
from connector.kafka_client import client_security_options
from connector.storage import Storage, is_remote, join, open_storage
from connector.storage.errors import InvalidStorageURL

_LOG = logging.getLogger(__name__)

#: Default folder, under the checkpoint volume: outside the landing zone, on storage the job owns.
DEFAULT_FOLDER = "_deadletter"

HEADER_PREFIX = "deadletter."


class DeadLetterError(ConnectorError):
    """Dead letters could not be written for a reason retrying does not fix (a missing topic, ACLs)."""


class DeadLetterUnavailable(TransientError):
    """The dead-letter output did not accept the batch in time; the batch fails and is replayed."""


@dataclass(frozen=True)
class DeadLetter:
    """One poison record, raw, with its origin and the reason it was rejected.

    Attributes:
        topic: Source topic.
        partition: Source partition.
        offset: Source offset.
        key: The record's key bytes, as Kafka held them.
        value: The record's value bytes, as Kafka held them.
        headers: The record's headers.
        table: The landing-zone table the record belongs to (from its topic).
        error: Why it was rejected (a ``DecodeError`` message; never a secret).
        timestamp_ms: The record's Kafka timestamp, when known.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    table: str
    error: str
    timestamp_ms: int | None = None

    @classmethod
    def from_record(cls, record: KafkaRecord, table: str, error: str | BaseException) -> DeadLetter:
        """The dead letter of ``record``."""
        return cls(
            record.topic,
            record.partition,
            record.offset,
            record.key,
            record.value,
            tuple(record.headers),
            table,
            str(error),
            record.timestamp_ms,
        )

    @property
    def position(self) -> str:
        """``topic[partition]@offset``."""
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def sort_key(self) -> tuple[str, int, int]:
        """Kafka order."""
        return self.topic, self.partition, self.offset


class DeadLetterWriter(ABC):
    """Where poison records go; one ``write`` per micro-batch."""

    #: Where the letters go, safe to log (no credentials).
    location: str

    @abstractmethod
    def write(self, batch_id: int, letters: Sequence[DeadLetter]) -> None:
        """Store ``letters`` durably before returning.

        Raises:
            DeadLetterUnavailable: the output did not accept them in time (transient).
            DeadLetterError: the output refuses them (terminal).
        """

    def close(self) -> None:  # noqa: B027 - optional hook, most writers hold nothing
        """Release clients; the writer must not be used afterwards."""


def poison_policy(mirror: MirrorSettings, topic: str) -> Literal["stop", "dead-letter"]:
    """The poison policy of ``topic``: its ``mirror.tables`` override, else ``mirror.poison_policy``."""
    return mirror.table_settings(topic).poison_policy or mirror.poison_policy


def dead_letter_in_use(mirror: MirrorSettings) -> bool:
    """Whether any topic can send records to the dead-letter output."""
    return mirror.poison_policy == "dead-letter" or any(
        t.poison_policy == "dead-letter" for t in mirror.tables.values()
    )


def open_dead_letter_writer(settings: ConnectorSettings) -> DeadLetterWriter | None:
    """The writer ``settings`` ask for; ``None`` when no topic has poison policy ``dead-letter``.

    Raises:
        ConfigError: the dead-letter folder is inside the landing zone, or kind kafka lacks a topic or
            bootstrap servers.
    """
    if not dead_letter_in_use(settings.mirror):
        return None
    config = settings.dead_letter
    if config.kind == "kafka":
        if not config.topic:
            msg = "dead_letter.topic is required when dead_letter.kind is kafka"
            raise ConfigError(msg)
        bootstrap = config.bootstrap_servers or settings.source.bootstrap_servers
        if not bootstrap:
            msg = "dead_letter.bootstrap_servers (or source.bootstrap_servers) is required for dead_letter.kind kafka"
            raise ConfigError(msg)
        return KafkaDeadLetterWriter(
            config.topic, producer_config(settings.source, config, bootstrap), config.delivery_timeout_s
        )
    url = config.url or str(Path(settings.checkpoint) / DEFAULT_FOLDER)
    check_outside_landing_zone(url, settings.landing_zone.url)
    try:
        storage = open_storage(url, config.credential)
    except InvalidStorageURL as exc:
        msg = f"dead_letter.url is not a folder or storage URL: {exc}"
        raise ConfigError(msg) from None
    return FolderDeadLetterWriter(storage)


# -- folder --------------------------------------------------------------------------------------------


class FolderDeadLetterWriter(DeadLetterWriter):
    """One JSON-lines file per batch and table: ``<table>/<batch_id:020d>.jsonl``, in Kafka order.

    Each line holds ``topic``, ``partition``, ``offset``, ``timestamp_ms``, ``table``, ``error``,
    ``batch_id``, ``key`` and ``value`` (base64, or null) and ``headers`` (``[name, base64 or null]``
    pairs). Files are created with the storage's no-overwrite create; when a replayed batch finds its
    file, letters already in it (by topic, partition, offset) are skipped and the file is rewritten
    only if some were missing, so the folder never holds a record twice.
    """

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.location = storage.url

    def write(self, batch_id: int, letters: Sequence[DeadLetter]) -> None:
        """Store ``letters``; see the class docstring for the layout and the replay rule."""
        by_table: dict[str, list[DeadLetter]] = {}
        for letter in letters:
            by_table.setdefault(letter.table, []).append(letter)
        for table, group in sorted(by_table.items()):
            path = join(_folder_name(table), f"{batch_id:020d}.jsonl")
            group.sort(key=DeadLetter.sort_key)
            lines = [_line(batch_id, letter) for letter in group]
            try:
                self._storage.create(path, b"".join(lines))
            except FileExistsError:
                written = self._storage.read_bytes(path)
                present = {_position(line) for line in written.splitlines() if line.strip()}
                missing = [line for line in lines if _position(line) not in present]
                if not missing:
                    continue
                merged = sorted([*(ln + b"\n" for ln in written.splitlines() if ln.strip()), *missing], key=_position)
                self._storage.replace(path, b"".join(merged))
            _LOG.warning(
                "dead-lettered %d record(s) of table %s (batch %d) to %s; first %s: %s",
                len(group),
                table,
                batch_id,
                join(self.location, path),
                group[0].position,
                group[0].error,
            )


def _folder_name(table: str) -> str:
    """A table id as one safe folder name (no separators, no leading dot or underscore)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", table).lstrip("._") or "unknown"
    return name


def _line(batch_id: int, letter: DeadLetter) -> bytes:
    entry = {
        "topic": letter.topic,
        "partition": letter.partition,
        "offset": letter.offset,
        "timestamp_ms": letter.timestamp_ms,
        "table": letter.table,
        "error": letter.error,
        "batch_id": batch_id,
        "key": _b64(letter.key),
        "value": _b64(letter.value),
        "headers": [[name, _b64(value)] for name, value in letter.headers],
    }
    return orjson.dumps(entry) + b"\n"


def _position(line: bytes) -> tuple[str, int, int]:
    entry = orjson.loads(line)
    return str(entry["topic"]), int(entry["partition"]), int(entry["offset"])


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def check_outside_landing_zone(url: str, landing_zone_url: str) -> None:
    """Refuse a dead-letter location equal to or inside the landing zone.

    The mirroring service reads every folder under the landing zone; files it does not expect there
    would at best be ignored and at worst stop replication.

    Raises:
        ConfigError: ``url`` is the landing zone or a folder inside it.
    """
    if is_remote(url) != is_remote(landing_zone_url):
        return
    if not is_remote(url):
        target, root = Path(url).resolve(), Path(landing_zone_url).resolve()
        inside = target == root or root in target.parents
    else:
        target_parts, root_parts = (
            _remote_parts(url, "dead_letter.url"),
            _remote_parts(landing_zone_url, "landing_zone.url"),
        )
        inside = target_parts[: len(root_parts)] == root_parts
    if inside:
        msg = (
            f"dead_letter.url {url} is inside the landing zone {landing_zone_url}: the mirroring service "
            "reads every folder there; use a folder outside it (default <checkpoint>/_deadletter)"
        )
        raise ConfigError(msg)


def _remote_parts(url: str, setting: str) -> tuple[str, ...]:
    """A OneLake / ADLS Gen2 URL as comparable parts: host (regions folded), filesystem, folders."""
    from connector.storage.onelake import parse_location

    try:
        location = parse_location(url)
    except ValueError as exc:
        msg = f"{setting} is not a storage URL: {exc}"
        raise ConfigError(msg) from None
    host = location.account_url.split("://", 1)[-1].lower()
    host = re.sub(r"^[a-z0-9]+-onelake\.", "onelake.", host)
    folders = tuple(p.casefold() for p in location.root.split("/") if p)
    return (host, location.filesystem.casefold(), *folders)


# -- kafka ---------------------------------------------------------------------------------------------


def producer_config(source: SourceSettings, config: DeadLetterSettings, bootstrap: str) -> dict[str, Any]:
    """Producer options (librdkafka names) for the dead-letter topic.

    Security options come from ``source.kafka_options`` (the source's brokers usually host the dead-letter
    topic): options librdkafka shares with the Java client are taken as they are, and a PLAIN / SCRAM
    ``sasl.jaas.config`` becomes ``sasl.username`` / ``sasl.password``. Java-only options (JKS key and
    trust stores, callback classes) have no librdkafka equivalent; they are skipped and named in a log
    line, and ``dead_letter.producer_options`` can supply the librdkafka form. Idempotence, ``acks=all``
    and the delivery timeout are always set.
    """
    options, skipped = client_security_options(source)
    if skipped:
        _LOG.info("dead-letter producer: source.kafka_options without a librdkafka equivalent skipped: %s", skipped)
    for key, raw_value in config.producer_options.items():
        options[key] = resolve_secret_references(raw_value, f"dead_letter.producer_options.{key}")
    options.update(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": int(config.delivery_timeout_s * 1000),
        }
    )
    return options


class KafkaDeadLetterWriter(DeadLetterWriter):
    """Produces each poison record to a dead-letter topic, raw, keyed as it was.

    The record keeps its key (so one key's letters stay in order in one partition), value and headers,
    plus ``deadletter.error``, ``deadletter.topic``, ``deadletter.partition``, ``deadletter.offset``,
    ``deadletter.table``, ``deadletter.batch_id`` and, when known, ``deadletter.timestamp`` headers.
    The producer is idempotent with ``acks=all`` and ``write`` flushes before returning, so a batch is
    only published after its letters are durable. Delivery is at-least-once across replays: a batch that
    failed after its letters were produced produces them again when Spark replays it.
    """

    def __init__(self, topic: str, config: dict[str, Any], delivery_timeout_s: float) -> None:
        self.topic = topic
        self._config = config
        self._timeout = delivery_timeout_s
        self._producer: Any = None
        self.location = f"kafka topic {topic} on {config.get('bootstrap.servers')}"

    def __getstate__(self) -> dict[str, Any]:
        return {"topic": self.topic, "config": self._config, "timeout": self._timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["topic"], state["config"], state["timeout"])  # type: ignore[misc]

    def redacted_config(self) -> dict[str, str]:
        """The producer options, safe to log."""
        return {k: redact(k, str(v)) for k, v in self._config.items()}

    def write(self, batch_id: int, letters: Sequence[DeadLetter]) -> None:
        """Produce ``letters`` and wait until every one is acknowledged by all in-sync replicas."""
        if not letters:
            return
        from confluent_kafka import KafkaError, KafkaException, Producer

        if self._producer is None:
            try:
                self._producer = Producer(self._config)
            except KafkaException as exc:
                msg = f"dead-letter producer for {self.location}: {exc.args[0]}"
                raise ConfigError(msg) from None
        producer = self._producer
        failures: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _message: object) -> None:
            if err is not None:
                failures.append(err)

        for letter in letters:
            headers = [*letter.headers, *_headers(batch_id, letter)]
            while True:
                try:
                    producer.produce(
                        self.topic, key=letter.key, value=letter.value, headers=headers, on_delivery=on_delivery
                    )
                    break
                except BufferError:
                    producer.poll(0.1)  # the local queue is full: let deliveries drain it
                except KafkaException as exc:
                    msg = f"dead-letter topic {self.topic} refused {letter.position}: {exc.args[0]}"
                    raise DeadLetterError(msg) from None
            producer.poll(0)
        undelivered = producer.flush(self._timeout)
        if failures:
            first = failures[0]
            msg = (
                f"dead-letter topic {self.topic}: {len(failures)} of {len(letters)} record(s) of batch {batch_id} "
                f"not delivered: {first.str()}"
            )
            if any(_permanent(f) for f in failures):
                raise DeadLetterError(msg)
            raise DeadLetterUnavailable(msg)
        if undelivered:
            msg = (
                f"dead-letter topic {self.topic}: {undelivered} record(s) of batch {batch_id} not acknowledged "
                f"within dead_letter.delivery_timeout_s={self._timeout}"
            )
            raise DeadLetterUnavailable(msg)
        tables = sorted({letter.table for letter in letters})
        _LOG.warning(
            "dead-lettered %d record(s) of table(s) %s (batch %d) to %s; first %s: %s",
            len(letters),
            ", ".join(tables),
            batch_id,
            self.location,
            letters[0].position,
            letters[0].error,
        )

    def close(self) -> None:
        """Flush what is queued and drop the producer."""
        if self._producer is not None:
            self._producer.flush(self._timeout)
            self._producer = None


# Delivery errors a replay cannot fix: a person has to change ACLs, the topic or its size limit. Anything
# else (timeouts, brokers down, leader elections) is transient: the batch fails and is replayed.
_PERMANENT_ERRORS = frozenset(
    {
        "TOPIC_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "SASL_AUTHENTICATION_FAILED",
        "_AUTHENTICATION",
        "MSG_SIZE_TOO_LARGE",
        "_MSG_SIZE_TOO_LARGE",
        "RECORD_LIST_TOO_LARGE",
        "INVALID_RECORD",
        "_UNKNOWN_TOPIC",
        "UNKNOWN_TOPIC_OR_PART",
        "TOPIC_EXCEPTION",
        "_INVALID_ARG",
    }
)


def _permanent(error: Any) -> bool:
    return bool(error.fatal()) or str(error.name()) in _PERMANENT_ERRORS


def _headers(batch_id: int, letter: DeadLetter) -> list[tuple[str, bytes]]:
    out = [
        (f"{HEADER_PREFIX}error", letter.error.encode()),
        (f"{HEADER_PREFIX}topic", letter.topic.encode()),
        (f"{HEADER_PREFIX}partition", str(letter.partition).encode()),
        (f"{HEADER_PREFIX}offset", str(letter.offset).encode()),
        (f"{HEADER_PREFIX}table", letter.table.encode()),
        (f"{HEADER_PREFIX}batch_id", str(batch_id).encode()),
    ]
    if letter.timestamp_ms is not None:
        out.append((f"{HEADER_PREFIX}timestamp", str(letter.timestamp_ms).encode()))
    return out
