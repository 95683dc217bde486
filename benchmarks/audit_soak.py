"""The continuous audit under a steady write load: does it ever report a difference that is not there? (issue 43)

Not part of the suite: it runs for ``--minutes`` on its own ``deploy/local/stack.sh`` with ``python -m connector
run`` (``mirror.audit`` on, every ``--interval-s``) publishing into the Fabric replicator DOUBLE
(``tests.support.fabric_replicator_double``: Fabric cannot run here), which applies the files to Delta tables under
``Tables/`` as Fabric would. ``--source`` picks the stack: ``postgres`` (the default: Postgres → Debezium → Kafka;
10 minutes, 1,000 changes/s, the audit every 30 s by default) or ``mariadb`` (issue 55: ``stack.sh up --source
mariadb``, MariaDB → Debezium MariaDB → Kafka, the audit's lag gate a mark row in Debezium's signalling table seen
back in Kafka; 5 minutes, 500 changes/s, every 20 s by default). A writer keeps ``--rate`` row changes a second on
one table (70 % updates, 15 % deletes, 15 % inserts, in transactions of a tenth of a second's changes), so rows
change while the audit reads them. Nothing is broken on purpose: every difference the audit reports is a false one,
and is printed as the connector logs it. Run it under the heavy-test lock on a quiet machine::

    flock /tmp/e2e.lock .venv/bin/python -m benchmarks.audit_soak --minutes 10 --state-dir /tmp/soak-state \\
        --work /tmp/soak-work
    flock /tmp/e2e.lock .venv/bin/python -m benchmarks.audit_soak --source mariadb --minutes 5 \\
        --state-dir /tmp/soak-maria --work /tmp/soak-maria-work

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.cpu import cpu_model
from benchmarks.initial_load_files import finished, loadavg, stack
from benchmarks.service import Connector, start_connector
from tests.support.fabric_replicator_double import FabricReplicatorDouble

TABLE = "soak_items"
"""Postgres's soak table (``public.soak_items``; ``benchmarks.bench_audit_stream`` audits it too)."""
TICK_S = 0.1


def _ints(keys: list[int]) -> str:
    return ", ".join(str(int(k)) for k in keys)


def _postgres_connection(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _postgres_write(conn: Any, table: str, updates: list[int], deletes: list[int], inserts: list[int]) -> None:
    with conn.transaction():
        conn.execute(f"UPDATE {table} SET qty = qty + 1 WHERE id = ANY(%s)", (updates,))
        conn.execute(f"DELETE FROM {table} WHERE id = ANY(%s)", (deletes,))
        conn.execute(f"INSERT INTO {table} SELECT g, g, 'new ' || g FROM unnest(%s::int[]) g", (inserts,))


def _mariadb_connection(url: str) -> Any:
    from tests.e2e.mirror_source import connect_mariadb

    return contextlib.closing(connect_mariadb(url))


def _mariadb_write(conn: Any, table: str, updates: list[int], deletes: list[int], inserts: list[int]) -> None:
    with conn.cursor() as cursor:
        cursor.execute("START TRANSACTION")
        if updates:
            cursor.execute(f"UPDATE {table} SET qty = qty + 1 WHERE id IN ({_ints(updates)})")
        if deletes:
            cursor.execute(f"DELETE FROM {table} WHERE id IN ({_ints(deletes)})")
        if inserts:
            values = ", ".join(f"({k}, {k}, 'new {k}')" for k in inserts)
            cursor.execute(f"INSERT INTO {table} VALUES {values}")
        cursor.execute("COMMIT")


@dataclass(frozen=True)
class Source:
    """What differs between the sources: the table, its stack, the audit's settings and the writer's SQL."""

    name: str
    """``stack.sh``'s value of the source's URL (``postgres``, ``mariadb``)."""
    schema: str
    """The audited table's schema in the mirror (``public``; MariaDB's database ``mirror``)."""
    table: str
    create_sql: str
    """The init SQL's ``{rows}`` rows: ``{table}`` and ``{rows}`` filled in."""
    sql_table: str
    """The table as the writer's SQL names it."""
    stack_up: tuple[str, ...]
    """``stack.sh up``'s arguments before ``--init-sql``."""
    signal_table: str | None
    """``mirror.audit.signal_table`` (MySQL/MariaDB's lag gate), or none."""
    seed: int
    connection: Callable[[str], Any]
    """An autocommit connection to the source's URL, as a context manager that closes it."""
    write: Callable[[Any, str, list[int], list[int], list[int]], None]
    """One transaction: the updates, the deletes and the inserts (each list may be empty)."""
    defaults: dict[str, float]
    """The run's ``--minutes``, ``--rate`` and ``--interval-s`` unless given."""

    @property
    def audited(self) -> str:
        """The table's name in the audit's settings and lines."""
        return f"{self.schema}.{self.table}"

    @property
    def judged(self) -> re.Pattern[str]:
        return re.compile(rf"audit {re.escape(self.audited)}: (clean|\d+ differences.*|the mirror did not catch up.*)")

    def init_sql(self, rows: int) -> str:
        return self.create_sql.format(table=self.table, rows=rows)


POSTGRES = Source(
    name="postgres",
    schema="public",
    table=TABLE,
    create_sql=(
        "CREATE TABLE public.{table} (id int PRIMARY KEY, qty int NOT NULL, note text);\n"
        "INSERT INTO public.{table} SELECT g, g, 'row ' || g FROM generate_series(1, {rows}) g;\n"
    ),
    sql_table=f"public.{TABLE}",
    stack_up=("--schemas", "public"),
    signal_table=None,
    seed=43,
    connection=_postgres_connection,
    write=_postgres_write,
    defaults={"minutes": 10.0, "rate": 1000, "interval_s": 30.0},
)
MARIADB = Source(
    name="mariadb",
    schema="mirror",
    table="soak_maria",
    create_sql=(
        "CREATE TABLE {table} (id int PRIMARY KEY, qty int NOT NULL, note varchar(64));\n"
        "INSERT INTO {table} SELECT seq, seq, CONCAT('row ', seq) FROM seq_1_to_{rows};\n"
    ),
    sql_table="soak_maria",
    stack_up=("--source", "mariadb"),
    signal_table="debezium.debezium_signal",  # deploy/local/stack-mariadb.sh
    seed=55,
    connection=_mariadb_connection,
    write=_mariadb_write,
    defaults={"minutes": 5.0, "rate": 500, "interval_s": 20.0},
)
SOURCES = {source.name: source for source in (POSTGRES, MARIADB)}


def init_sql(rows: int, source: Source = POSTGRES) -> str:
    return source.init_sql(rows)


def write_config(  # noqa: PLR0913 - the audit's settings, each named
    work: Path,
    tables: Path,
    args: argparse.Namespace,
    *,
    enabled: bool = True,
    name: str = "config.yaml",
    max_rows_per_s: float | None = None,
    source: Source = POSTGRES,
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
        f"    tables: [{source.audited}]\n"
        "    source_url: ${env:AUDIT_SOAK_SOURCE_URL}\n"
        + ("" if source.signal_table is None else f"    signal_table: {source.signal_table}\n")
        + f"    tables_path: {tables}\n"
        f"    settle_s: {args.settle_s}\n"
        + ("" if max_rows_per_s is None else f"    max_rows_per_s: {max_rows_per_s}\n")
    )
    return config


def table_topic(values: dict[str, str], source: Source = POSTGRES) -> str:
    """The regex of the table's Debezium topic on the stack."""
    return re.escape(values["topic_prefix"]) + rf"\.{source.schema}\.{source.table}"


def start_service(  # noqa: PLR0913 - the run's shared state, passed down unchanged
    values: dict[str, str],
    fabric: FabricReplicatorDouble,
    config: Path,
    checkpoint: Path,
    trigger: str,
    log: Path,
    *,
    topics: str | None = None,
    source: Source = POSTGRES,
) -> Connector:
    """``python -m connector run`` on the stack's topic (or ``topics``), into the double's landing zone."""
    run_args = ["--config", str(config), "--bootstrap-servers", values["bootstrap.servers"]]
    run_args += ["--topics", topics or table_topic(values, source)]
    run_args += ["--landing-zone", str(fabric.landing_zone), "--checkpoint", str(checkpoint)]
    run_args += ["--trigger", trigger, "--metrics-port", "0"]
    return start_connector(run_args, log, env={"AUDIT_SOAK_SOURCE_URL": values[source.name]})


def wait_for_clean_audit(connector: Connector, timeout_s: float = 900, source: Source = POSTGRES) -> bool:
    """Wait until the service logs a clean audit of the table (the initial load mirrored in Fabric's table)."""
    deadline = time.monotonic() + timeout_s
    while "clean" not in judgements(connector.log_path, source):
        if time.monotonic() > deadline or connector.process.poll() is not None:
            print(f"no clean first audit (connector exit {connector.process.poll()}); see {connector.log_path}")
            return False
        time.sleep(1)
    return True


@contextlib.contextmanager
def audit_stack(
    state_dir: Path, work: Path, rows: int, down: Sequence[str] = ("down",), source: Source = POSTGRES
) -> Iterator[dict[str, str]]:
    """``stack.sh up`` with the table of ``rows`` rows (fresh ``state_dir`` and ``work``); ``down`` at the end.

    The state dir is deleted afterwards unless ``SOAK_KEEP_STATE=1``.
    """
    for folder in (state_dir, work):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    state_dir.chmod(0o755)  # the database runs as another user when we are root
    sql = state_dir / "init.sql"
    sql.write_text(source.init_sql(rows), encoding="utf-8")
    try:
        yield finished(stack(state_dir, "up", *source.stack_up, "--init-sql", str(sql)), "stack.sh up")
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
    source: Source = POSTGRES
    changes: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(self.source.seed)
        present, next_id = list(range(1, self.rows + 1)), self.rows + 1
        per_tick = max(1, round(self.rate * TICK_S))
        try:
            with self.source.connection(self.url) as conn:
                started = time.monotonic()
                while not self.stop.is_set():
                    deletes = [present.pop(rng.randrange(len(present))) for _ in range(per_tick * 15 // 100)]
                    inserts = list(range(next_id, next_id + len(deletes)))
                    next_id += len(inserts)
                    updates = rng.sample(present, per_tick - 2 * len(deletes))
                    self.source.write(conn, self.source.sql_table, updates, deletes, inserts)
                    present += inserts
                    self.changes += len(updates) + 2 * len(deletes)
                    behind = started + (self.changes / self.rate) - time.monotonic()
                    if behind > 0:
                        self.stop.wait(behind)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc


def judgements(log: Path, source: Source = POSTGRES) -> list[str]:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [match.group(1) for match in source.judged.finditer(text)]


def soak(args: argparse.Namespace, values: dict[str, str], source: Source = POSTGRES) -> int:
    """Start the double and the connector, wait for a first clean audit, write for ``--minutes``, report."""
    fabric = FabricReplicatorDouble(args.work / "item", retention_s=60, interval_s=1).start()
    config = write_config(args.work, fabric.tables, args, source=source)
    log = args.work / "connector.log"
    connector = start_service(values, fabric, config, args.work / "cp", args.trigger, log, source=source)
    writer = Writer(values[source.name], args.rows, args.rate, source)
    try:
        if not wait_for_clean_audit(connector, source=source):
            return 2
        before = len(judgements(log, source))
        print(f"initial load mirrored and audited clean; writing {args.rate} changes/s for {args.minutes} min")
        thread = threading.Thread(target=writer.run, name="soak-writer", daemon=True)
        started = time.monotonic()
        thread.start()
        _watch(log, before, started + args.minutes * 60, connector.process.poll, source)
        writer.stop.set()
        thread.join()
        elapsed = time.monotonic() - started
    finally:
        writer.stop.set()
        connector.stop()
        fabric.stop()
    return _report(judgements(log, source)[before:], writer, elapsed)


def _watch(log: Path, seen: int, until: float, exited: object, source: Source = POSTGRES) -> None:
    """Print each judgement as the connector logs it, until ``until`` or the connector exits."""
    while time.monotonic() < until:
        found = judgements(log, source)
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The run's arguments; ``--minutes``, ``--rate`` and ``--interval-s`` default by ``--source``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--source", choices=sorted(SOURCES), default=POSTGRES.name, help="the stack's source")
    parser.add_argument("--minutes", type=float, help="postgres 10, mariadb 5 by default")
    parser.add_argument("--rate", type=int, help="row changes per second (postgres 1000, mariadb 500 by default)")
    parser.add_argument("--rows", type=int, default=20_000, help="rows of the table at the start")
    parser.add_argument("--interval-s", type=float, help="mirror.audit.interval_s (postgres 30, mariadb 20 by default)")
    parser.add_argument("--settle-s", type=float, default=120.0, help="mirror.audit.settle_s")
    parser.add_argument("--trigger", default="5s")
    parser.add_argument("--state-dir", type=Path, required=True, help="the stack's state (deleted at the end)")
    parser.add_argument("--work", type=Path, required=True, help="landing zone, double, checkpoint, connector log")
    args = parser.parse_args(argv)
    for key, value in SOURCES[args.source].defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, type(value)(value))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    source = SOURCES[args.source]
    print(f"load average before: {loadavg()} (on a busy machine the figures mean little)")
    with audit_stack(args.state_dir, args.work, args.rows, source=source) as values:
        return soak(args, values, source)


if __name__ == "__main__":
    raise SystemExit(main())
