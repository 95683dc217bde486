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
table of the shared stack, conftest.py), and the table is dropped at the end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from connector.landing_zone.layout import TableRef
from tests.e2e.mirror_source import connect_mariadb
from tests.e2e.test_audit_e2e import Run, wait_until
from tests.support.fabric_replicator_double import PROCESSED, FabricReplicatorDouble
from tests.support.kafka import REPO_ROOT, run_connector

pytestmark = pytest.mark.e2e

TABLE = "au_maria"
REF = TableRef("mirror", TABLE)
ROWS = 300
SENTINEL = 1_000_000
SIGNAL_TABLE = "debezium.debezium_signal"  # deploy/local/stack-mariadb.sh SIGNAL_TABLE
AUDIT_LINE = re.compile(rf"audit {re.escape(REF.id)}: (clean|\d+ differences[^\n]*-> (\w+))")
REPAIR_LINE = f"audit repair: table {REF.id}:"
LEFT_OUT = f"audit {REF.id}: not judged while its rebuild or refresh is requested or under way"
REBUILT = re.compile(rf"table \S*{re.escape(TABLE)}: its rebuild's snapshot completed")


def write_config(tmp: Path, tables: Path) -> Path:
    config = tmp / "config.yaml"
    config.write_text(
        "mirror:\n"
        "  rebuild:\n"
        "    wait_s: 1\n"
        "  audit:\n"
        "    enabled: true\n"
        "    interval_s: 2\n"
        f"    tables: [{REF.id}]\n"
        "    source_url: ${env:AUDIT_E2E_SOURCE_URL}\n"
        f"    signal_table: {SIGNAL_TABLE}\n"
        f"    tables_path: {tables}\n"
        "    settle_s: 10\n"
    )
    return config


class MariaRun(Run):
    """``run`` with the audit on against the MariaDB stack (``Run`` of the Postgres audit e2e, another table)."""

    def __init__(self, stack: dict[str, str], tmp: Path, fabric: FabricReplicatorDouble) -> None:
        self.log_path = tmp / "connector.log"
        command = [sys.executable, "-m", "connector", "run", "--config", str(write_config(tmp, fabric.tables))]
        command += ["--bootstrap-servers", stack["bootstrap.servers"]]
        command += ["--topics", re.escape(stack["topic_prefix"]) + rf"\.mirror\.{TABLE}"]
        command += ["--landing-zone", str(fabric.landing_zone), "--checkpoint", str(tmp / "cp")]
        command += ["--trigger", "1s", "--metrics-port", "0"]
        env = {**os.environ, "AUDIT_E2E_SOURCE_URL": stack["mariadb"]}
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def judged(self, since: int) -> list[tuple[str, str]]:
        return [(m.group(1), m.group(2) or "") for m in AUDIT_LINE.finditer(self.text()[since:])]


def found_and_repaired(run: Run, since: int, repair: str) -> None:
    """Found in the first or second judgement after the fault, with ``repair``; a later judgement is clean."""
    wait_until(f"the audit to find the fault ({repair})", lambda: any(j[1] for j in run.judged(since)), run)
    judged = run.judged(since)
    first = next(i for i, j in enumerate(judged) if j[1])
    assert first <= 1, f"found only in judgement {first + 1} after the fault: {judged}"
    assert judged[first][1] == repair, judged[first]
    offset = since + run.text()[since:].index(judged[first][0])
    wait_until("a clean audit after the repair", lambda: ("clean", "") in run.judged(offset), run)


def rebuilt_unjudged(run: Run, since: int) -> None:
    """No judgement and no repair from ``since`` until the rebuild's snapshot completed; then a clean one first."""
    wait_until("the rebuild's snapshot to complete", lambda: REBUILT.search(run.text(), since), run)
    done = REBUILT.search(run.text(), since)
    assert done is not None
    during = run.text()[since : done.start()]
    assert not AUDIT_LINE.search(during), f"judged while rebuilt: {during[-3000:]}"
    assert REPAIR_LINE not in during, during[-3000:]
    assert LEFT_OUT in during, f"no round reached the table while it was rebuilt: {during[-3000:]}"
    wait_until("a judgement after the rebuild", lambda: run.judged(done.end()), run)
    assert run.judged(done.end())[0] == ("clean", ""), run.judged(done.end())


def held(fabric: FabricReplicatorDouble) -> dict[int, tuple[object, ...]]:
    path = fabric.table_dir(REF)
    if not (path / "_delta_log").is_dir():
        return {}
    rows = DeltaTable(str(path)).to_pyarrow_table(columns=["id", "name", "qty"]).to_pylist()
    return {row["id"]: (row["name"], row["qty"]) for row in rows}


def file_numbers(fabric: FabricReplicatorDouble, *, waiting_only: bool = False) -> list[int]:
    folder = fabric.landing_zone / REF.folder
    paths = list(folder.glob("0*.parquet"))
    if not waiting_only:
        paths += list((folder / PROCESSED).glob("0*.parquet"))
    return sorted(int(path.name.split(".")[0]) for path in paths)


def execute(conn: Any, *statements: str) -> None:
    with conn.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def tamper_with_fabrics_table(fabric: FabricReplicatorDouble, run: Run) -> None:
    """(1) A row changed behind the connector's back in the Delta table: re-read through Debezium."""
    since = len(run.text())
    DeltaTable(str(fabric.table_dir(REF))).update(predicate="id = 5", updates={"name": "'tampered'"})
    found_and_repaired(run, since, "rows")
    assert held(fabric)[5] == ("item 5", 5)


def delete_behind_kafkas_back(conn: Any, fabric: FabricReplicatorDouble, run: Run) -> None:
    """(2) A delete that never reaches the binlog, so never Debezium: ``sql_log_bin = 0`` for that statement."""
    since = len(run.text())
    try:
        execute(conn, "SET SESSION sql_log_bin = 0", f"DELETE FROM {TABLE} WHERE id = 7")
    finally:
        execute(conn, "SET SESSION sql_log_bin = 1")
    found_and_repaired(run, since, "rows")
    assert 7 not in held(fabric)


def lose_a_file_before_fabric_took_it(conn: Any, fabric: FabricReplicatorDouble, run: Run) -> None:
    """(3) A file removed from the landing zone before the double read it: the table is rebuilt."""
    fabric.stop()
    fabric.poll()  # take what the last repair published after the double's last round
    assert not file_numbers(fabric, waiting_only=True), fabric.stopped
    last = file_numbers(fabric)[-1]
    execute(conn, f"UPDATE {TABLE} SET qty = qty + 1000 WHERE id = 10")
    wait_until("the connector to publish the update", lambda: file_numbers(fabric, waiting_only=True), run)
    lost = file_numbers(fabric, waiting_only=True)
    assert lost == [last + 1], lost
    since = len(run.text())
    (fabric.landing_zone / REF.folder / f"{lost[0]:020d}.parquet").unlink()
    execute(conn, f"UPDATE {TABLE} SET qty = qty + 1000 WHERE id = 11")
    wait_until("the connector to publish the next update", lambda: file_numbers(fabric, waiting_only=True), run)
    fabric.start()
    found_and_repaired(run, since, "rebuild")
    text = run.text()
    asked = text.index("\n", text.index(f"{REPAIR_LINE} rebuild requested", since))
    rebuilt_unjudged(run, asked)
    assert held(fabric)[10] == ("item 10", 1010) and held(fabric)[11] == ("item 11", 1011)


def rebuild_while_rounds_run(conn: Any, run: Run, checkpoint: Path) -> None:
    """(4) An operator's ``rebuild`` while rounds run: the table is left out until the rebuild completed."""
    requested = run_connector("rebuild", REF.id, "--checkpoint", str(checkpoint))
    assert requested.returncode == 0, requested.stdout + requested.stderr
    since = len(run.text())
    execute(conn, f"UPDATE {TABLE} SET qty = qty + 1000 WHERE id = 12")
    rebuilt_unjudged(run, since)


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
        run = MariaRun(mariadb_stack, tmp_path, fabric)
        try:
            wait_until("the double to hold the last row", lambda: SENTINEL in held(fabric), run)
            wait_until("a clean audit", lambda: ("clean", "") in run.judged(0), run)
            assert not any(repair for _line, repair in run.judged(0)), "a difference before any fault"
            tamper_with_fabrics_table(fabric, run)
            delete_behind_kafkas_back(conn, fabric, run)
            lose_a_file_before_fabric_took_it(conn, fabric, run)
            rebuild_while_rounds_run(conn, run, tmp_path / "cp")
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
