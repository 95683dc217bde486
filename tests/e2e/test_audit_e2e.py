"""The continuous audit (``mirror.audit``, issue 43) on the real stack, with the Fabric replicator DOUBLE for Fabric.

Postgres → real Debezium → real Kafka → ``run`` (audit on, every few seconds) → landing zone ``<item>/Files/
LandingZone``; the double (``tests.support.fabric_replicator_double``, 30 s retention) applies the files to
``<item>/Tables``. Three faults no other check sees, each found by the audit within one round of its own and
repaired through the running stream:

1. a row changed behind the connector's back in the double's Delta table → re-read through Debezium (rows);
2. a row deleted in the source whose event never reaches Kafka (the publication briefly publishes no deletes)
   → a delete row with the next batch (rows);
3. a file removed from the landing zone before the double read it (the table's later files wait forever)
   → a rebuild.

After each, an audit of the table is clean again; at the end ``verify --tables-path`` is exact. A table being
rebuilt is never judged (issue 55): after the rebuild of fault 3, and after an operator's ``rebuild`` while rounds
run every 2 s, and after a column's type changed (its automatic rebuild), no judgement of the table and no repair
until the rebuild's snapshot completed, then a clean one.
The run, the checks and the faults that do not depend on the source are ``tests.e2e.audit_faults``' (the MariaDB
audit e2e's too); the delete that never reaches Kafka is Postgres's own.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from connector.landing_zone.layout import TableRef
from tests.e2e import audit_faults as faults
from tests.support.fabric_replicator_double import FabricReplicatorDouble
from tests.support.kafka import run_connector

pytestmark = pytest.mark.e2e

TABLE = "au_items"
TICKER = "au_ticker"
REF = TableRef("public", TABLE)
ROWS = 300
SENTINEL = 1_000_000
PUBLICATION = "dbz_mirror"  # deploy/local/stack.sh PUBLICATION_NAME: FOR ALL TABLES


@contextmanager
def ticking(url: str) -> Iterator[None]:
    """A change to another table every 0.3 s while the connector runs: Debezium confirms a position to its slot
    with its next change (or its 10 s heartbeat), so each round's lag gate opens in about a second, not ten."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def tick() -> None:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                while not stop.wait(0.3):
                    conn.execute(f"UPDATE public.{TICKER} SET n = n + 1")
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread
            errors.append(exc)

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{TICKER}")
        conn.execute(f"CREATE TABLE public.{TICKER} (id int PRIMARY KEY, n int)")
        conn.execute(f"INSERT INTO public.{TICKER} VALUES (1, 0)")
    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS public.{TICKER}")
    assert not errors, errors


def delete_behind_kafkas_back(
    conn: psycopg.Connection[tuple[object, ...]], fabric: FabricReplicatorDouble, run: faults.Run
) -> None:
    """(2) A delete whose event never reaches Kafka: the publication publishes no deletes meanwhile."""
    since = len(run.text())
    conn.execute(f"ALTER PUBLICATION {PUBLICATION} SET (publish = 'insert, update, truncate')")
    try:
        conn.execute(f"DELETE FROM public.{TABLE} WHERE id = 7")
    finally:
        conn.execute(f"ALTER PUBLICATION {PUBLICATION} SET (publish = 'insert, update, delete, truncate')")
    faults.found_and_repaired(run, since, "rows")
    assert 7 not in faults.held(fabric, REF)


def schema_change_while_rounds_run(conn: psycopg.Connection[tuple[object, ...]], run: faults.Run) -> None:
    """(5) A column's type changed while rounds run: its automatic rebuild leaves the table out until it completed."""
    mark = len(run.text())
    conn.execute(f"ALTER TABLE public.{TABLE} ALTER COLUMN qty TYPE bigint")
    conn.execute(f"UPDATE public.{TABLE} SET qty = qty + 1000 WHERE id = 13")  # an event in the new type
    automatic = re.compile(rf"table stopped: [^\n]*{TABLE}[^\n]*changed type[^\n]*rebuilding it automatically")
    faults.wait_until("the type change's automatic rebuild", lambda: automatic.search(run.text(), mark), run)
    found = automatic.search(run.text(), mark)
    assert found is not None
    faults.rebuilt_unjudged(run, found.start())


def test_the_audit_finds_and_repairs_what_nothing_else_caught(shared_stack: dict[str, str], tmp_path: Path) -> None:
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{TABLE}")
        conn.execute(f"CREATE TABLE public.{TABLE} (id int PRIMARY KEY, name text, qty int)")
        conn.execute(f"INSERT INTO public.{TABLE} SELECT g, 'item ' || g, g FROM generate_series(1, {ROWS}) g")
        conn.execute(f"INSERT INTO public.{TABLE} VALUES ({SENTINEL}, 'last', 0)")
        fabric = FabricReplicatorDouble(tmp_path / "item", retention_s=30, interval_s=0.5).start()
        with ticking(shared_stack["postgres"]):
            run = faults.Run(shared_stack, tmp_path, fabric, REF, source_url=shared_stack["postgres"], settle_s=5)
            try:
                faults.wait_until("the double to hold the last row", lambda: SENTINEL in faults.held(fabric, REF), run)
                faults.wait_until("a clean audit", lambda: ("clean", "") in run.judged(0), run)
                assert not any(repair for _line, repair in run.judged(0)), "a difference before any fault"
                faults.tamper_with_fabrics_table(fabric, run)
                delete_behind_kafkas_back(conn, fabric, run)
                faults.lose_a_file_before_fabric_took_it(conn.execute, f"public.{TABLE}", fabric, run)
                faults.rebuild_while_rounds_run(conn.execute, f"public.{TABLE}", run, tmp_path / "cp")
                schema_change_while_rounds_run(conn, run)
            finally:
                run.stop()
                fabric.stop()
            assert not fabric.stopped and not fabric.errors, (fabric.stopped, fabric.errors)

            exact = run_connector(
                "verify",
                *("--source", shared_stack["postgres"], "--landing-zone", str(fabric.landing_zone)),
                *("--tables-path", str(fabric.tables), "--tables", REF.id, "--settle-s", "60"),
            )
        assert exact.returncode == 0, exact.stdout + exact.stderr
        expected = ROWS - 1 + 1
        assert f"{REF.id}: source={expected} mirror={expected} matching={expected} missing=0" in exact.stdout
        conn.execute(f"DROP TABLE IF EXISTS public.{TABLE}")
