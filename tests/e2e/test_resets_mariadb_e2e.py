"""A lost binlog position on MariaDB healed with default settings (issue 42 (c), the MariaDB variant).

One fresh MariaDB stack for the module (purging the binlog past Debezium's position breaks it for other tests), its
Debezium connector set to ``snapshot.mode: when_needed``, default mirror settings but ``rebuild.wait_s`` (Fabric's
status is not configured here) and the connectors' status read from Kafka Connect every second. Both tables are
mirrored and changed by streamed events; then Debezium's connector is stopped (Kafka Connect's ``stop``: its task
and binlog reader end, its offsets stay; a pause keeps the reader, which holds its binlog file), rows are deleted,
updated and inserted in both tables, the binlog is flushed and purged up to the newest file, and the connector
resumed. Debezium 3.5.0.Final's MariaDB connector does not see that its GTID position is purged (MariaDB keeps no
``gtid_purged``, so its availability check passes): ``when_needed`` takes no snapshot and the task fails with error
1236 ("Could not find GTID state requested by slave in any binlog files"). The test asserts that, and that the
connector's log says so with Connect's reason, then takes the operator's step (connector stopped, its offsets
deleted through Kafka Connect's offsets API, resumed): with no offsets, ``when_needed`` takes a new initial snapshot
into the same topics. Every table gets one line saying so, is rebuilt, and ``verify`` finds it exact (the rows
deleted meanwhile gone).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import MARIADB_KEYS, _stack_up, _state_dir
from tests.e2e.mirror_source import connect_mariadb
from tests.e2e.test_rebuild_e2e import WAIT_S, Connector, wait_until_tables_exact
from tests.e2e.test_resets_e2e import lines_with, wait_rebuilt
from tests.support.kafka_connect import connect_json

pytestmark = pytest.mark.e2e

A, B = "rs_a", "rs_b"
IDS = [f"mirror.{A}", f"mirror.{B}"]
INIT_SQL = f"""
CREATE TABLE {A} (id int PRIMARY KEY, v varchar(32) NOT NULL);
CREATE TABLE {B} (id int PRIMARY KEY, v varchar(32) NOT NULL);
INSERT INTO {A} SELECT seq, CONCAT('a', seq) FROM seq_1_to_300;
INSERT INTO {B} SELECT seq, CONCAT('b', seq) FROM seq_1_to_200;
"""
NEW_SNAPSHOT = "Debezium took a new snapshot"


def connect_call(stack: dict[str, str], method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One call to the stack's Kafka Connect REST API on its connector; the answer's JSON (``None`` when empty)."""
    return connect_json(method, f"{stack['connect']}/connectors/{stack['connector']}{path}", body)


def failed_task_trace(stack: dict[str, str]) -> str:
    """Until the connector's task has FAILED; its stack trace."""
    deadline = time.monotonic() + WAIT_S
    while True:
        tasks = connect_call(stack, "GET", "/status")["tasks"]
        if tasks and tasks[0]["state"] == "FAILED":
            return str(tasks[0].get("trace", ""))
        assert time.monotonic() < deadline, f"the task did not fail: {tasks}"
        time.sleep(0.5)


def wait_log_line(connector: Connector, text: str) -> str:
    """Until the connector's log has a line with ``text``; that line."""
    deadline = time.monotonic() + WAIT_S
    while True:
        lines = [line for line in connector.log().splitlines() if text in line]
        if lines:
            return lines[0]
        assert time.monotonic() < deadline, f"no line with {text!r}: {connector.log()[-3000:]}"
        time.sleep(0.5)


def binlog_readers(conn: Any) -> int:
    """How many replicas (Debezium's binlog reader) read the binlog now."""
    with conn.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM information_schema.PROCESSLIST WHERE command LIKE 'Binlog Dump%'")
        return int(cursor.fetchone()[0])


def wait_binlog_readers(conn: Any, running: bool) -> None:
    """Until Debezium's binlog reader is there (``running``) or gone.

    A replica that disconnected leaves its binlog dump thread waiting for more updates, for about 90 s, until it
    sends the replica something and finds the connection closed: while waiting for it to go, a new binlog file
    (``FLUSH BINARY LOGS``: a rotate event for every dump thread) gives it something to send. A replica still
    connected reads the rotation and stays.
    """
    deadline = time.monotonic() + WAIT_S
    while (binlog_readers(conn) > 0) != running:
        assert time.monotonic() < deadline, f"Debezium's binlog reader {'absent' if running else 'still there'}"
        if not running:
            with conn.cursor() as cursor:
                cursor.execute("FLUSH BINARY LOGS")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def reset_stack() -> Iterator[dict[str, str]]:
    """A fresh MariaDB stack holding only this module's tables; Debezium set to ``snapshot.mode: when_needed``."""
    with (
        _state_dir("e2e-resets-mariadb-") as state_dir,
        _stack_up(state_dir, "--source", "mariadb", init_sql=INIT_SQL, keys=MARIADB_KEYS) as values,
    ):
        config = connect_call(values, "GET", "/config")
        connect_call(values, "PUT", "/config", {**config, "snapshot.mode": "when_needed"})  # restarts the task
        yield values


def purge_binlog(conn: Any) -> list[str]:
    """Start a new binlog file and purge every older one: Debezium's position is gone. The files purged.

    MariaDB keeps a file until its binlog checkpoint (InnoDB's crash recovery may need it) moves past, a moment
    after ``FLUSH BINARY LOGS``: ``PURGE`` skips it with a warning until then, so it is repeated.
    """
    deadline = time.monotonic() + WAIT_S
    with conn.cursor() as cursor:
        cursor.execute("FLUSH BINARY LOGS")
        cursor.execute("SHOW BINARY LOGS")
        files = [row[0] for row in cursor.fetchall()]
        while True:
            cursor.execute("PURGE BINARY LOGS TO %s", (files[-1],))
            cursor.execute("SHOW WARNINGS")
            warnings = cursor.fetchall()
            cursor.execute("SHOW BINARY LOGS")
            if [row[0] for row in cursor.fetchall()] == files[-1:]:
                return files[:-1]
            assert time.monotonic() < deadline, f"the binlog before {files[-1]} was not purged: {warnings}"
            time.sleep(0.5)


def change_meanwhile(conn: Any) -> None:
    """Deletes, updates and inserts Debezium never streams (its position is purged before it reads them)."""
    with conn.cursor() as cursor:
        cursor.execute(f"DELETE FROM {A} WHERE id % 4 = 0")
        cursor.execute(f"DELETE FROM {B} WHERE id % 3 = 0")
        cursor.execute(f"UPDATE {A} SET v = 'changed' WHERE id % 5 = 1")
        cursor.execute(f"INSERT INTO {B} SELECT seq, CONCAT('new', seq) FROM seq_500_to_540")


def test_a_purged_binlog_and_debeziums_new_snapshot_rebuild_every_table_exact(
    reset_stack: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(  # every other setting its default
        "mirror:\n  rebuild:\n    wait_s: 1\n"
        # the failed task must speak: the connector reads its status from Kafka Connect
        f"source:\n  debezium_connect_url: {reset_stack['connect']}\n"
        f"  debezium_connectors: [{reset_stack['connector']}]\n  debezium_status_poll_s: 1\n"
    )
    connector = Connector(reset_stack, tmp_path, config)
    conn = connect_mariadb(reset_stack["mariadb"])
    try:
        connector.start()
        with conn.cursor() as cursor:  # streamed changes: both tables are past their initial load
            cursor.execute(f"UPDATE {A} SET v = 'streamed' WHERE id <= 3")
            cursor.execute(f"DELETE FROM {B} WHERE id = 200")
        for tid in IDS:
            connector.wait_for("a streamed change", lambda t: t.initial_load_ended, tid)
        wait_until_tables_exact(reset_stack["mariadb"], tmp_path / "lz", IDS)
        since = time.time()
        connect_call(reset_stack, "PUT", "/stop")  # pausing would keep its binlog reader
        wait_binlog_readers(conn, running=False)
        change_meanwhile(conn)
        assert purge_binlog(conn), "no binlog file to purge"
        connect_call(reset_stack, "PUT", "/resume")
        # Debezium 3.5's MariaDB connector does not see a purged GTID position (MariaDB keeps no gtid_purged):
        # when_needed takes no snapshot, the task fails (1236). The operator's step: reset its offsets.
        assert "1236" in failed_task_trace(reset_stack)
        name = reset_stack["connector"]
        failed = wait_log_line(connector, f"Debezium connector {name} sends no changes: task 0 FAILED")
        assert "Could not find GTID state requested by slave" in failed, failed  # Connect's reason (1236)
        connect_call(reset_stack, "PUT", "/stop")
        connect_call(reset_stack, "DELETE", "/offsets")
        connect_call(reset_stack, "PUT", "/resume")
        for tid in IDS:
            wait_rebuilt(connector, tid, NEW_SNAPSHOT, since)
        wait_until_tables_exact(reset_stack["mariadb"], tmp_path / "lz", IDS)
        for tid in IDS:
            lines = lines_with(connector, tid, NEW_SNAPSHOT)
            assert len(lines) == 1 and f"{reset_stack['topic_prefix']}.{tid}[0]@" in lines[0], lines
        assert not [line for line in connector.log().splitlines() if " stopped: " in line]
        wait_log_line(connector, f"Debezium connector {name} runs again")
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()
        conn.close()
