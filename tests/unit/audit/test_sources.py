"""The audit's reader by the source URL's scheme, and what a MySQL/MariaDB source needs for its lag gate."""

from __future__ import annotations

import pytest

from connector.audit.signal import key_filter, sql_literal
from connector.audit.sources import audit_reader, mark_prefix
from connector.config import ConnectorSettings
from connector.errors import ConfigError
from connector.readback.database_postgres import PostgresReader
from connector.readback.mysql_ranges import MySqlRangedReader

TOPICS = ["mariadb1.mirror.items"]


def settings(**audit: object) -> ConnectorSettings:
    return ConnectorSettings.model_validate(
        {"source": {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9"}, "mirror": {"audit": audit}}
    )


@pytest.mark.parametrize("url", ["postgresql://u:p@h/db", "postgres://u:p@h/db"])
def test_a_postgres_url_is_read_by_the_postgres_reader(url: str) -> None:
    assert isinstance(audit_reader(url, settings(), TOPICS), PostgresReader)


@pytest.mark.parametrize("url", ["mysql://u:p@h:3306/mirror", "mariadb://u:p@h/mirror", "MySQL://u:p@h/mirror"])
def test_a_mysql_or_mariadb_url_is_read_by_the_ranged_mysql_reader(url: str) -> None:
    reader = audit_reader(url, settings(signal_table="debezium.debezium_signal"), TOPICS)
    assert isinstance(reader, MySqlRangedReader)


def test_a_mysql_source_without_the_signalling_table_is_refused_with_the_setting_named() -> None:
    with pytest.raises(ConfigError, match=r"mirror\.audit\.signal_table is required"):
        audit_reader("mysql://u:p@h/mirror", settings(), TOPICS)


def test_the_signalling_table_must_be_database_dot_table() -> None:
    with pytest.raises(Exception, match=r"database\.table"):
        audit_reader("mysql://u:p@h/mirror", settings(signal_table="debezium_signal"), TOPICS)


def test_the_topic_prefix_comes_from_the_rebuild_setting_else_the_audited_topics() -> None:
    assert mark_prefix(settings(), TOPICS) == "mariadb1"
    configured = ConnectorSettings.model_validate({"mirror": {"rebuild": {"topic_prefix": "srv.one"}}})
    assert mark_prefix(configured, ["srv.one.mirror.items"]) == "srv.one"
    with pytest.raises(ConfigError, match="topic_prefix"):
        mark_prefix(settings(), [])


def test_keyed_rereads_are_written_in_mysqls_sql() -> None:
    assert key_filter(["id"], [(1,), (2,)], mysql=True) == "`id` IN (1, 2)"
    assert key_filter(["a", "b`c"], [("x'y", 1)], mysql=True) == "(`a`, `b``c`) IN (('x''y', 1))"
    assert sql_literal("a\\b", mysql=True) == "'a\\\\b'"
    assert sql_literal(b"\x01\xff", mysql=True) == "X'01ff'"
    assert key_filter(["id"], [(1,)]) == '"id" IN (1)'  # Postgres's unchanged
