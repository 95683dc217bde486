"""The continuous audit under a steady write load: does it ever report a difference that is not there? (issue 43)

Not part of the suite: it runs for ``--minutes`` (10 by default) on its own ``deploy/local/stack.sh`` (Postgres →
Debezium → Kafka) with ``python -m connector run`` (``mirror.audit`` on, every ``--interval-s``) publishing into the
Fabric replicator DOUBLE (``tests.support.fabric_replicator_double``: Fabric cannot run here), which applies the files
to Delta tables under ``Tables/`` as Fabric would. A writer keeps ``--rate`` row changes a second on one table
(70 % updates, 15 % deletes, 15 % inserts, in transactions of a tenth of a second's changes), so rows change while
the audit reads them. Nothing is broken on purpose: every difference the audit reports is a false one, and is
printed as the connector logs it. Run it under the heavy-test lock on a quiet machine::

    flock /tmp/e2e.lock .venv/bin/python -m benchmarks.audit_soak --minutes 10 --state-dir /tmp/soak-state \\
        --work /tmp/soak-work

It prints the changes written and the rate reached, the audit's judgements (clean, differing, mirror lagging) and
every difference line, and exits 1 when there was one.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.cpu import cpu_model
from benchmarks.initial_load_files import finished, loadavg, stack
from benchmarks.service import start_connector
from tests.support.fabric_replicator_double import FabricReplicatorDouble

TABLE = "soak_items"
JUDGED = re.compile(rf"audit public\.{TABLE}: (clean|\d+ differences.*|the mirror did not catch up.*)")
TICK_S = 0.1


def init_sql(rows: int) -> str:
    return (
        f"CREATE TABLE public.{TABLE} (id int PRIMARY KEY, qty int NOT NULL, note text);\n"
        f"INSERT INTO public.{TABLE} SELECT g, g, 'row ' || g FROM generate_series(1, {rows}) g;\n"
    )


def write_config(work: Path, tables: Path, args: argparse.Namespace) -> Path:
    config = work / "config.yaml"
    config.write_text(
        "mirror:\n"
        "  audit:\n"
        "    enabled: true\n"
        f"    interval_s: {args.interval_s}\n"
        f"    tables: [public.{TABLE}]\n"
        "    source_url: ${env:AUDIT_SOAK_SOURCE_URL}\n"
        f"    tables_path: {tables}\n"
        f"    settle_s: {args.settle_s}\n"
    )
    return config


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
        import psycopg

        rng = random.Random(43)
        present, next_id = list(range(1, self.rows + 1)), self.rows + 1
        per_tick = max(1, round(self.rate * TICK_S))
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                started = time.monotonic()
                while not self.stop.is_set():
                    deletes = [present.pop(rng.randrange(len(present))) for _ in range(per_tick * 15 // 100)]
                    inserts = list(range(next_id, next_id + len(deletes)))
                    next_id += len(inserts)
                    updates = rng.sample(present, per_tick - 2 * len(deletes))
                    with conn.transaction():
                        conn.execute(f"UPDATE public.{TABLE} SET qty = qty + 1 WHERE id = ANY(%s)", (updates,))
                        conn.execute(f"DELETE FROM public.{TABLE} WHERE id = ANY(%s)", (deletes,))
                        conn.execute(
                            f"INSERT INTO public.{TABLE} SELECT g, g, 'new ' || g FROM unnest(%s::int[]) g", (inserts,)
                        )
                    present += inserts
                    self.changes += len(updates) + 2 * len(deletes)
                    behind = started + (self.changes / self.rate) - time.monotonic()
                    if behind > 0:
                        self.stop.wait(behind)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc


def judgements(log: Path) -> list[str]:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [match.group(1) for match in JUDGED.finditer(text)]


def soak(args: argparse.Namespace, values: dict[str, str]) -> int:
    """Start the double and the connector, wait for a first clean audit, write for ``--minutes``, report."""
    fabric = FabricReplicatorDouble(args.work / "item", retention_s=60, interval_s=1).start()
    topics = re.escape(values["topic_prefix"]) + rf"\.public\.{TABLE}"
    config = write_config(args.work, fabric.tables, args)
    run_args = ["--config", str(config), "--bootstrap-servers", values["bootstrap.servers"], "--topics", topics]
    run_args += ["--landing-zone", str(fabric.landing_zone), "--checkpoint", str(args.work / "cp")]
    run_args += ["--trigger", args.trigger, "--metrics-port", "0"]
    log = args.work / "connector.log"
    connector = start_connector(run_args, log, env={"AUDIT_SOAK_SOURCE_URL": values["postgres"]})
    writer = Writer(values["postgres"], args.rows, args.rate)
    try:
        deadline = time.monotonic() + 900
        while "clean" not in judgements(log):
            if time.monotonic() > deadline or connector.process.poll() is not None:
                print(f"no clean first audit (connector exit {connector.process.poll()}); see {log}")
                return 2
            time.sleep(1)
        before = len(judgements(log))
        print(f"initial load mirrored and audited clean; writing {args.rate} changes/s for {args.minutes} min")
        thread = threading.Thread(target=writer.run, name="soak-writer", daemon=True)
        started = time.monotonic()
        thread.start()
        _watch(log, before, started + args.minutes * 60, connector.process.poll)
        writer.stop.set()
        thread.join()
        elapsed = time.monotonic() - started
    finally:
        writer.stop.set()
        connector.stop()
        fabric.stop()
    return _report(judgements(log)[before:], writer, elapsed)


def _watch(log: Path, seen: int, until: float, exited: object) -> None:
    """Print each judgement as the connector logs it, until ``until`` or the connector exits."""
    while time.monotonic() < until:
        found = judgements(log)
        for line in found[seen:]:
            print(("FALSE DIFFERENCE: " if "differences" in line else "  ") + line, flush=True)
        seen = len(found)
        if callable(exited) and exited() is not None:
            print("the connector exited early")
            return
        time.sleep(2)


def _report(judged: list[str], writer: Writer, elapsed: float) -> int:
    differing = [line for line in judged if "differences" in line]
    clean = sum(1 for line in judged if line == "clean")
    print(f"changes written: {writer.changes} in {elapsed:.0f} s ({writer.changes / max(elapsed, 1e-9):.0f}/s)")
    if writer.error is not None:
        print(f"the writer failed: {writer.error}")
    print(
        f"audit judgements: {len(judged)} ({clean} clean, {len(differing)} differing, "
        f"{len(judged) - clean - len(differing)} mirror lagging)"
    )
    print(f"cpu: {cpu_model()}; load average after: {loadavg()}")
    return 1 if differing or writer.error is not None else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=1000, help="row changes per second")
    parser.add_argument("--rows", type=int, default=20_000, help="rows of the table at the start")
    parser.add_argument("--interval-s", type=float, default=30.0, help="mirror.audit.interval_s")
    parser.add_argument("--settle-s", type=float, default=120.0, help="mirror.audit.settle_s")
    parser.add_argument("--trigger", default="5s")
    parser.add_argument("--state-dir", type=Path, required=True, help="the stack's state (deleted at the end)")
    parser.add_argument("--work", type=Path, required=True, help="landing zone, double, checkpoint, connector log")
    args = parser.parse_args(argv)
    print(f"load average before: {loadavg()} (on a busy machine the figures mean little)")
    for folder in (args.state_dir, args.work):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    args.state_dir.chmod(0o755)  # Postgres runs as another user when we are root
    sql = args.state_dir / "init.sql"
    sql.write_text(init_sql(args.rows), encoding="utf-8")
    values = finished(stack(args.state_dir, "up", "--schemas", "public", "--init-sql", str(sql)), "stack.sh up")
    try:
        return soak(args, values)
    finally:
        stack(args.state_dir, "down").communicate(timeout=600)
        if os.environ.get("SOAK_KEEP_STATE") != "1":
            shutil.rmtree(args.state_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
