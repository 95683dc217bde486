"""Which captured tables run publishes at start without an event, and in which types (issue 55)."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest

from connector.config import ConnectorSettings
from connector.debezium.catalogue_types import CatalogueColumn
from connector.publish.ledger_state import LedgerState, TableState
from connector.readback.source_catalogue import CatalogueTable
from connector.stream.empty_tables import NOT_CONFIGURED, captured, captured_empty_tables, find_empty_tables

POSTGRES = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "topic.prefix": "db1"}


def table(schema: str, name: str, keys: tuple[str, ...] = ("id",)) -> CatalogueTable:
    columns = [CatalogueColumn("id", "integer"), CatalogueColumn("amount", "numeric", 12, 2)]
    return CatalogueTable(schema, name, columns, list(keys))


def settings(**source: object) -> ConnectorSettings:
    return ConnectorSettings.model_validate({"source": {"bootstrap_servers": "k:9092", **source}})


@pytest.mark.parametrize(
    ("config", "schema", "name", "expected"),
    [
        ({}, "public", "a", True),
        ({"schema.include.list": "public,sales"}, "sales", "a", True),
        ({"schema.include.list": "public"}, "debezium", "signal", False),
        ({"schema.exclude.list": "debezium"}, "debezium", "signal", False),
        ({"table.include.list": r"public\.a.*"}, "public", "abc", True),
        ({"table.include.list": r"public\.a"}, "public", "ab", False),  # whole names only
        ({"table.exclude.list": r"public\.b"}, "public", "B", False),  # case-insensitive
        (
            {"connector.class": "io.debezium.connector.mariadb.MariaDbConnector", "database.include.list": "shop"},
            "shop",
            "a",
            True,
        ),  # fmt: skip
        (
            {"connector.class": "io.debezium.connector.mysql.MySqlConnector", "database.include.list": "shop"},
            "debezium",
            "a",
            False,
        ),  # fmt: skip
    ],
)
def test_debeziums_include_and_exclude_lists_decide_what_is_captured(
    config: dict[str, str], schema: str, name: str, expected: bool
) -> None:
    assert captured({**POSTGRES, **config}, schema, name) is expected


def test_only_captured_tables_the_job_reads_without_a_topic_or_ledger_entry_are_published() -> None:
    catalogue = [table("public", "empty"), table("public", "busy"), table("public", "known"), table("other", "x")]
    known = LedgerState(tables={"public.known": TableState(folder="public.schema/known")})
    found = captured_empty_tables(
        settings(topics=r"db1\.public\..*"),
        {"c": POSTGRES},
        catalogue,
        "postgres",
        known,
        topics_now={"db1.public.busy"},  # Debezium created its topic: its events publish it
    )
    assert [t.ref.id for t in found] == ["public.empty"]
    assert found[0].topic == "db1.public.empty"
    assert found[0].key_columns == ("id",)
    assert found[0].schema == pa.schema([pa.field("id", pa.int32()), pa.field("amount", pa.decimal128(12, 2))])


def test_a_keyless_table_has_no_key_and_a_declared_decimal_keeps_its_declared_type() -> None:
    mirror = {"decimal_columns": {"public.log.amount": "20,4"}}
    config = ConnectorSettings.model_validate({"source": {"bootstrap_servers": "k:9092"}, "mirror": mirror})
    found = captured_empty_tables(config, {"c": POSTGRES}, [table("public", "log", ())], "postgres", LedgerState())
    assert found[0].key_columns == ()
    assert found[0].schema.field("amount").type == pa.decimal128(20, 4)


def test_without_the_settings_one_info_line_says_what_to_set(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="connector.stream.empty_tables"):
        assert find_empty_tables(settings(), LedgerState()) == []
    assert [r.getMessage() for r in caplog.records] == [NOT_CONFIGURED]
