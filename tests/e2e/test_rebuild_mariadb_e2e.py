"""A table rebuild on the second real source: MariaDB → Debezium MariaDB → Kafka → connector.

``ALTER TABLE … MODIFY qty BIGINT`` stops the table; the automatic rebuild deletes its folder, waits, and
asks Debezium's MariaDB connector (Kafka signal channel, signalling table in database ``debezium``) for an
incremental snapshot, while the test keeps writing to the table and to another one. ``verify`` against
MariaDB must then find zero differences in both.
"""

from __future__ import annotations

import random
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from connector.oracle.verify import verify
from connector.publish.ledger import BatchLedger
from connector.publish.lifecycle import Phase
from connector.storage import LocalStorage
from tests.e2e.mirror_source import mariadb_source, wait_for_watermark
from tests.e2e.test_rebuild_e2e import WAIT_S, Connector, Notifications, now_ms, write_config

pytestmark = pytest.mark.e2e

ROWS = 1500
TABLE, OTHER = "rb_maria", "rb_maria_other"


def write_some(conn: Any, rng: random.Random, ops: int) -> None:
    with conn.cursor() as cursor:
        for _ in range(ops):
            key = rng.randint(1, ROWS + 100)
            kind = rng.random()
            if kind < 0.6:
                cursor.execute(f"UPDATE {TABLE} SET qty = qty + 1, note = %s WHERE id = %s", (uuid.uuid4().hex, key))
            elif kind < 0.75:
                cursor.execute(f"DELETE FROM {TABLE} WHERE id = %s", (key,))
            elif kind < 0.9:
                cursor.execute(
                    f"INSERT INTO {TABLE} VALUES (%s, %s, 'new') ON DUPLICATE KEY UPDATE note = 'again'", (key, key)
                )
            else:
                cursor.execute(f"UPDATE {OTHER} SET v = %s WHERE id = %s", (uuid.uuid4().hex, rng.randint(1, 50)))


def test_mariadb_type_change_is_rebuilt_through_an_incremental_snapshot(
    mariadb_stack: dict[str, str], mariadb: Any, tmp_path: Path
) -> None:
    table_id = f"mirror.{TABLE}"
    with mariadb.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, qty int NOT NULL, note varchar(64))")
        cursor.execute(f"CREATE TABLE {OTHER} (id int PRIMARY KEY, v varchar(64))")
        cursor.execute(f"INSERT INTO {TABLE} SELECT seq, seq * 10, CONCAT('row ', seq) FROM seq_1_to_{ROWS}")
        cursor.execute(f"INSERT INTO {OTHER} SELECT seq, CONCAT('v', seq) FROM seq_1_to_50")
    prefix = mariadb_stack["topic_prefix"]
    topics = rf"{prefix}\.mirror\.({TABLE}|{OTHER})"
    notifications = Notifications(mariadb_stack)
    connector = Connector(mariadb_stack, tmp_path, write_config(tmp_path, automatic=True, wait_s=3), topics)
    rng = random.Random(3)
    try:
        connector.start()
        connector.wait_for("initial rows", lambda t: t.rows_published >= ROWS, table_id)
        before = now_ms()
        with mariadb.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {TABLE} MODIFY qty BIGINT NOT NULL")
            cursor.execute(f"UPDATE {TABLE} SET qty = qty + 5000000000 WHERE id <= 10")
        connector.wait_for("snapshot request", lambda t: t.lifecycle.phase == "snapshot-requested", table_id)
        deadline = time.monotonic() + WAIT_S
        while notifications.incremental("COMPLETED", before) is None:
            assert time.monotonic() < deadline, f"no COMPLETED notification: {notifications.seen}"
            write_some(mariadb, rng, 10)
        started = notifications.incremental("STARTED", before)
        assert started is not None
        wait_for_watermark(mariadb_source(mariadb_stack, mariadb))
        deadline = time.monotonic() + WAIT_S
        while True:
            reports = verify(mariadb_stack["mariadb"], str(tmp_path / "lz"), [table_id, f"mirror.{OTHER}"])
            if len(reports) == 2 and all(r.ok and r.source_rows == r.mirror_rows for r in reports):
                break
            assert time.monotonic() < deadline, "\n".join(r.line() + "\n" + "\n".join(r.examples) for r in reports)
            time.sleep(3)
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()
        notifications.close()
    ledger = BatchLedger(LocalStorage(tmp_path / "cp")).state.tables
    assert ledger[f"mirror.{OTHER}"].lifecycle.phase == Phase.RUNNING
    assert (
        ledger[table_id].lifecycle.phase == "snapshot-requested" and ledger[table_id].lifecycle.automatic_rebuilds == 1
    )
    assert f"asked Debezium ({prefix}) for an incremental snapshot of mirror.{TABLE}" in connector.log()
