"""Dead-letter outputs for poison records: a folder outside the landing zone, or a Kafka topic.

Under ``poison_policy: dead-letter`` a record that cannot be decoded is kept here, raw (key, value and
headers exactly as Kafka held them) with where it came from and why it failed, and its table goes on.
The writer is called once per micro-batch, before the batch's landing-zone files are published, so a
record is never lost: either it is in the dead-letter output, or the batch failed and Spark replays it.

Replays are why ``write`` is idempotent per batch id for the folder (a replayed batch finds its file and
adds only what is missing) and at-least-once for Kafka (a replayed batch is produced again; consumers
of the dead-letter topic dedupe by the ``deadletter.topic`` / ``.partition`` / ``.offset`` headers).

This module holds what both outputs share: the record, the poison policy, the writer interface and the
choice of writer; the writers themselves are ``deadletter_folder`` and ``deadletter_kafka``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from connector.config import ConnectorSettings, MirrorSettings
from connector.errors import ConfigError, ConnectorError, TransientError
from connector.events import KafkaRecord
from connector.storage import is_remote, open_storage
from connector.storage.errors import InvalidStorageURL

#: Default folder, under the checkpoint volume: outside the landing zone, on storage the job owns.
DEFAULT_FOLDER = "_deadletter"


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
    # The writers subclass DeadLetterWriter from this module, so they are imported here, not at the top.
    from connector.landing.deadletter_folder import FolderDeadLetterWriter
    from connector.landing.deadletter_kafka import KafkaDeadLetterWriter, producer_config

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
    from connector.storage.onelake_location import parse_location

    try:
        location = parse_location(url)
    except ValueError as exc:
        msg = f"{setting} is not a storage URL: {exc}"
        raise ConfigError(msg) from None
    host = location.account_url.split("://", 1)[-1].lower()
    host = re.sub(r"^[a-z0-9]+-onelake\.", "onelake.", host)
    folders = tuple(p.casefold() for p in location.root.split("/") if p)
    return (host, location.filesystem.casefold(), *folders)
