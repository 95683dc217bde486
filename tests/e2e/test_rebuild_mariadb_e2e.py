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

from connector.publish.ledger import BatchLedger
from connector.publish.lifecycle import Phase
from connector.storage import LocalStorage
from tests.e2e.mirror_source import mariadb_source, wait_for_watermark
from tests.e2e.test_rebuild_e2e import (
    WAIT_S,
    Connector,
    Notifications,
    now_ms,
    wait_until_tables_exact,
    write_config,
)

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
    connector = Connector(mariadb_stack, tmp_path, write_config(tmp_path, automatic=True, wait_s=1), topics)
    rng = random.Random(3)
    try:
        connector.start()
        connector.wait_for("initial rows", lambda t: t.rows_published >= ROWS, table_id)
        before = now_ms()
        with mariadb.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {TABLE} MODIFY qty BIGINT NOT NULL")
            cursor.execute(f"UPDATE {TABLE} SET qty = qty + 5000000000 WHERE id <= 10")
        connector.wait_for(
            "snapshot request",
            lambda t: t.lifecycle.phase == "snapshot-requested" or t.lifecycle.snapshot is not None,
            table_id,
        )
        deadline = time.monotonic() + WAIT_S
        while notifications.incremental("COMPLETED", before) is None:
            assert time.monotonic() < deadline, f"no COMPLETED notification: {notifications.seen}"
            write_some(mariadb, rng, 10)
        started = notifications.incremental("STARTED", before)
        assert started is not None
        wait_for_watermark(mariadb_source(mariadb_stack, mariadb))
        wait_until_tables_exact(mariadb_stack["mariadb"], tmp_path / "lz", [table_id, f"mirror.{OTHER}"])
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()
        notifications.close()
    ledger = BatchLedger(LocalStorage(tmp_path / "cp")).state.tables
    assert ledger[f"mirror.{OTHER}"].lifecycle.phase == Phase.RUNNING
    assert (
        ledger[table_id].lifecycle.phase in ("snapshot-requested", "running")
        and ledger[table_id].lifecycle.automatic_rebuilds == 1
    )
    assert f"asked Debezium ({prefix}) for an incremental snapshot of mirror.{TABLE}" in connector.log()


# -- schema changes (issue 36) on MariaDB: the DDL acted on from the schema change topic ---------------------------

SC_ROWS = 300
SC_TABLES = ("sc_default", "sc_untouched", "sc_nullable", "sc_drop", "sc_drop_nn", "sc_rename", "sc_type", "sc_new")


def create_schema_change_tables(conn: Any) -> None:
    rows = f"seq_1_to_{SC_ROWS}"
    with conn.cursor() as cursor:
        for ddl, insert in (
            (
                "sc_default (id int PRIMARY KEY, label varchar(32), qty int)",
                f"SELECT seq, CONCAT('l', seq), seq FROM {rows}",
            ),
            ("sc_untouched (id int PRIMARY KEY, label varchar(32))", f"SELECT seq, CONCAT('l', seq) FROM {rows}"),
            ("sc_nullable (id int PRIMARY KEY, label varchar(32))", f"SELECT seq, CONCAT('l', seq) FROM {rows}"),
            (
                "sc_drop (id int PRIMARY KEY, label varchar(32), legacy_code varchar(32))",
                f"SELECT seq, CONCAT('l', seq), CONCAT('c', seq) FROM {rows}",
            ),
            (
                "sc_drop_nn (id int PRIMARY KEY, label varchar(32), code varchar(8) NOT NULL)",
                f"SELECT seq, CONCAT('l', seq), 'c' FROM {rows}",
            ),
            ("sc_rename (id int PRIMARY KEY, label varchar(32))", f"SELECT seq, CONCAT('l', seq) FROM {rows}"),
            ("sc_type (id int PRIMARY KEY, qty int NOT NULL)", f"SELECT seq, seq FROM {rows}"),
        ):
            cursor.execute(f"CREATE TABLE {ddl}")
            cursor.execute(f"INSERT INTO {ddl.split(' ')[0]} {insert}")


def migrate(conn: Any) -> None:
    """The migration; every altered table but ``sc_untouched`` is changed again after it."""
    with conn.cursor() as cursor:
        cursor.execute("ALTER TABLE sc_default ADD COLUMN region varchar(8) NOT NULL DEFAULT 'EU'")
        cursor.execute("ALTER TABLE sc_untouched ADD COLUMN region varchar(8) NOT NULL DEFAULT 'EU'")
        cursor.execute("ALTER TABLE sc_nullable ADD COLUMN note varchar(32) NULL")
        cursor.execute("ALTER TABLE sc_drop DROP COLUMN legacy_code")
        cursor.execute("ALTER TABLE sc_drop_nn DROP COLUMN code")
        cursor.execute("ALTER TABLE sc_rename RENAME COLUMN label TO title")
        cursor.execute("ALTER TABLE sc_type MODIFY qty BIGINT NOT NULL")
        cursor.execute("CREATE TABLE sc_new (id int PRIMARY KEY, v varchar(32))")
        cursor.execute("INSERT INTO sc_new SELECT seq, CONCAT('v', seq) FROM seq_1_to_20")
        cursor.execute("UPDATE sc_default SET qty = qty + 1 WHERE id <= 5")
        cursor.execute("UPDATE sc_nullable SET note = 'n' WHERE id <= 5")
        cursor.execute("UPDATE sc_drop SET label = 'x' WHERE id <= 5")
        cursor.execute("UPDATE sc_drop_nn SET label = 'x' WHERE id <= 5")
        cursor.execute("UPDATE sc_rename SET title = 't' WHERE id <= 5")
        cursor.execute("UPDATE sc_type SET qty = qty + 5000000000 WHERE id <= 5")


def test_mariadb_schema_changes_mirror_exactly_with_default_settings_and_a_kill_9(
    mariadb_stack: dict[str, str], mariadb: Any, tmp_path: Path
) -> None:
    """The Postgres test's changes on MariaDB, plus a table altered (ADD COLUMN … DEFAULT) and never changed
    again: the DDL in Debezium's schema change topic heals it. The connector is SIGKILLed once while tables heal."""
    ids = [f"mirror.{t}" for t in SC_TABLES]
    prefix = mariadb_stack["topic_prefix"]
    config = tmp_path / "config.yaml"
    config.write_text("mirror:\n  rebuild:\n    wait_s: 1\n")  # no Fabric status here: wait 1 s, not 300
    # The tables' topics, and the schema change topic (named by the topic prefix), as the stack's topics regex has;
    # anchored, since Spark's subscribePattern finds a pattern anywhere in a topic's name.
    connector = Connector(mariadb_stack, tmp_path, config, rf"^{prefix}(\.mirror\.sc_.*)?$")
    rng = random.Random(36)
    try:
        create_schema_change_tables(mariadb)
        connector.start()
        for tid in ids[:-1]:
            connector.wait_for("initial rows", lambda t: t.rows_published >= SC_ROWS, tid)
        migrate(mariadb)
        connector.wait_for("rebuild", lambda t: t.lifecycle.phase != Phase.RUNNING, "mirror.sc_drop")
        assert connector.stop(signal.SIGKILL) == -signal.SIGKILL
        connector.start()
        with mariadb.cursor() as cursor:
            for _ in range(20):
                key = rng.randint(1, SC_ROWS)
                cursor.execute("UPDATE sc_default SET qty = qty + 1 WHERE id = %s", (key,))
                cursor.execute("DELETE FROM sc_rename WHERE id = %s", (key,))
        for tid in ("mirror.sc_default", "mirror.sc_untouched", "mirror.sc_drop", "mirror.sc_rename", "mirror.sc_type"):
            connector.wait_for(
                "snapshot request",
                lambda t: t.lifecycle.phase == "snapshot-requested" or t.lifecycle.snapshot is not None,
                tid,
            )
        wait_for_watermark(mariadb_source(mariadb_stack, mariadb))
        wait_until_tables_exact(mariadb_stack["mariadb"], tmp_path / "lz", ids)
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()
    ledger = BatchLedger(LocalStorage(tmp_path / "cp")).state.tables
    assert not [tid for tid in ids if ledger[tid].lifecycle.skips_events], {t: ledger[t].lifecycle for t in ids}
    assert ledger["mirror.sc_nullable"].lifecycle.phase == Phase.RUNNING
    # Healed from the DDL alone: no row of it changed after the ALTER.
    assert "schema change (column added" in (ledger["mirror.sc_untouched"].lifecycle.reason or "")
    assert "Traceback" not in connector.log()
