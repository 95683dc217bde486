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
import contextlib
import os
import random
import re
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.cpu import cpu_model
from benchmarks.initial_load_files import finished, loadavg, stack
from benchmarks.service import Connector, start_connector
from tests.support.fabric_replicator_double import FabricReplicatorDouble

TABLE = "soak_items"
JUDGED = re.compile(rf"audit public\.{TABLE}: (clean|\d+ differences.*|the mirror did not catch up.*)")
TICK_S = 0.1


def init_sql(rows: int) -> str:
    return (
        f"CREATE TABLE public.{TABLE} (id int PRIMARY KEY, qty int NOT NULL, note text);\n"
        f"INSERT INTO public.{TABLE} SELECT g, g, 'row ' || g FROM generate_series(1, {rows}) g;\n"
    )


def write_config(  # noqa: PLR0913 - the audit's settings, each named
    work: Path,
    tables: Path,
    args: argparse.Namespace,
    *,
    enabled: bool = True,
    name: str = "config.yaml",
    max_rows_per_s: float | None = None,
) -> Path:
    """The service's YAML: the audit of the table every ``args.interval_s`` (``enabled: false``: the same, off).

    ``max_rows_per_s``: ``mirror.audit.max_rows_per_s`` (its default when ``None``).
    """
    config = work / name
    config.write_text(
        "mirror:\n"
        "  audit:\n"
        f"    enabled: {'true' if enabled else 'false'}\n"
        f"    interval_s: {args.interval_s}\n"
        f"    tables: [public.{TABLE}]\n"
        "    source_url: ${env:AUDIT_SOAK_SOURCE_URL}\n"
        f"    tables_path: {tables}\n"
        f"    settle_s: {args.settle_s}\n"
        + ("" if max_rows_per_s is None else f"    max_rows_per_s: {max_rows_per_s}\n")
    )
    return config


def table_topic(values: dict[str, str]) -> str:
    """The regex of the table's Debezium topic on the stack."""
    return re.escape(values["topic_prefix"]) + rf"\.public\.{TABLE}"


def start_service(  # noqa: PLR0913 - the run's shared state, passed down unchanged
    values: dict[str, str],
    fabric: FabricReplicatorDouble,
    config: Path,
    checkpoint: Path,
    trigger: str,
    log: Path,
    *,
    topics: str | None = None,
) -> Connector:
    """``python -m connector run`` on the stack's topic (or ``topics``), into the double's landing zone."""
    run_args = ["--config", str(config), "--bootstrap-servers", values["bootstrap.servers"]]
    run_args += ["--topics", topics or table_topic(values)]
    run_args += ["--landing-zone", str(fabric.landing_zone), "--checkpoint", str(checkpoint)]
    run_args += ["--trigger", trigger, "--metrics-port", "0"]
    return start_connector(run_args, log, env={"AUDIT_SOAK_SOURCE_URL": values["postgres"]})


def wait_for_clean_audit(connector: Connector, timeout_s: float = 900) -> bool:
    """Wait until the service logs a clean audit of the table (the initial load mirrored in Fabric's table)."""
    deadline = time.monotonic() + timeout_s
    while "clean" not in judgements(connector.log_path):
        if time.monotonic() > deadline or connector.process.poll() is not None:
            print(f"no clean first audit (connector exit {connector.process.poll()}); see {connector.log_path}")
            return False
        time.sleep(1)
    return True


@contextlib.contextmanager
def audit_stack(state_dir: Path, work: Path, rows: int, down: Sequence[str] = ("down",)) -> Iterator[dict[str, str]]:
    """``stack.sh up`` with the table of ``rows`` rows (fresh ``state_dir`` and ``work``); ``down`` at the end.

    The state dir is deleted afterwards unless ``SOAK_KEEP_STATE=1``.
    """
    for folder in (state_dir, work):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    state_dir.chmod(0o755)  # Postgres runs as another user when we are root
    sql = state_dir / "init.sql"
    sql.write_text(init_sql(rows), encoding="utf-8")
    try:
        yield finished(stack(state_dir, "up", "--schemas", "public", "--init-sql", str(sql)), "stack.sh up")
    finally:
        stack(state_dir, *down).communicate(timeout=600)
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
    config = write_config(args.work, fabric.tables, args)
    log = args.work / "connector.log"
    connector = start_service(values, fabric, config, args.work / "cp", args.trigger, log)
    writer = Writer(values["postgres"], args.rows, args.rate)
    try:
        if not wait_for_clean_audit(connector):
            return 2
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
    with audit_stack(args.state_dir, args.work, args.rows) as values:
        return soak(args, values)


if __name__ == "__main__":
    raise SystemExit(main())
