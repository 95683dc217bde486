"""Choosing the dead-letter output from the settings: the folder writer or the Kafka writer, never the landing zone."""

from __future__ import annotations

from pathlib import Path

from connector.collect.poison import dead_letter_in_use
from connector.config import ConnectorSettings
from connector.deadletter.folder import FolderDeadLetterWriter
from connector.deadletter.kafka import KafkaDeadLetterWriter, producer_config
from connector.deadletter.writer import DEFAULT_FOLDER, DeadLetterWriter
from connector.errors import ConfigError
from connector.storage.errors import InvalidStorageURL
from connector.storage.location import StorageLocation, as_location


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
    location = StorageLocation(url, config.identity, "dead_letter.url")
    check_outside_landing_zone(location, settings.landing_zone.location)
    try:
        storage = location.open()
    except InvalidStorageURL as exc:
        msg = f"dead_letter.url is not a folder or storage URL: {exc}"
        raise ConfigError(msg) from None
    return FolderDeadLetterWriter(storage)


def check_outside_landing_zone(dead_letters: StorageLocation | str, landing_zone: StorageLocation | str) -> None:
    """Refuse a dead-letter location equal to or inside the landing zone.

    The mirroring service reads every folder under the landing zone; files it does not expect there
    would at best be ignored and at worst stop replication.

    Raises:
        ConfigError: ``dead_letters`` is the landing zone or a folder inside it.
    """
    target = as_location(dead_letters, "dead_letter.url")
    root = as_location(landing_zone, "landing_zone.url")
    inside = root.contains(target)
    if inside:
        url, landing_zone_url = target.url, root.url
        msg = (
            f"dead_letter.url {url} is inside the landing zone {landing_zone_url}: the mirroring service "
            "reads every folder there; use a folder outside it (default <checkpoint>/_deadletter)"
        )
        raise ConfigError(msg)
