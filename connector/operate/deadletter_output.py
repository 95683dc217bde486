"""Choosing the dead-letter output from the settings: the folder writer or the Kafka writer, never the landing zone."""

from __future__ import annotations

import re
from pathlib import Path

from connector.collect.poison import dead_letter_in_use
from connector.config import ConnectorSettings
from connector.errors import ConfigError
from connector.operate.deadletter import DEFAULT_FOLDER, DeadLetterWriter
from connector.operate.deadletter_folder import FolderDeadLetterWriter
from connector.operate.deadletter_kafka import KafkaDeadLetterWriter, producer_config
from connector.storage import is_remote
from connector.storage.errors import InvalidStorageURL
from connector.storage.identity import CredentialConfig
from connector.storage.location import StorageLocation


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
        storage = StorageLocation(url, CredentialConfig.model_validate(config.credential), "dead_letter.url").open()
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
