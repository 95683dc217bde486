"""``PostgresReader.current_position``: a logical-decoding message's LSN, so a quiet source's slot can pass it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from connector.readback.database_postgres import POSITION_MESSAGE_PREFIX, PostgresReader


class Cursor:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.row: tuple[str] | None = None

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, query: str, params: Any = None) -> None:
        self.conn.queries.append((query, params))
        if "pg_logical_emit_message" in query:
            if self.conn.refuse:
                msg = "permission denied for function pg_logical_emit_message"
                raise psycopg.errors.InsufficientPrivilege(msg)
            self.row = ("0/1A35360",)
        else:
            self.row = ("0/1A35390",)

    def fetchone(self) -> tuple[str] | None:
        return self.row


class Connection:
    def __init__(self, *, refuse: bool) -> None:
        self.refuse = refuse
        self.queries: list[tuple[str, Any]] = []

    def cursor(self) -> Cursor:
        return Cursor(self)


def reader(conn: Connection) -> PostgresReader:
    source = PostgresReader("postgresql://reader@db/shop")
    source._conn = conn  # type: ignore[assignment]
    return source


def test_the_position_is_a_message_the_slot_will_decode() -> None:
    conn = Connection(refuse=False)
    assert reader(conn).current_position() == "0/1A35360"
    assert conn.queries == [("SELECT pg_logical_emit_message(true, %s, '')::text", (POSITION_MESSAGE_PREFIX,))]


def test_without_the_right_to_write_it_the_wal_position_said_once(caplog: pytest.LogCaptureFixture) -> None:
    conn = Connection(refuse=True)
    source = reader(conn)
    assert source.current_position() == "0/1A35390"
    assert source.current_position() == "0/1A35390"
    assert sum("pg_logical_emit_message" in q for q, _ in conn.queries) == 1
    assert [r.message for r in caplog.records if "heartbeat.action.query" in r.message], caplog.text


def test_a_keyless_table_compares_as_a_multiset_in_the_forms_values_are_mirrored_in() -> None:
    """Decimals and times of day mirrored as text compare by their value; identical rows count one by one."""
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa

    from connector.readback.database_postgres import compare_rows

    def source() -> dict[str, Any]:
        at = dt.datetime(2026, 1, 2, 4, 4, 5, 123456, tzinfo=dt.timezone(dt.timedelta(hours=1)))
        return {"n": Decimal("1.50"), "t": dt.time(1, 2, 3), "at": at, "j": {"b": 1, "a": 2}, "b": memoryview(b"\x01")}

    row = {"n": "1.5", "t": "01:02:03", "at": dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)}
    row |= {"j": '{"a": 2, "b": 1}', "b": b"\x01"}
    types = pa.schema([("n", pa.string()), ("t", pa.string()), ("at", pa.timestamp("us", "UTC")), ("j", pa.string())])
    mirror = pa.Table.from_pylist([row, row], schema=types.append(pa.field("b", pa.binary())))
    assert compare_rows("public.logs", [], [source(), source()], mirror).ok
    one = compare_rows("public.logs", [], [source(), source(), source()], mirror)
    assert (one.source_rows, one.mirror_rows, one.matching, one.missing, one.extra) == (3, 2, 2, 1, 0)
    assert compare_rows("public.logs", [], [], mirror).extra == 2
