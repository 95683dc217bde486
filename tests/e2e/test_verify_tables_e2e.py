"""``verify`` against what Fabric holds (issue 43), with the Fabric replicator DOUBLE for Fabric.

Invariant 15 of docs/guarantees.md: what Fabric holds, proven without the landing zone's history.

Postgres → real Debezium → real Kafka → ``run`` → landing zone ``<item>/Files/LandingZone``; the double
(``tests.support.fabric_replicator_double``, 30 s retention) applies the files to ``<item>/Tables`` and deletes them
once processed. Once the landing zone has lost every processed file, ``verify --tables-path`` must find the mirror
exact from Fabric's Delta tables alone; a row changed behind the connector's back in the Delta table must be found.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from deltalake import DeltaTable

from connector.landing_zone.layout import TableRef
from tests.support.fabric_replicator_double import FabricReplicatorDouble
from tests.support.kafka import REPO_ROOT, run_connector

pytestmark = pytest.mark.e2e

TABLE = "vt_orders"
REF = TableRef("public", TABLE)
ROWS = 500
SENTINEL = 1_000_000
WAIT_S = 240  # a bound on waits for real components, never an assertion on time


def wait_until(what: str, check: object, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        if process is not None and process.poll() is not None:
            pytest.fail(f"the connector exited ({process.returncode}) while waiting for {what}")
        time.sleep(1)
    pytest.fail(f"gave up waiting for {what} after {WAIT_S}s")


def held_ids(fabric: FabricReplicatorDouble) -> set[int]:
    path = fabric.table_dir(REF)
    if not (path / "_delta_log").is_dir():
        return set()
    return set(DeltaTable(str(path)).to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def processed_files(fabric: FabricReplicatorDouble) -> list[Path]:
    return sorted((fabric.landing_zone / REF.folder).rglob("0*.parquet"))


def verify(shared_stack: dict[str, str], fabric: FabricReplicatorDouble) -> subprocess.CompletedProcess[str]:
    return run_connector(
        "verify",
        "--source",
        shared_stack["postgres"],
        "--landing-zone",
        str(fabric.landing_zone),
        "--tables-path",
        str(fabric.tables),
        "--tables",
        REF.id,
        "--settle-s",
        "60",
    )


def test_verify_against_fabrics_tables_after_the_landing_zone_lost_its_files(
    shared_stack: dict[str, str], tmp_path: Path
) -> None:
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{TABLE}")
        conn.execute(f"CREATE TABLE public.{TABLE} (id int PRIMARY KEY, name text, amount numeric(12, 2))")
        conn.execute(f"INSERT INTO public.{TABLE} SELECT g, 'order ' || g, g * 1.25 FROM generate_series(1, {ROWS}) g")
        conn.execute(f"UPDATE public.{TABLE} SET name = 'updated' WHERE id % 7 = 0")
        conn.execute(f"DELETE FROM public.{TABLE} WHERE id % 11 = 0")
        conn.execute(f"INSERT INTO public.{TABLE} VALUES ({SENTINEL}, 'last', 0)")
    fabric = FabricReplicatorDouble(tmp_path / "item", retention_s=30, interval_s=1)
    command = [sys.executable, "-m", "connector", "run", "--bootstrap-servers", shared_stack["bootstrap.servers"]]
    command += ["--topics", re.escape(shared_stack["topic_prefix"]) + rf"\.public\.{TABLE}"]
    command += ["--landing-zone", str(fabric.landing_zone), "--checkpoint", str(tmp_path / "cp")]
    command += ["--trigger", "1s", "--metrics-port", "0"]
    with (tmp_path / "connector.log").open("wb") as log, fabric:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until("the double to hold the last row", lambda: SENTINEL in held_ids(fabric), process)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=120)
        # Fabric's cleanup: processed files go after the retention, all but the last one.
        wait_until("the processed files to be deleted", lambda: len(processed_files(fabric)) == 1)
    assert not fabric.stopped

    exact = verify(shared_stack, fabric)
    assert exact.returncode == 0, exact.stdout + exact.stderr
    expected = ROWS - ROWS // 11 + 1
    assert f"{REF.id}: source={expected} mirror={expected} matching={expected} missing=0" in exact.stdout

    # A row changed behind the connector's back in Fabric's table is found (chunked compare, after the lag gate).
    DeltaTable(str(fabric.table_dir(REF))).update(predicate="id = 5", updates={"name": "'tampered'"})
    found = verify(shared_stack, fabric)
    assert found.returncode == 1, found.stdout + found.stderr
    assert "differing=1" in found.stdout and "key (5,)" in found.stdout, found.stdout

    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{TABLE}")
