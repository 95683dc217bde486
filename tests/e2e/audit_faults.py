"""What the audit e2e tests of both sources share (``test_audit_e2e``: Postgres; ``test_mariadb_with_audit_e2e``).

``Run`` starts ``python -m connector run`` with the audit on (every 2 s) against a stack's table and reads the
audit's lines from its log; ``found_and_repaired`` and ``rebuilt_unjudged`` are the checks after each fault; the
faults that do not depend on the source are here too: a row changed in the double's Delta table (1), a file lost
before the double read it (3) and an operator's ``rebuild`` while rounds run (4), each writing to the source through
the test's ``execute`` (one SQL statement, in the source's dialect). The delete that never reaches Kafka (2) is the
source's own, in its test. Not a test module.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from connector.landing_zone.layout import TableRef
from tests.support.fabric_replicator_double import PROCESSED, FabricReplicatorDouble
from tests.support.kafka import REPO_ROOT, run_connector

WAIT_S = 240  # a bound on waits for real components, never an assertion on time

Execute = Callable[[str], object]
"""Runs one SQL statement on the source (autocommit)."""


def audit_line(ref: TableRef) -> re.Pattern[str]:
    """A judgement of the table: ``clean``, or the differences and the repair (group 2)."""
    return re.compile(rf"audit {re.escape(ref.id)}: (clean|\d+ differences[^\n]*-> (\w+))")


def repair_line(ref: TableRef) -> str:
    return f"audit repair: table {ref.id}:"


def left_out(ref: TableRef) -> str:
    return f"audit {ref.id}: not judged while its rebuild or refresh is requested or under way"


def rebuilt(ref: TableRef) -> re.Pattern[str]:
    return re.compile(rf"table \S*{re.escape(ref.name)}: its rebuild's snapshot completed")


def write_config(tmp: Path, tables: Path, ref: TableRef, *, settle_s: int, signal_table: str | None = None) -> Path:
    """The audit of ``ref`` every 2 s; ``signal_table`` for MySQL/MariaDB's lag gate.

    settle_s bounds a round's wait for the source's position (on Postgres Debezium's slot to confirm it: a second or
    two with ``ticking`` on shared_stack, which commits offsets every second) and Fabric (the double) to apply: a
    round that began while the double was stopped (fault 3) waits all of it and judges nothing (a round out of time
    judges nothing too).
    """
    config = tmp / "config.yaml"
    config.write_text(
        "mirror:\n"
        "  rebuild:\n"
        "    wait_s: 1\n"
        "  audit:\n"
        "    enabled: true\n"
        "    interval_s: 2\n"
        f"    tables: [{ref.id}]\n"
        "    source_url: ${env:AUDIT_E2E_SOURCE_URL}\n"
        + ("" if signal_table is None else f"    signal_table: {signal_table}\n")
        + f"    tables_path: {tables}\n"
        f"    settle_s: {settle_s}\n"
    )
    return config


class Run:
    """``python -m connector run`` with the audit on, logging to a file the test reads the audit's lines from."""

    def __init__(  # noqa: PLR0913 - the stack, the table and the audit's source settings, each named
        self,
        stack: dict[str, str],
        tmp: Path,
        fabric: FabricReplicatorDouble,
        ref: TableRef,
        *,
        source_url: str,
        settle_s: int,
        signal_table: str | None = None,
    ) -> None:
        self.ref = ref
        self.log_path = tmp / "connector.log"
        config = write_config(tmp, fabric.tables, ref, settle_s=settle_s, signal_table=signal_table)
        command = [sys.executable, "-m", "connector", "run", "--config", str(config)]
        command += ["--bootstrap-servers", stack["bootstrap.servers"]]
        command += ["--topics", re.escape(stack["topic_prefix"]) + rf"\.{ref.schema}\.{ref.name}"]
        command += ["--landing-zone", str(fabric.landing_zone), "--checkpoint", str(tmp / "cp")]
        command += ["--trigger", "1s", "--metrics-port", "0"]
        env = {**os.environ, "AUDIT_E2E_SOURCE_URL": source_url}
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def judged(self, since: int) -> list[tuple[str, str]]:
        """The audit's judgements of the table logged after offset ``since``: ("clean", "") or (line, repair)."""
        return [(m.group(1), m.group(2) or "") for m in audit_line(self.ref).finditer(self.text()[since:])]

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
    done_line = rebuilt(run.ref)
    wait_until("the rebuild's snapshot to complete", lambda: done_line.search(run.text(), since), run)
    done = done_line.search(run.text(), since)
    assert done is not None
    during = run.text()[since : done.start()]
    assert not audit_line(run.ref).search(during), f"judged while rebuilt: {during[-3000:]}"
    assert repair_line(run.ref) not in during, during[-3000:]
    assert left_out(run.ref) in during, f"no round reached the table while it was rebuilt: {during[-3000:]}"
    wait_until("a judgement after the rebuild", lambda: run.judged(done.end()), run)
    assert run.judged(done.end())[0] == ("clean", ""), run.judged(done.end())


def held(fabric: FabricReplicatorDouble, ref: TableRef) -> dict[int, tuple[object, ...]]:
    """The double's Delta table of ``ref`` (columns id, name, qty): id → (name, qty); empty before it exists."""
    path = fabric.table_dir(ref)
    if not (path / "_delta_log").is_dir():
        return {}
    rows = DeltaTable(str(path)).to_pyarrow_table(columns=["id", "name", "qty"]).to_pylist()
    return {row["id"]: (row["name"], row["qty"]) for row in rows}


def file_numbers(fabric: FabricReplicatorDouble, ref: TableRef, *, waiting_only: bool = False) -> list[int]:
    folder = fabric.landing_zone / ref.folder
    paths = list(folder.glob("0*.parquet"))
    if not waiting_only:
        paths += list((folder / PROCESSED).glob("0*.parquet"))
    return sorted(int(path.name.split(".")[0]) for path in paths)


def tamper_with_fabrics_table(fabric: FabricReplicatorDouble, run: Run) -> None:
    """(1) A row changed behind the connector's back in the Delta table: re-read through Debezium."""
    since = len(run.text())
    DeltaTable(str(fabric.table_dir(run.ref))).update(predicate="id = 5", updates={"name": "'tampered'"})
    found_and_repaired(run, since, "rows")
    assert held(fabric, run.ref)[5] == ("item 5", 5)


def lose_a_file_before_fabric_took_it(execute: Execute, table: str, fabric: FabricReplicatorDouble, run: Run) -> None:
    """(3) A file removed from the landing zone before the double read it: the table is rebuilt.

    ``table``: the source's table as ``execute``'s SQL names it.
    """
    ref = run.ref
    fabric.stop()
    fabric.poll()  # take what the last repair published after the double's last round (seen in CI on Intel Xeon)
    assert not file_numbers(fabric, ref, waiting_only=True), fabric.stopped
    last = file_numbers(fabric, ref)[-1]
    execute(f"UPDATE {table} SET qty = qty + 1000 WHERE id = 10")
    wait_until("the connector to publish the update", lambda: file_numbers(fabric, ref, waiting_only=True), run)
    lost = file_numbers(fabric, ref, waiting_only=True)
    assert lost == [last + 1], lost
    since = len(run.text())
    (fabric.landing_zone / ref.folder / f"{lost[0]:020d}.parquet").unlink()
    execute(f"UPDATE {table} SET qty = qty + 1000 WHERE id = 11")
    wait_until("the connector to publish the next update", lambda: file_numbers(fabric, ref, waiting_only=True), run)
    fabric.start()
    found_and_repaired(run, since, "rebuild")
    text = run.text()
    asked = text.index("\n", text.index(f"{repair_line(ref)} rebuild requested", since))  # the audit's own request
    rebuilt_unjudged(run, asked)
    assert held(fabric, ref)[10] == ("item 10", 1010) and held(fabric, ref)[11] == ("item 11", 1011)


def rebuild_while_rounds_run(execute: Execute, table: str, run: Run, checkpoint: Path) -> None:
    """(4) An operator's ``rebuild`` while rounds run: the table is left out until the rebuild completed."""
    requested = run_connector("rebuild", run.ref.id, "--checkpoint", str(checkpoint))
    assert requested.returncode == 0, requested.stdout + requested.stderr
    since = len(run.text())  # the request is written: from here on no round judges the table
    execute(f"UPDATE {table} SET qty = qty + 1000 WHERE id = 12")  # a change during the rebuild
    rebuilt_unjudged(run, since)
