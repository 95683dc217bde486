"""Empty source tables appear in the mirror with their columns before their first row (issue 55).

Invariant 16 of docs/guarantees.md: every captured table exists in the mirror with its columns, an empty one included.

Postgres → real Debezium (a connector of its own on ``shared_stack``, registered after the tables exist, so its
initial snapshot sees them) → real Kafka → ``run`` with ``source.debezium_connect_url`` and
``mirror.audit.source_url`` set. Debezium's snapshot emits nothing for an empty table, nor for one whose rows were
deleted before it; both must still get a folder, ``_metadata.json`` and a zero-row file in the types their events
will have, be ``verify``-exact, then take rows without a type change and stay exact.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.e2e.conftest import StackCtl
from tests.support.kafka import REPO_ROOT, run_connector
from tests.support.kafka_connect import connect_request

pytestmark = pytest.mark.e2e

CONNECTOR = "empty-tables-source"
PREFIX = "etsrc"
EMPTY = "et_empty"  # every common type, never a row before the snapshot
EMPTIED = "et_emptied"  # rows deleted before the snapshot
WITH_ROWS = "et_rows"  # gives the stream its first batch
TABLES = (EMPTY, EMPTIED, WITH_ROWS)
WAIT_S = 300  # a bound on waits for real components, never an assertion on time
FIRST = f"{1:020d}.parquet"
SECOND = f"{2:020d}.parquet"

EMPTY_COLUMNS = (
    "id integer PRIMARY KEY, c_bigint bigint, c_numeric numeric(12,2), c_numeric_free numeric, c_real real, "
    "c_double double precision, c_bool boolean, c_text text, c_varchar varchar(64), c_bytea bytea, c_date date, "
    "c_time time, c_timestamp timestamp, c_timestamptz timestamptz, c_uuid uuid, c_jsonb jsonb"
)
EMPTY_ROW = (
    "(1, 9000000000, 1234.56, 3.14159, 1.5, 2.25, true, 'text', 'varchar', '\\x0102', '2024-05-01', '12:34:56.789', "
    "'2024-05-01 12:00:00.123456', '2024-05-01 12:00:00+02', '12345678-1234-5678-1234-567812345678', '{\"a\": 1}')"
)


def wait_until(what: str, check: Callable[[], bool], process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
        if process.poll() is not None:
            pytest.fail(f"the connector exited ({process.returncode}) while waiting for {what}")
        time.sleep(1)
    pytest.fail(f"gave up waiting for {what} after {WAIT_S}s")


def has_file(zone: Path, table: str, name: str) -> bool:
    return (zone / "public.schema" / table / name).is_file()


def verify(stack: dict[str, str], zone: Path) -> subprocess.CompletedProcess[str]:
    tables = ",".join(f"public.{t}" for t in TABLES)
    return run_connector("verify", "--source", stack["postgres"], "--landing-zone", str(zone), "--tables", tables)


def write_config(tmp: Path, stack: dict[str, str]) -> Path:
    config = tmp / "config.yaml"
    config.write_text(
        "source:\n"
        f"  debezium_connect_url: {stack['connect']}\n"
        f"  debezium_connectors: [{CONNECTOR}]\n"
        "mirror:\n"
        "  audit:\n"
        "    source_url: ${env:EMPTY_TABLES_SOURCE_URL}\n"
    )
    return config


def drop_source(stack: dict[str, str]) -> None:
    connect_request("DELETE", f"{stack['connect']}/connectors/{CONNECTOR}", missing_ok=True)
    with psycopg.connect(stack["postgres"], autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"DROP TABLE IF EXISTS public.{table}")
        # The connector's slot goes once Connect stopped its task (best effort: the stack is torn down anyway).
        for _ in range(30):
            slots = conn.execute(
                "SELECT slot_name, active FROM pg_replication_slots WHERE slot_name = 'dbz_empty_tables_source'"
            ).fetchall()
            if not slots:
                break
            if not slots[0][1]:
                conn.execute("SELECT pg_drop_replication_slot('dbz_empty_tables_source')")
                break
            time.sleep(1)


def test_empty_and_emptied_tables_appear_exact_then_take_rows(
    shared_stack: dict[str, str], shared_stack_ctl: StackCtl, tmp_path: Path
) -> None:
    drop_source(shared_stack)
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        conn.execute(f"CREATE TABLE public.{EMPTY} ({EMPTY_COLUMNS})")
        conn.execute(f"CREATE TABLE public.{EMPTIED} (id bigint PRIMARY KEY, name text, at timestamptz)")
        conn.execute(f"INSERT INTO public.{EMPTIED} SELECT g, 'gone ' || g, now() FROM generate_series(1, 5) g")
        conn.execute(f"DELETE FROM public.{EMPTIED}")
        conn.execute(f"CREATE TABLE public.{WITH_ROWS} (id int PRIMARY KEY, note text)")
        conn.execute(f"INSERT INTO public.{WITH_ROWS} SELECT g, 'row ' || g FROM generate_series(1, 3) g")
    shared_stack_ctl("register-connector", CONNECTOR, PREFIX, "json")
    zone = tmp_path / "zone"
    command = [sys.executable, "-m", "connector", "run", "--config", str(write_config(tmp_path, shared_stack))]
    command += ["--bootstrap-servers", shared_stack["bootstrap.servers"]]
    command += ["--topics", re.escape(PREFIX) + r"\.public\.et_.*"]
    command += ["--landing-zone", str(zone), "--checkpoint", str(tmp_path / "cp"), "--trigger", "1s"]
    command += ["--metrics-port", "0"]
    env = {**os.environ, "EMPTY_TABLES_SOURCE_URL": shared_stack["postgres"]}
    log_path = tmp_path / "connector.log"
    try:
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                wait_until(
                    "the empty tables' first files",
                    lambda: all(has_file(zone, t, FIRST) for t in TABLES),
                    process,
                )
                for table in (EMPTY, EMPTIED):
                    metadata = json.loads((zone / "public.schema" / table / "_metadata.json").read_text())
                    assert metadata["keyColumns"] == ["id"]
                exact = verify(shared_stack, zone)
                assert exact.returncode == 0, exact.stdout + exact.stderr
                for table in (EMPTY, EMPTIED):
                    assert f"public.{table}: source=0 mirror=0 matching=0 missing=0" in exact.stdout, exact.stdout

                with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
                    conn.execute(f"INSERT INTO public.{EMPTY} VALUES {EMPTY_ROW}")
                    conn.execute(f"INSERT INTO public.{EMPTY} (id) VALUES (2)")
                    conn.execute(f"INSERT INTO public.{EMPTIED} VALUES (7, 'back', '2024-05-01 12:00:00+00')")
                wait_until(
                    "the rows' files",
                    lambda: has_file(zone, EMPTY, SECOND) and has_file(zone, EMPTIED, SECOND),
                    process,
                )
                after = verify(shared_stack, zone)
                assert after.returncode == 0, after.stdout + after.stderr
                assert f"public.{EMPTY}: source=2 mirror=2 matching=2 missing=0" in after.stdout, after.stdout
                assert f"public.{EMPTIED}: source=1 mirror=1 matching=1 missing=0" in after.stdout, after.stdout
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=120)
        text = log_path.read_text(encoding="utf-8", errors="replace")
        assert "stopped" not in " ".join(line for line in text.splitlines() if "et_empt" in line), text[-3000:]
        assert process.returncode == 0, text[-3000:]
    finally:
        drop_source(shared_stack)
