"""Resets the source does on its own, healed with default settings (issue 42 (c), (d)): TRUNCATE, and a lost slot.

One fresh Postgres stack for the module (the second test deletes Debezium's connector and drops its slot), one
connector run across both tests, default mirror settings but ``rebuild.wait_s`` (Fabric's status is not
configured here, so a rebuild waits that long for Fabric to drop the table):

- (d) a TRUNCATE inside a transaction followed by inserts, and a plain TRUNCATE: each table is rebuilt
  (``truncate_policy: rebuild``, the default), never stopped, and ends exact;
- (c) Debezium's connector deleted, its replication slot dropped, rows deleted, updated and inserted in both
  tables, then a connector with a new slot and the same topic prefix registered: Debezium takes a new initial
  snapshot into the same topics; every table gets one line saying so, is rebuilt, and ``verify`` finds it exact
  (the rows deleted meanwhile gone).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from connector.publish.lifecycle import Phase
from tests.e2e.conftest import _ctl, _stack_up, _state_dir
from tests.e2e.test_rebuild_e2e import Connector, wait_until_mirror_equals_source
from tests.support.kafka_connect import connect_request

pytestmark = pytest.mark.e2e

A, B = "public.reset_a", "public.reset_b"
INIT_SQL = f"""
CREATE TABLE {A} (id int PRIMARY KEY, v text NOT NULL);
CREATE TABLE {B} (id int PRIMARY KEY, v text NOT NULL);
INSERT INTO {A} SELECT g, 'a' || g FROM generate_series(1, 300) g;
INSERT INTO {B} SELECT g, 'b' || g FROM generate_series(1, 200) g;
"""
DEADLINE_S = 240.0


@pytest.fixture(scope="module")
def reset_stack() -> Iterator[dict[str, str]]:
    with _state_dir("e2e-resets-") as state_dir, _stack_up(state_dir, init_sql=INIT_SQL) as values:
        yield values


@pytest.fixture(scope="module")
def running(reset_stack: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Connector]:
    tmp = tmp_path_factory.mktemp("resets")
    config = tmp / "config.yaml"
    config.write_text("mirror:\n  rebuild:\n    wait_s: 1\n")  # every other setting its default
    connector = Connector(reset_stack, tmp, config)
    connector.start()
    try:
        wait_until_mirror_equals_source(reset_stack, tmp, connector)
        yield connector
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()


def lines_with(connector: Connector, tid: str, text: str) -> list[str]:
    """The log's lines about ``tid`` (``table <tid>: ...``) that hold ``text``."""
    return [line for line in connector.log().splitlines() if f"table {tid}: " in line and text in line]


def wait_rebuilt(connector: Connector, tid: str, text: str, since: float) -> None:
    """Until the line beginning ``tid``'s rebuild (holding ``text``) is logged and the table, rebuilt after
    ``since`` (epoch seconds, before the reset was made), runs again."""
    deadline = time.monotonic() + DEADLINE_S
    while not lines_with(connector, tid, text):
        assert connector.process is not None and connector.process.poll() is None, connector.log()[-4000:]
        assert time.monotonic() < deadline, f"{tid}: no line with {text!r}\n{connector.log()[-4000:]}"
        time.sleep(0.5)
    connector.wait_for(
        "the rebuilt table running",
        lambda t: t.lifecycle.phase is Phase.RUNNING and (t.lifecycle.last_rebuild_at or 0) >= since,
        tid,
    )


def assert_never_stopped(connector: Connector) -> None:
    stopped = [line for line in connector.log().splitlines() if " stopped: " in line]
    assert not stopped, stopped
    for tid in (A, B):
        table = connector.table(tid)
        assert table is not None and table.lifecycle.phase is not Phase.STOPPED, table


def test_truncates_rebuild_the_tables_exact_and_stop_none(reset_stack: dict[str, str], running: Connector) -> None:
    since = time.time()
    with psycopg.connect(reset_stack["postgres"], autocommit=True) as conn:
        with conn.transaction():  # a nightly reload: emptied and refilled in one transaction
            conn.execute(f"TRUNCATE {A}")
            conn.execute(f"INSERT INTO {A} SELECT g, 'reloaded' || g FROM generate_series(1000, 1150) g")
        conn.execute(f"TRUNCATE {B}")
    for tid in (A, B):
        wait_rebuilt(running, tid, "the source table was truncated", since)
    with psycopg.connect(reset_stack["postgres"], autocommit=True) as conn:
        conn.execute(f"INSERT INTO {B} VALUES (7, 'after the truncate')")
    wait_until_mirror_equals_source(reset_stack, running.tmp, running)
    for tid in (A, B):
        (line,) = lines_with(running, tid, "the source table was truncated")  # one line per table, naming where
        assert f"dbserver1.{tid}[0]@" in line, line
    assert_never_stopped(running)


def drop_slots(dsn: str) -> list[str]:
    """Drop every replication slot once no one streams from it (Connect stops the deleted connector's task)."""
    deadline = time.monotonic() + DEADLINE_S
    with psycopg.connect(dsn, autocommit=True) as conn:
        slots = [r[0] for r in conn.execute("SELECT slot_name FROM pg_replication_slots").fetchall()]
        while conn.execute("SELECT count(*) FROM pg_replication_slots WHERE active").fetchone() != (0,):
            assert time.monotonic() < deadline, "Debezium's slot still active"
            time.sleep(0.5)
        for slot in slots:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return slots


def test_a_lost_slot_and_debeziums_new_snapshot_rebuild_every_table_exact(
    reset_stack: dict[str, str], running: Connector
) -> None:
    since = time.time()
    assert connect_request("DELETE", f"{reset_stack['connect']}/connectors/{reset_stack['connector']}") in (200, 204)
    assert drop_slots(reset_stack["postgres"]), "no slot to drop"
    with psycopg.connect(reset_stack["postgres"], autocommit=True) as conn:  # never streamed: the slot is gone
        conn.execute(f"DELETE FROM {A} WHERE id % 4 = 0")
        conn.execute(f"DELETE FROM {B} WHERE id % 3 = 0")
        conn.execute(f"UPDATE {A} SET v = 'changed' WHERE id % 5 = 1")
        conn.execute(f"INSERT INTO {B} SELECT g, 'new' || g FROM generate_series(500, 540) g")
    _ctl(Path(reset_stack["state_dir"]))("register-connector", "mirror-source-2", reset_stack["topic_prefix"], "json")
    for tid in (A, B):
        wait_rebuilt(running, tid, "Debezium took a new snapshot", since)
    wait_until_mirror_equals_source(reset_stack, running.tmp, running)
    for tid in (A, B):
        lines = lines_with(running, tid, "Debezium took a new snapshot")
        assert len(lines) == 1 and f"dbserver1.{tid}[0]@" in lines[0], lines
    assert_never_stopped(running)
