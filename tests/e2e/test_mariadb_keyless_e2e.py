"""A table without a primary key on the MariaDB stack (issue 55): a MariaDB row image carries an update's rows.

Named to sort after ``test_mariadb_e2e``: its tests mirror every table of the shared MariaDB stack, so the tables
this module creates (and the topics Debezium keeps after they are dropped) must come later (tests/e2e/conftest.py).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import pytest

from connector.publish.ledger_state import TableState
from connector.publish.lifecycle import Phase
from tests.e2e.test_keyless_e2e import write_config
from tests.e2e.test_rebuild_e2e import Connector
from tests.support.kafka import run_connector

pytestmark = pytest.mark.e2e


def test_mariadb_a_keyless_table_keeps_its_duplicates_and_an_update_rebuilds_it_exact(
    mariadb_stack: dict[str, str], mariadb: Any, tmp_path: Path
) -> None:
    """The same on the second source: a MariaDB row image (binlog_row_image FULL) carries the update's rows."""
    table, other = "kl_maria", "kl_maria_other"
    with mariadb.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {table} (who varchar(16), n int, amount decimal(10, 2), at datetime(6))")
        cursor.execute(f"CREATE TABLE {other} (id int PRIMARY KEY, v varchar(16))")
        for _ in range(2):  # every row twice
            cursor.execute(
                f"INSERT INTO {table} SELECT CONCAT('u', seq % 5), seq % 3, seq * 1.25, "
                f"'2026-01-02 03:04:05.123456' + INTERVAL seq MINUTE FROM seq_1_to_30"
            )
        cursor.execute(f"INSERT INTO {other} SELECT seq, CONCAT('v', seq) FROM seq_1_to_10")
    table_id, other_id = f"mirror.{table}", f"mirror.{other}"
    topics = rf"{re.escape(mariadb_stack['topic_prefix'])}\.mirror\.({table}|{other})"
    connector = Connector(mariadb_stack, tmp_path, write_config(tmp_path), topics)
    connector.start()
    try:
        connector.wait_for("the snapshot", lambda t: t.rows_published == 60, table_id)
        with mariadb.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET who = 'changed' WHERE n = 0")
            cursor.execute(f"INSERT INTO {other} SELECT seq, 'late' FROM seq_11_to_20")

        def rebuilt(state: TableState) -> bool:
            return state.lifecycle.phase is Phase.SNAPSHOT_REQUESTED and not state.snapshot_expected

        connector.wait_for("the rebuild's snapshot", rebuilt, table_id)
        connector.wait_for("the rebuilt rows", lambda t: t.rows_published == 60, table_id)
        connector.wait_for("the other table", lambda t: t.rows_published == 20, other_id)
        assert connector.stop(signal.SIGTERM) == 0
    finally:
        connector.kill_if_running()
    lines = [line for line in connector.log().splitlines() if f"an update of table {table_id}" in line]
    assert len(lines) == 1, lines
    source = mariadb_stack["mariadb"]
    result = run_connector("verify", "--source", source, "--landing-zone", str(tmp_path / "lz"), "--tables", table_id)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{table_id}: source=60 mirror=60 matching=60 missing=0 extra=0" in result.stdout
    with mariadb.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
        cursor.execute(f"DROP TABLE IF EXISTS {other}")
