"""What a refresh after ``ADD COLUMN … DEFAULT`` costs beside the same table's initial load (issue 36), on the stack.

``ALTER TABLE big ADD COLUMN region text NOT NULL DEFAULT 'EU'`` rewrites no row in Postgres and sends no event for
them, so the connector refreshes the table (``mirror.schema_changes.column_added: refresh``): Debezium re-reads it
through an incremental snapshot, written as upserts into the same folder. This measures, on ``deploy/local/stack.sh``
(Postgres → Debezium → Kafka) with a ``big`` table of ``--rows`` rows and the connector as a service
(``--trigger 10s``, the defaults):

- the initial load: from the connector's start until every snapshot row is published;
- the refresh: from the ``ALTER`` (and one update that shows it) until every row was published again, the extra
  rows and files it published, and whether ``verify`` then finds the table exact (the new column included).

Debezium's incremental snapshot reads ``incremental.snapshot.chunk.size`` rows per chunk (Debezium's default 1024;
``--chunk-size``). The figures are printed with the CPU model and the load average::

    python -m benchmarks.schema_refresh --rows 1000000 --state-dir /tmp/sr-state --work /tmp/sr-work
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.cpu import cpu_model
from benchmarks.initial_load_files import finished, init_sql, loadavg, published_rows, stack, table_files, verify
from benchmarks.service import start_connector

TOPIC = "dbserver1.public.big"


@dataclass
class Figures:
    """The initial load and the refresh of one table."""

    rows: int
    chunk_size: int
    initial_load_s: float
    initial_files: int
    refresh_s: float
    refresh_rows: int
    refresh_files: int
    exact: bool
    cpu: str
    load_before: str
    load_after: str


def psql(values: dict[str, str], sql: str) -> None:
    """Run ``sql`` on the stack's database (psycopg, as verify reads it)."""
    import psycopg

    with psycopg.connect(values["postgres"], autocommit=True) as conn:
        conn.execute(sql)


def wait_rows(landing: Path, rows: int, connector_alive: Callable[[], bool], timeout_s: float = 7200) -> float:
    """Seconds until the table's files hold ``rows`` rows in all."""
    started = time.monotonic()
    while published_rows(landing) < rows:
        if time.monotonic() - started > timeout_s:
            msg = f"{published_rows(landing)} of {rows} rows published after {timeout_s} s"
            raise RuntimeError(msg)
        if not connector_alive():
            msg = "the connector exited"
            raise RuntimeError(msg)
        time.sleep(0.5)
    return time.monotonic() - started


def measure(args: argparse.Namespace) -> Figures:
    load = loadavg()
    sql = args.state_dir / "init.sql"
    sql.write_text(init_sql(args.rows), encoding="utf-8")
    os.environ["INCREMENTAL_SNAPSHOT_CHUNK_SIZE"] = str(args.chunk_size)  # stack.sh reads it registering Debezium
    values = finished(stack(args.state_dir, "up", "--schemas", "public", "--init-sql", str(sql)), "stack.sh up")
    scenario = args.work / "service"
    scenario.mkdir(parents=True)
    config = scenario / "mirror.yaml"
    config.write_text("{}\n", encoding="utf-8")
    landing = scenario / "lz"
    run_args = [
        "--config", str(config), "--bootstrap-servers", values["bootstrap.servers"],
        "--topics", TOPIC.replace(".", r"\."),
        "--landing-zone", str(landing), "--checkpoint", str(scenario / "cp"), "--metrics-port", "0", "--trigger", "10s",
    ]  # fmt: skip
    connector = start_connector(run_args, scenario / "run.log")
    try:

        def alive() -> bool:
            return connector.process.poll() is None

        initial_s = wait_rows(landing, args.rows, alive)
        initial_files = len(table_files(landing))
        psql(values, "ALTER TABLE big ADD COLUMN region text NOT NULL DEFAULT 'EU'")
        psql(values, "UPDATE big SET quantity = 0 WHERE id = 1")  # Postgres shows the new column at the next event
        refresh_s = wait_rows(landing, 2 * args.rows + 1, alive)
        refresh_files = len(table_files(landing)) - initial_files
        refresh_rows = published_rows(landing) - args.rows
    finally:
        connector.stop()
    return Figures(
        rows=args.rows,
        chunk_size=args.chunk_size,
        initial_load_s=round(initial_s, 1),
        initial_files=initial_files,
        refresh_s=round(refresh_s, 1),
        refresh_rows=refresh_rows,
        refresh_files=refresh_files,
        exact=verify(values["postgres"], landing),
        cpu=cpu_model(),
        load_before=load,
        load_after=loadavg(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=1024, help="Debezium's incremental.snapshot.chunk.size")
    parser.add_argument("--state-dir", type=Path, required=True, help="the stack's STATE_DIR (created; stopped)")
    parser.add_argument("--work", type=Path, required=True, help="landing zone, checkpoint and log (created)")
    parser.add_argument("--keep-stack", action="store_true", help="leave the stack running at the end")
    args = parser.parse_args(argv)
    args.state_dir.mkdir(parents=True, exist_ok=True)
    args.state_dir.chmod(0o755)  # Postgres runs as its own user
    args.work.mkdir(parents=True, exist_ok=False)
    try:
        result = measure(args)
    finally:
        if not args.keep_stack:
            stack(args.state_dir, "down").communicate(timeout=600)
    print(json.dumps(asdict(result)), flush=True)
    print(
        f"| {result.rows:,} rows | initial load {result.initial_load_s} s ({result.initial_files} files) "
        "| refresh after "
        f"ADD COLUMN ... DEFAULT {result.refresh_s} s, {result.refresh_rows:,} rows in {result.refresh_files} files "
        f"(chunk {result.chunk_size}) | exact {result.exact} | {result.cpu} | load {result.load_before} -> "
        f"{result.load_after} |"
    )
    return 0 if result.exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
