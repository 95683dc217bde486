"""Empty MariaDB tables appear in the mirror with their columns before their first row (issue 55, MariaDB twin).

Invariant 16 of docs/guarantees.md, as ``test_empty_tables_e2e`` proves it for Postgres: MariaDB → real Debezium
MariaDB connector → real Kafka → ``run`` with ``source.debezium_connect_url`` and ``mirror.audit.source_url`` set.
Debezium's snapshot emits nothing for an empty table, nor for one whose rows were deleted before it; both must
still get a folder, ``_metadata.json`` and a zero-row file, be ``verify``-exact, then take rows and stay exact.

The stack is this module's own (not the session's ``mariadb_stack``, whose every table ``test_mariadb_e2e``
mirrors): its init SQL creates the three tables before the connector is registered, so the snapshot sees them.
Its connector and topic prefix are ``test_empty_tables_e2e``'s, so that module's config and waits serve here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.e2e.conftest import _mariadb_stack_up
from tests.e2e.mirror_source import connect_mariadb
from tests.e2e.test_empty_tables_e2e import CONNECTOR, FIRST, PREFIX, SECOND, wait_until, write_config
from tests.support.kafka import REPO_ROOT, run_connector

pytestmark = pytest.mark.e2e

DB = "mirror"  # the stack's database: Debezium's database.include.list
EMPTY = "et_empty"  # several MariaDB types, never a row before the snapshot
EMPTIED = "et_emptied"  # rows deleted before the snapshot
WITH_ROWS = "et_rows"  # gives the stream its first batch
TABLES = (EMPTY, EMPTIED, WITH_ROWS)
ROW_MARKER = "__rowMarker__"
EMPTY_COLUMNS = {
    "id": "INT NOT NULL PRIMARY KEY",
    "c_bigint": "BIGINT",
    "c_ubigint": "BIGINT UNSIGNED",
    "c_decimal": "DECIMAL(12,2)",
    "c_float": "FLOAT",
    "c_double": "DOUBLE",
    "c_bool": "TINYINT(1)",
    "c_varchar": "VARCHAR(64)",
    "c_text": "TEXT",
    "c_varbinary": "VARBINARY(16)",
    "c_date": "DATE",
    "c_time": "TIME(3)",
    "c_datetime": "DATETIME(6)",
    "c_timestamp": "TIMESTAMP(6) NULL",
    "c_json": "JSON",
    "c_enum": "ENUM('a','b')",
}
EMPTY_ROW = (
    "(1, 9000000000, 18446744073709551615, 1234.56, 1.5, 2.25, 1, 'varchar', 'text ✓', X'0102', '2024-05-01', "
    "'12:34:56.789', '2024-05-01 12:00:00.123456', '2024-05-01 12:00:00.123456', '{\"a\": 1}', 'b')"
)
INIT_SQL = f"""
CREATE TABLE {EMPTY} ({", ".join(f"{name} {kind}" for name, kind in EMPTY_COLUMNS.items())}) CHARACTER SET utf8mb4;
CREATE TABLE {EMPTIED} (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(50), at DATETIME(6));
INSERT INTO {EMPTIED} VALUES (1, 'gone 1', NOW(6)), (2, 'gone 2', NOW(6)), (3, 'gone 3', NOW(6));
DELETE FROM {EMPTIED};
CREATE TABLE {WITH_ROWS} (id INT NOT NULL PRIMARY KEY, note VARCHAR(50));
INSERT INTO {WITH_ROWS} VALUES (1, 'row 1'), (2, 'row 2'), (3, 'row 3');
"""


@pytest.fixture(scope="module")
def empty_tables_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A MariaDB stack of this module's own whose init SQL made ``TABLES``; always torn down."""
    init_sql = tmp_path_factory.mktemp("mariadb-empty-tables") / "tables.sql"
    init_sql.write_text(INIT_SQL, encoding="utf-8")
    env = {"CONNECTOR_NAME": CONNECTOR, "TOPIC_PREFIX": PREFIX, "CONNECT_OFFSET_FLUSH_MS": "1000"}
    with _mariadb_stack_up("e2e-mariadb-empty-", "--init-sql", str(init_sql), env=env) as values:
        assert values["connector"] == CONNECTOR, values
        yield values


def table_dir(zone: Path, table: str) -> Path:
    return zone / f"{DB}.schema" / table


def data_types(path: Path) -> dict[str, str]:
    """A Parquet file's columns and their Arrow types, without the row marker."""
    return {f.name: str(f.type) for f in pq.read_schema(path) if f.name != ROW_MARKER}


def verify(stack: dict[str, str], zone: Path) -> subprocess.CompletedProcess[str]:
    tables = ",".join(f"{DB}.{t}" for t in TABLES)
    return run_connector("verify", "--source", stack["mariadb"], "--landing-zone", str(zone), "--tables", tables)


def test_empty_and_emptied_mariadb_tables_appear_exact_then_take_rows(
    empty_tables_stack: dict[str, str], tmp_path: Path
) -> None:
    stack = empty_tables_stack
    zone = tmp_path / "zone"
    command = [sys.executable, "-m", "connector", "run", "--config", str(write_config(tmp_path, stack))]
    command += ["--bootstrap-servers", stack["bootstrap.servers"], "--topics", stack["topics"]]
    command += ["--landing-zone", str(zone), "--checkpoint", str(tmp_path / "cp"), "--trigger", "1s"]
    command += ["--metrics-port", "0"]
    env = {**os.environ, "EMPTY_TABLES_SOURCE_URL": stack["mariadb"]}
    log_path = tmp_path / "connector.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(
                "the empty tables' first files",
                lambda: all((table_dir(zone, t) / FIRST).is_file() for t in TABLES),
                process,
            )
            for table in (EMPTY, EMPTIED):
                metadata = json.loads((table_dir(zone, table) / "_metadata.json").read_text())
                assert metadata["keyColumns"] == ["id"]
                first = pq.read_table(table_dir(zone, table) / FIRST)
                assert first.num_rows == 0
            empty_columns = pq.read_table(table_dir(zone, EMPTY) / FIRST).column_names
            assert [c for c in empty_columns if c != ROW_MARKER] == list(EMPTY_COLUMNS)
            exact = verify(stack, zone)
            assert exact.returncode == 0, exact.stdout + exact.stderr
            for table in (EMPTY, EMPTIED):
                assert f"{DB}.{table}: source=0 mirror=0 matching=0 missing=0" in exact.stdout, exact.stdout
            assert f"{DB}.{WITH_ROWS}: source=3 mirror=3 matching=3 missing=0" in exact.stdout, exact.stdout

            conn = connect_mariadb(stack["mariadb"])
            try:
                with conn.cursor() as cursor:
                    cursor.execute(f"INSERT INTO {EMPTY} VALUES {EMPTY_ROW}")
                    cursor.execute(f"INSERT INTO {EMPTY} (id) VALUES (2)")
                    cursor.execute(f"INSERT INTO {EMPTIED} VALUES (7, 'back', '2024-05-01 12:00:00')")
            finally:
                conn.close()
            wait_until(
                "the rows' files",
                lambda: (table_dir(zone, EMPTY) / SECOND).is_file() and (table_dir(zone, EMPTIED) / SECOND).is_file(),
                process,
            )
            after = verify(stack, zone)
            assert after.returncode == 0, after.stdout + after.stderr
            assert f"{DB}.{EMPTY}: source=2 mirror=2 matching=2 missing=0" in after.stdout, after.stdout
            assert f"{DB}.{EMPTIED}: source=1 mirror=1 matching=1 missing=0" in after.stdout, after.stdout
            for table in (EMPTY, EMPTIED):  # the zero-row file has the types the events brought
                assert data_types(table_dir(zone, table) / FIRST) == data_types(table_dir(zone, table) / SECOND)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=120)
    text = log_path.read_text(encoding="utf-8", errors="replace")
    assert "stopped" not in " ".join(line for line in text.splitlines() if "et_empt" in line), text[-3000:]
    assert process.returncode == 0, text[-3000:]
