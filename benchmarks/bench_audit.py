"""Audit cost: a table with no difference compared with Fabric's Delta table of it, beside a plain ``SELECT``.

``python -m benchmarks.bench_audit --source postgresql://USER:PW@HOST:PORT/DB [--rows 1000000]`` creates
``public.bench_audit`` (id, name, amount numeric, at timestamptz), writes the same rows as a Delta table (what
Fabric would hold), then measures in the same run: a plain ``SELECT *`` read through a server-side cursor (the raw
limit), and ``mirror_compare.compare_table`` (the chunked, hashed comparison ``verify`` and the audit run). Prints
rows/s and this process's CPU seconds for each, and the CPU model. Drops the table at the end.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psycopg
import pyarrow as pa

from benchmarks.cpu import cpu_seconds
from connector.landing_zone.layout import TableRef
from connector.readback.database_postgres import PostgresReader
from connector.readback.mirror_compare import compare_table
from connector.readback.mirrored_tables import MirroredTables

TABLE = TableRef("public", "bench_audit")


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def load(url: str, rows: int, tables: Path) -> None:
    """The source table, and the same rows as Fabric's Delta table under ``tables``."""
    from deltalake import write_deltalake

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS public.bench_audit")
        conn.execute(
            "CREATE TABLE public.bench_audit (id int PRIMARY KEY, name text, amount numeric(12,2), at timestamptz)"
        )
        conn.execute(
            "INSERT INTO public.bench_audit SELECT g, 'row ' || g, g * 0.25, "
            f"timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second' FROM generate_series(1, {rows}) g"
        )
        conn.execute("VACUUM ANALYZE public.bench_audit")
    with psycopg.connect(url) as conn, conn.cursor(name="load") as cursor:
        cursor.itersize = 50_000
        cursor.execute("SELECT * FROM public.bench_audit")
        batch: list[tuple[object, ...]] = []
        schema = pa.schema(
            [
                ("id", pa.int32()),
                ("name", pa.string()),
                ("amount", pa.decimal128(12, 2)),
                ("at", pa.timestamp("us", "UTC")),
            ]
        )
        for row in cursor:
            batch.append(row)
            if len(batch) == 100_000:
                write_deltalake(str(tables / "public" / "bench_audit"), _table(batch, schema), mode="append")
                batch = []
        if batch:
            write_deltalake(str(tables / "public" / "bench_audit"), _table(batch, schema), mode="append")


def _table(rows: list[tuple[object, ...]], schema: pa.Schema) -> pa.Table:
    columns = list(zip(*rows, strict=True))
    return pa.table([pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def measure(label: str, work: object, rows: int) -> None:
    started, cpu = time.perf_counter(), cpu_seconds()
    work()  # type: ignore[operator]
    wall, used = time.perf_counter() - started, cpu_seconds() - cpu
    print(f"{label}: rows={rows} seconds={wall:.2f} rows_per_second={rows / wall:,.0f} cpu_seconds={used:.2f}")


def plain_select(url: str) -> None:
    with psycopg.connect(url) as conn, conn.cursor(name="plain") as cursor:
        cursor.itersize = 10_000
        cursor.execute("SELECT * FROM public.bench_audit")
        for _ in cursor:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", required=True)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    print(f"cpu: {cpu_model()}")
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as folder:
        tables = Path(folder)
        load(args.source, args.rows, tables)
        mirrored = MirroredTables(str(tables))
        measure("plain SELECT * (source, server-side cursor)", lambda: plain_select(args.source), args.rows)
        measure("mirror read (Delta, delta-rs)", lambda: mirrored.read(TABLE, ["id"]), args.rows)
        report = []

        def audit() -> None:
            with PostgresReader(args.source) as reader:
                report.append(compare_table(reader, TABLE, ["id"], lambda: mirrored.read(TABLE, ["id"])))

        measure("audit, no difference (source + mirror, chunked hashes)", audit, args.rows)
        print(report[0].line())
    with psycopg.connect(args.source, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS public.bench_audit")
    return 0 if report[0].ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
