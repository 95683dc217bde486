"""The audit's keyed re-read: Debezium's incremental snapshot signal with additional-conditions."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import orjson

from connector.audit.loop import _committed_past, audit_targets
from connector.audit.signal import key_filter, keyed_snapshot_value, sql_literal
from connector.publish.ledger_state import BatchSource, LedgerState, TableState
from connector.publish.lifecycle import Lifecycle, Phase


def test_literals() -> None:
    assert sql_literal(5) == "5"
    assert sql_literal(Decimal("1.50")) == "1.50"
    assert sql_literal("O'Brien") == "'O''Brien'"
    assert sql_literal(dt.date(2026, 1, 2)) == "'2026-01-02'"
    assert sql_literal(True) == "TRUE"


def test_filters() -> None:
    assert key_filter(["id"], [(1,), (2,)]) == '"id" IN (1, 2)'
    assert key_filter(["a", "b"], [("x", 1)]) == '("a", "b") IN ((\'x\', 1))'


def test_the_signal_names_the_collection_and_its_condition() -> None:
    value = orjson.loads(keyed_snapshot_value("public.items", '"id" IN (3)', "s1"))
    assert value == {
        "id": "s1",
        "type": "execute-snapshot",
        "data": {
            "data-collections": ["public\\.items"],
            "type": "incremental",
            "additional-conditions": [{"data-collection": "public\\.items", "filter": '"id" IN (3)'}],
        },
    }


def test_targets_are_running_tables_with_keys_and_a_topic() -> None:
    running = TableState("public.schema/a", key_columns=("id",), topic="p.public.a", schema="x")
    tables = {
        "public.a": running,
        "public.b": TableState("public.schema/b", key_columns=("id",), topic=None, schema="x"),
        "public.c": TableState(
            "public.schema/c", key_columns=("id",), topic="p.public.c", schema="x", lifecycle=Lifecycle(Phase.STOPPED)
        ),
    }
    state = LedgerState(tables=tables)
    assert [t.id for t in audit_targets(state, [])] == ["public.a"]
    assert audit_targets(state, ["public.c"]) == []


def test_committed_past_reads_sparks_end_offsets() -> None:
    state = LedgerState(sources=(BatchSource(3, ('{"batchWatermarkMs":0}', '{"p.public.a":{"0":42}}')),))
    assert _committed_past(state, "p.public.a", {0: 42})
    assert not _committed_past(state, "p.public.a", {0: 43})
    assert _committed_past(state, "p.public.a", {1: 0})
