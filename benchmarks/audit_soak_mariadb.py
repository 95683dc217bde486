"""The continuous audit on MariaDB under a steady write load: does it ever report a difference that is not there?

The MariaDB twin of ``benchmarks/audit_soak.py`` (issue 55), not part of the suite: it runs for ``--minutes`` (5 by
default) on its own ``stack.sh up --source mariadb`` (MariaDB → Debezium MariaDB → Kafka) with ``python -m connector
run`` (``mirror.audit`` on, every ``--interval-s``; its lag gate a mark row in Debezium's signalling table seen back
in Kafka) publishing into the Fabric replicator DOUBLE, which applies the files to Delta tables under ``Tables/``. A
writer keeps ``--rate`` row changes a second on one table (70 % updates, 15 % deletes, 15 % inserts, in
transactions of a tenth of a second's changes). Nothing is broken on purpose: every difference the audit reports is
a false one, and is printed as the connector logs it::

    flock /tmp/e2e.lock .venv/bin/python -m benchmarks.audit_soak_mariadb --minutes 5 --state-dir /tmp/soak-maria \\
        --work /tmp/soak-maria-work

It prints the changes written and the rate reached, the audit's judgements (clean, differing, mirror lagging) and
every difference line, and exits 1 when there was one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.audit_soak import TICK_S, _report
from benchmarks.initial_load_files import finished, loadavg, stack
from benchmarks.service import Connector, start_connector
from tests.support.fabric_replicator_double import FabricReplicatorDouble

TABLE = "soak_maria"
SIGNAL_TABLE = "debezium.debezium_signal"  # deploy/local/stack-mariadb.sh
JUDGED = re.compile(rf"audit mirror\.{TABLE}: (clean|\d+ differences.*|the mirror did not catch up.*)")


def init_sql(rows: int) -> str:
    return (
        f"CREATE TABLE {TABLE} (id int PRIMARY KEY, qty int NOT NULL, note varchar(64));\n"
        f"INSERT INTO {TABLE} SELECT seq, seq, CONCAT('row ', seq) FROM seq_1_to_{rows};\n"
    )


def write_config(work: Path, tables: Path, args: argparse.Namespace) -> Path:
    config = work / "config.yaml"
    config.write_text(
        "mirror:\n"
        "  audit:\n"
        "    enabled: true\n"
        f"    interval_s: {args.interval_s}\n"
        f"    tables: [mirror.{TABLE}]\n"
        "    source_url: ${env:AUDIT_SOAK_SOURCE_URL}\n"
        f"    signal_table: {SIGNAL_TABLE}\n"
        f"    tables_path: {tables}\n"
        f"    settle_s: {args.settle_s}\n"
    )
    return config


@contextlib.contextmanager
def maria_stack(state_dir: Path, work: Path, rows: int) -> Iterator[dict[str, str]]:
    """``stack.sh up --source mariadb`` with the table of ``rows`` rows (fresh dirs); ``down`` at the end."""
    for folder in (state_dir, work):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    state_dir.chmod(0o755)  # MariaDB runs as another user when we are root
    sql = state_dir / "init.sql"
    sql.write_text(init_sql(rows), encoding="utf-8")
    try:
        yield finished(stack(state_dir, "up", "--source", "mariadb", "--init-sql", str(sql)), "stack.sh up")
    finally:
        stack(state_dir, "down").communicate(timeout=600)
        if os.environ.get("SOAK_KEEP_STATE") != "1":
            shutil.rmtree(state_dir, ignore_errors=True)


@dataclass
class Writer:
    """``rate`` row changes a second on the table until ``stop`` (updates, deletes and inserts of fresh keys)."""

    url: str
    rows: int
    rate: int
    changes: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        from tests.e2e.mirror_source import connect_mariadb

        rng = random.Random(55)
        present, next_id = list(range(1, self.rows + 1)), self.rows + 1
        per_tick = max(1, round(self.rate * TICK_S))
        try:
            conn = connect_mariadb(self.url)
            try:
                started = time.monotonic()
                while not self.stop.is_set():
                    next_id = self._tick(conn, rng, present, next_id, per_tick)
                    behind = started + (self.changes / self.rate) - time.monotonic()
                    if behind > 0:
                        self.stop.wait(behind)
            finally:
                conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc

    def _tick(self, conn: object, rng: random.Random, present: list[int], next_id: int, per_tick: int) -> int:
        """One transaction: updates, deletes and as many inserts of fresh keys; the next fresh key."""
        deletes = [present.pop(rng.randrange(len(present))) for _ in range(per_tick * 15 // 100)]
        inserts = list(range(next_id, next_id + len(deletes)))
        updates = rng.sample(present, per_tick - 2 * len(deletes))
        with conn.cursor() as cursor:  # type: ignore[attr-defined]
            cursor.execute("START TRANSACTION")
            if updates:
                cursor.execute(f"UPDATE {TABLE} SET qty = qty + 1 WHERE id IN ({_ints(updates)})")
            if deletes:
                cursor.execute(f"DELETE FROM {TABLE} WHERE id IN ({_ints(deletes)})")
            if inserts:
                values = ", ".join(f"({k}, {k}, 'new {k}')" for k in inserts)
                cursor.execute(f"INSERT INTO {TABLE} VALUES {values}")
            cursor.execute("COMMIT")
        present += inserts
        self.changes += len(updates) + 2 * len(deletes)
        return next_id + len(inserts)


def _ints(keys: list[int]) -> str:
    return ", ".join(str(int(k)) for k in keys)


def judgements(log: Path) -> list[str]:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [match.group(1) for match in JUDGED.finditer(text)]


def soak(args: argparse.Namespace, values: dict[str, str]) -> int:
    """Start the double and the connector, wait for a first clean audit, write for ``--minutes``, report."""
    fabric = FabricReplicatorDouble(args.work / "item", retention_s=60, interval_s=1).start()
    config = write_config(args.work, fabric.tables, args)
    log = args.work / "connector.log"
    run_args = ["--config", str(config), "--bootstrap-servers", values["bootstrap.servers"]]
    run_args += ["--topics", re.escape(values["topic_prefix"]) + rf"\.mirror\.{TABLE}"]
    run_args += ["--landing-zone", str(fabric.landing_zone), "--checkpoint", str(args.work / "cp")]
    run_args += ["--trigger", args.trigger, "--metrics-port", "0"]
    connector = start_connector(run_args, log, env={"AUDIT_SOAK_SOURCE_URL": values["mariadb"]})
    writer = Writer(values["mariadb"], args.rows, args.rate)
    try:
        if not _first_clean(connector):
            return 2
        before = len(judgements(log))
        print(f"initial load mirrored and audited clean; writing {args.rate} changes/s for {args.minutes} min")
        thread = threading.Thread(target=writer.run, name="soak-writer", daemon=True)
        started = time.monotonic()
        thread.start()
        _watch(log, before, started + args.minutes * 60, connector)
        writer.stop.set()
        thread.join()
        elapsed = time.monotonic() - started
    finally:
        writer.stop.set()
        connector.stop()
        fabric.stop()
    return _report(judgements(log)[before:], writer, elapsed)  # type: ignore[arg-type]


def _first_clean(connector: Connector, timeout_s: float = 900) -> bool:
    deadline = time.monotonic() + timeout_s
    while "clean" not in judgements(connector.log_path):
        if time.monotonic() > deadline or connector.process.poll() is not None:
            print(f"no clean first audit (connector exit {connector.process.poll()}); see {connector.log_path}")
            return False
        time.sleep(1)
    return True


def _watch(log: Path, seen: int, until: float, connector: Connector) -> None:
    """Print each judgement as the connector logs it, until ``until`` or the connector exits."""
    while time.monotonic() < until:
        found = judgements(log)
        for line in found[seen:]:
            print(("FALSE DIFFERENCE: " if "differences" in line else "  ") + line, flush=True)
        seen = len(found)
        if connector.process.poll() is not None:
            print("the connector exited early")
            return
        time.sleep(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=500, help="row changes per second")
    parser.add_argument("--rows", type=int, default=20_000, help="rows of the table at the start")
    parser.add_argument("--interval-s", type=float, default=20.0, help="mirror.audit.interval_s")
    parser.add_argument("--settle-s", type=float, default=120.0, help="mirror.audit.settle_s")
    parser.add_argument("--trigger", default="5s")
    parser.add_argument("--state-dir", type=Path, required=True, help="the stack's state (deleted at the end)")
    parser.add_argument("--work", type=Path, required=True, help="landing zone, double, checkpoint, connector log")
    args = parser.parse_args(argv)
    print(f"load average before: {loadavg()} (on a busy machine the figures mean little)")
    with maria_stack(args.state_dir, args.work, args.rows) as values:
        return soak(args, values)


if __name__ == "__main__":
    raise SystemExit(main())
