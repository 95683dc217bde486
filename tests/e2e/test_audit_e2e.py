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
run every 2 s, no judgement of the table and no repair until the rebuild's snapshot completed, then a clean one.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from deltalake import DeltaTable

from connector.landing_zone.layout import TableRef
from tests.support.fabric_replicator_double import PROCESSED, FabricReplicatorDouble
from tests.support.kafka import REPO_ROOT, run_connector

pytestmark = pytest.mark.e2e

TABLE = "au_items"
TICKER = "au_ticker"
REF = TableRef("public", TABLE)
ROWS = 300
SENTINEL = 1_000_000
PUBLICATION = "dbz_mirror"  # deploy/local/stack.sh PUBLICATION_NAME: FOR ALL TABLES
WAIT_S = 240  # a bound on waits for real components, never an assertion on time
AUDIT_LINE = re.compile(rf"audit {re.escape(REF.id)}: (clean|\d+ differences[^\n]*-> (\w+))")
REPAIR_LINE = f"audit repair: table {REF.id}:"
LEFT_OUT = f"audit {REF.id}: not judged while its rebuild or refresh is requested or under way"
REBUILT = re.compile(rf"table \S*{re.escape(TABLE)}: its rebuild's snapshot completed")


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


def write_config(tmp: Path, tables: Path) -> Path:
    # settle_s bounds a round's wait for Debezium's slot to confirm its position (a second or two with `ticking` on
    # shared_stack, which commits offsets every second) and Fabric (the double) to apply: a round that began while
    # the double was stopped (fault 3) waits all of it and judges nothing (a round out of time judges nothing too).
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
        f"    tables_path: {tables}\n"
        "    settle_s: 5\n"
    )
    return config


class Run:
    """``python -m connector run`` with the audit on, logging to a file the test reads the audit's lines from."""

    def __init__(self, stack: dict[str, str], tmp: Path, fabric: FabricReplicatorDouble) -> None:
        self.log_path = tmp / "connector.log"
        command = [sys.executable, "-m", "connector", "run", "--config", str(write_config(tmp, fabric.tables))]
        command += ["--bootstrap-servers", stack["bootstrap.servers"]]
        command += ["--topics", re.escape(stack["topic_prefix"]) + rf"\.public\.{TABLE}"]
        command += ["--landing-zone", str(fabric.landing_zone), "--checkpoint", str(tmp / "cp")]
        command += ["--trigger", "1s", "--metrics-port", "0"]
        env = {**os.environ, "AUDIT_E2E_SOURCE_URL": stack["postgres"]}
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def judged(self, since: int) -> list[tuple[str, str]]:
        """The audit's judgements of the table logged after offset ``since``: ("clean", "") or (line, repair)."""
        return [(m.group(1), m.group(2) or "") for m in AUDIT_LINE.finditer(self.text()[since:])]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=120)
        self._log.close()


def wait_until(what: str, check: Callable[[], object], run: Run) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
        if run.process.poll() is not None:
            pytest.fail(
                f"the connector exited ({run.process.returncode}) while waiting for {what}:\n{run.text()[-3000:]}"
            )
        time.sleep(0.5)
    pytest.fail(f"gave up waiting for {what} after {WAIT_S}s:\n{run.text()[-3000:]}")


def found_and_repaired(run: Run, since: int, repair: str) -> None:
    """The audit reports the fault in its first or second judgement after it (a round under way may have read the
    table before the fault), with ``repair``, and a later judgement is clean."""
    wait_until(f"the audit to find the fault ({repair})", lambda: any(j[1] for j in run.judged(since)), run)
    judged = run.judged(since)
    first = next(i for i, j in enumerate(judged) if j[1])
    assert first <= 1, f"found only in judgement {first + 1} after the fault: {judged}"
    assert judged[first][1] == repair, judged[first]
    offset = since + run.text()[since:].index(judged[first][0])
    wait_until("a clean audit after the repair", lambda: ("clean", "") in run.judged(offset), run)


def rebuilt_unjudged(run: Run, since: int) -> None:
    """From ``since`` (the rebuild requested) until its snapshot completed: no judgement of the table and no repair,
    however many rounds ran (each left it out); then a clean judgement, the first one."""
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


def tamper_with_fabrics_table(fabric: FabricReplicatorDouble, run: Run) -> None:
    """(1) A row changed behind the connector's back in the Delta table: re-read through Debezium."""
    since = len(run.text())
    DeltaTable(str(fabric.table_dir(REF))).update(predicate="id = 5", updates={"name": "'tampered'"})
    found_and_repaired(run, since, "rows")
    assert held(fabric)[5] == ("item 5", 5)


def delete_behind_kafkas_back(
    conn: psycopg.Connection[tuple[object, ...]], fabric: FabricReplicatorDouble, run: Run
) -> None:
    """(2) A delete whose event never reaches Kafka: the publication publishes no deletes meanwhile."""
    since = len(run.text())
    conn.execute(f"ALTER PUBLICATION {PUBLICATION} SET (publish = 'insert, update, truncate')")
    try:
        conn.execute(f"DELETE FROM public.{TABLE} WHERE id = 7")
    finally:
        conn.execute(f"ALTER PUBLICATION {PUBLICATION} SET (publish = 'insert, update, delete, truncate')")
    found_and_repaired(run, since, "rows")
    assert 7 not in held(fabric)


def lose_a_file_before_fabric_took_it(
    conn: psycopg.Connection[tuple[object, ...]], fabric: FabricReplicatorDouble, run: Run
) -> None:
    """(3) A file removed from the landing zone before the double read it: the table is rebuilt."""
    fabric.stop()
    fabric.poll()  # take what the last repair published after the double's last round (seen in CI on Intel Xeon)
    assert not file_numbers(fabric, waiting_only=True), fabric.stopped
    last = file_numbers(fabric)[-1]
    conn.execute(f"UPDATE public.{TABLE} SET qty = qty + 1000 WHERE id = 10")
    wait_until("the connector to publish the update", lambda: file_numbers(fabric, waiting_only=True), run)
    lost = file_numbers(fabric, waiting_only=True)
    assert lost == [last + 1], lost
    since = len(run.text())
    (fabric.landing_zone / REF.folder / f"{lost[0]:020d}.parquet").unlink()
    conn.execute(f"UPDATE public.{TABLE} SET qty = qty + 1000 WHERE id = 11")
    wait_until("the connector to publish the next update", lambda: file_numbers(fabric, waiting_only=True), run)
    fabric.start()
    found_and_repaired(run, since, "rebuild")
    text = run.text()
    asked = text.index("\n", text.index(f"{REPAIR_LINE} rebuild requested", since))  # the audit's own request
    rebuilt_unjudged(run, asked)
    assert held(fabric)[10] == ("item 10", 1010) and held(fabric)[11] == ("item 11", 1011)


def rebuild_while_rounds_run(conn: psycopg.Connection[tuple[object, ...]], run: Run, checkpoint: Path) -> None:
    """(4) An operator's ``rebuild`` while rounds run: the table is left out until the rebuild completed."""
    requested = run_connector("rebuild", REF.id, "--checkpoint", str(checkpoint))
    assert requested.returncode == 0, requested.stdout + requested.stderr
    since = len(run.text())  # the request is written: from here on no round judges the table
    conn.execute(f"UPDATE public.{TABLE} SET qty = qty + 1000 WHERE id = 12")  # a change during the rebuild
    rebuilt_unjudged(run, since)


def test_the_audit_finds_and_repairs_what_nothing_else_caught(shared_stack: dict[str, str], tmp_path: Path) -> None:
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{TABLE}")
        conn.execute(f"CREATE TABLE public.{TABLE} (id int PRIMARY KEY, name text, qty int)")
        conn.execute(f"INSERT INTO public.{TABLE} SELECT g, 'item ' || g, g FROM generate_series(1, {ROWS}) g")
        conn.execute(f"INSERT INTO public.{TABLE} VALUES ({SENTINEL}, 'last', 0)")
        fabric = FabricReplicatorDouble(tmp_path / "item", retention_s=30, interval_s=0.5).start()
        with ticking(shared_stack["postgres"]):
            run = Run(shared_stack, tmp_path, fabric)
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
