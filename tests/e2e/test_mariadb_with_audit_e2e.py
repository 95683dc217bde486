"""The continuous audit (``mirror.audit``, issue 55) on the MariaDB stack, with the Fabric replicator DOUBLE for Fabric.

MariaDB → real Debezium MariaDB connector → real Kafka → ``run`` (audit on, every 2 s, its lag gate a mark row in
Debezium's signalling table ``debezium.debezium_signal`` seen back in Kafka) → landing zone; the double applies the
files to ``<item>/Tables``. The three faults of the Postgres audit e2e (``test_audit_e2e``), each found within one
round of its own and repaired through the running stream, then an operator's rebuild while rounds run:

1. a row changed behind the connector's back in the double's Delta table → re-read through Debezium (rows);
2. a row deleted in the source whose event never reaches Kafka (``SET sql_log_bin = 0`` for that DELETE: it is not
   written to the binlog) → a delete row with the next batch (rows);
3. a file removed from the landing zone before the double read it → a rebuild;
4. ``rebuild`` while rounds run: the table is not judged until its snapshot completed, then clean.

No other table is written meanwhile: a quiet source opens the gate too (the mark is the change). At the end
``verify --tables-path`` against MariaDB is exact. Named to sort after ``test_mariadb_e2e`` (whose tests mirror every
table of the shared stack, conftest.py), and the table is dropped at the end. The run, the checks and faults 1, 3
and 4 are ``tests.e2e.audit_faults``' (shared with ``test_audit_e2e``); the delete of fault 2 is MariaDB's own.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from connector.landing_zone.layout import TableRef
from tests.e2e import audit_faults as faults
from tests.e2e.mirror_source import connect_mariadb
from tests.support.fabric_replicator_double import FabricReplicatorDouble
from tests.support.kafka import run_connector

pytestmark = pytest.mark.e2e

TABLE = "au_maria"
REF = TableRef("mirror", TABLE)
ROWS = 300
SENTINEL = 1_000_000
SIGNAL_TABLE = "debezium.debezium_signal"  # deploy/local/stack-mariadb.sh SIGNAL_TABLE


def execute(conn: Any, *statements: str) -> None:
    with conn.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def delete_behind_kafkas_back(conn: Any, fabric: FabricReplicatorDouble, run: faults.Run) -> None:
    """(2) A delete that never reaches the binlog, so never Debezium: ``sql_log_bin = 0`` for that statement."""
    since = len(run.text())
    try:
        execute(conn, "SET SESSION sql_log_bin = 0", f"DELETE FROM {TABLE} WHERE id = 7")
    finally:
        execute(conn, "SET SESSION sql_log_bin = 1")
    faults.found_and_repaired(run, since, "rows")
    assert 7 not in faults.held(fabric, REF)


def test_the_audit_finds_and_repairs_on_mariadb(mariadb_stack: dict[str, str], tmp_path: Path) -> None:
    conn = connect_mariadb(mariadb_stack["mariadb"])
    try:
        execute(
            conn,
            f"DROP TABLE IF EXISTS {TABLE}",
            f"CREATE TABLE {TABLE} (id int PRIMARY KEY, name varchar(64), qty int)",
            f"INSERT INTO {TABLE} SELECT seq, CONCAT('item ', seq), seq FROM seq_1_to_{ROWS}",
            f"INSERT INTO {TABLE} VALUES ({SENTINEL}, 'last', 0)",
        )
        fabric = FabricReplicatorDouble(tmp_path / "item", retention_s=30, interval_s=0.5).start()
        run = faults.Run(
            mariadb_stack, tmp_path, fabric, REF,
            source_url=mariadb_stack["mariadb"], settle_s=10, signal_table=SIGNAL_TABLE,
        )  # fmt: skip
        try:
            faults.wait_until("the double to hold the last row", lambda: SENTINEL in faults.held(fabric, REF), run)
            faults.wait_until("a clean audit", lambda: ("clean", "") in run.judged(0), run)
            assert not any(repair for _line, repair in run.judged(0)), "a difference before any fault"
            faults.tamper_with_fabrics_table(fabric, run)
            delete_behind_kafkas_back(conn, fabric, run)
            faults.lose_a_file_before_fabric_took_it(partial(execute, conn), TABLE, fabric, run)
            faults.rebuild_while_rounds_run(partial(execute, conn), TABLE, run, tmp_path / "cp")
        finally:
            run.stop()
            fabric.poll()  # what the run published last
            fabric.stop()
        assert not fabric.stopped and not fabric.errors, (fabric.stopped, fabric.errors)
        exact = run_connector(
            "verify",
            *("--source", mariadb_stack["mariadb"], "--landing-zone", str(fabric.landing_zone)),
            *("--tables-path", str(fabric.tables), "--tables", REF.id),
        )
        assert exact.returncode == 0, exact.stdout + exact.stderr
        expected = ROWS - 1 + 1
        assert f"{REF.id}: source={expected} mirror={expected} matching={expected} missing=0" in exact.stdout
    finally:
        execute(conn, f"DROP TABLE IF EXISTS {TABLE}")
        conn.close()
