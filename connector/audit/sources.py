"""The audit's source reader, chosen by the source URL's scheme: Postgres, or MySQL/MariaDB.

``postgres://`` and ``postgresql://`` (and any URL that is not MySQL's, as ``verify`` takes them) are read by
``database_postgres.PostgresReader``, whose lag gate is a logical-decoding message and its slot. ``mysql://`` and
``mariadb://`` are read by ``mysql_ranges.MySqlRangedReader``, whose lag gate is a mark row in Debezium's
signalling table (``mirror.audit.signal_table``) seen back in Kafka, in the topic Debezium names
``<topic.prefix>.<signal table>`` (the prefix is ``mirror.rebuild.topic_prefix``, else the audited topics').
"""

from __future__ import annotations

from collections.abc import Sequence

from connector.config import ConnectorSettings
from connector.debezium_control.snapshot_signal import signal_target
from connector.errors import ConfigError
from connector.kafka_client import client_config
from connector.readback.database_mysql import is_mysql_url
from connector.readback.database_postgres import PostgresReader
from connector.readback.mysql_position import MarkWatcher, signal_table_topic
from connector.readback.mysql_ranges import MySqlRangedReader

MARK_GROUP = "cdc-mirror-audit-position"
"""The consumer group named by the mark watcher (it assigns partitions and commits nothing)."""


def audit_reader(url: str, settings: ConnectorSettings, topics: Sequence[str]) -> PostgresReader | MySqlRangedReader:
    """The reader of the source at ``url``, not yet connected (a context manager).

    ``topics`` are the audited tables' topics: the MySQL/MariaDB gate's topic prefix comes from them.

    Raises:
        ConfigError: a MySQL/MariaDB source without ``mirror.audit.signal_table``, or with no topic to take
            Debezium's topic prefix from.
    """
    if not is_mysql_url(url):
        return PostgresReader(url)
    audit = settings.mirror.audit
    if not audit.signal_table:
        msg = (
            "mirror.audit.signal_table is required for a MySQL/MariaDB source: Debezium's signalling table "
            "(signal.data.collection), where the audit writes its position marks"
        )
        raise ConfigError(msg)
    prefix = mark_prefix(settings, topics)
    topic = signal_table_topic(prefix, audit.signal_table)
    source = settings.source

    def watcher() -> MarkWatcher:
        from confluent_kafka import Consumer

        options = client_config(source, **{"group.id": MARK_GROUP, "enable.auto.commit": False})
        return MarkWatcher(topic, lambda: Consumer(options))

    return MySqlRangedReader(url, audit.signal_table, watcher)


def mark_prefix(settings: ConnectorSettings, topics: Sequence[str]) -> str:
    """Debezium's topic prefix: ``mirror.rebuild.topic_prefix``, else the first audited topic's.

    Raises:
        ConfigError: neither is there.
    """
    if settings.mirror.rebuild.topic_prefix:
        return settings.mirror.rebuild.topic_prefix
    for topic in topics:
        try:
            return signal_target(topic, settings.mirror.rebuild)[1]
        except Exception:  # noqa: BLE001, S112 - a topic without a prefix: the next one may have it
            continue
    msg = "the audit finds Debezium's topic prefix in no audited topic: set mirror.rebuild.topic_prefix"
    raise ConfigError(msg)
