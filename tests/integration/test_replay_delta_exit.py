"""``replay --format delta`` and ``verify`` exit 0 run after run (issue 35).

Both apply the landing zone to Delta tables with delta-rs and read them back through pyarrow. That read went
through deltalake's default filesystem, which hands Arrow Python file objects: the scan's reads ended on Arrow's
I/O threads holding buffers that wrap Python objects, and when one of those threads dropped the last reference
while the interpreter was finalizing, CPython ended the thread inside a C++ destructor and the process aborted
after its work was done ("terminate called without an active exception", exit 134), in one run of three on
the e2e landing zones. A race at exit shows only over many runs, so each command runs 20 times here, each in a
process of its own, on a landing zone that takes every read of the Delta oracle: MERGE (updates and deletes),
an append that adds a column (schema merge), and the rewrite of a column that was only NULL.

``verify`` reads a bare Postgres (``test_verify_columns``'s fixture, started once for this module).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from pyarrow import fs

from connector.collect.encoding import FileFormat
from connector.events import ROW_MARKER_COLUMN
from connector.storage.local import LocalStorage
from tests.integration import test_verify_columns as bare_servers
from tests.support.kafka import run_connector

RUNS = 20
UPDATE, DELETE, INSERT, UPSERT = 1, 2, 0, 4

# The module's bare Postgres and a fresh database in it for each test.
postgres = bare_servers.postgres
pg_url = bare_servers.pg_url

PEOPLE = [
    {"id": 1, "name": "one", "note": "first"},
    {"id": 2, "name": "two", "note": None},
    {"id": 3, "name": "three", "note": None},
    {"id": 4, "name": "four", "note": None},
    {"id": 6, "name": "six", "note": "new"},
]
EVENTS = [
    {"id": 1, "kind": "a", "amount": None},
    {"id": 2, "kind": "b", "amount": None},
    {"id": 3, "kind": "c", "amount": 7},
]


def _file(zone: LocalStorage, folder: str, number: int, columns: dict[str, pa.Array], markers: list[int]) -> None:
    data = pa.table({**columns, ROW_MARKER_COLUMN: pa.array(markers, pa.int32())})
    zone.create(f"{folder}/{number:020d}.parquet", FileFormat().encode(data))


def _landing_zone(root: Path) -> LocalStorage:
    """``public.people`` (MERGE, a NULL-only column retyped) and ``public.events`` (a column added), as published."""
    zone = LocalStorage(root)
    for table in ("people", "events"):
        zone.create(f"public.schema/{table}/_metadata.json", json.dumps({"keyColumns": ["id"]}).encode())
    people = "public.schema/people"
    names = ["one", "two", "three", "four", "five"]
    # note is NULL in every row of the first file, typed int64 there: the string of file 2 rewrites the column.
    _file(zone, people, 1, {"id": pa.array([1, 2, 3, 4, 5], pa.int32()), "name": pa.array(names),
                            "note": pa.nulls(5, pa.int64())}, [UPSERT] * 5)  # fmt: skip
    _file(zone, people, 2, {"id": pa.array([1], pa.int32()), "name": pa.array(["one"]),
                            "note": pa.array(["first"])}, [UPDATE])  # fmt: skip
    _file(zone, people, 3, {"id": pa.array([5, 6], pa.int32()), "name": pa.array(["five", "six"]),
                            "note": pa.array([None, "new"], pa.string())}, [DELETE, INSERT])  # fmt: skip
    events = "public.schema/events"
    _file(zone, events, 1, {"id": pa.array([1, 2], pa.int32()), "kind": pa.array(["a", "b"])}, [UPSERT] * 2)
    _file(zone, events, 2, {"id": pa.array([3], pa.int32()), "kind": pa.array(["c"]),
                            "amount": pa.array([7], pa.int64())}, [UPSERT])  # fmt: skip
    return zone


def _delta_rows(table_dir: Path) -> list[dict[str, Any]]:
    """The rows of the Delta table at ``table_dir``, by id, read as the oracle reads (Arrow's local filesystem)."""
    from deltalake import DeltaTable

    local = fs.SubTreeFileSystem(str(table_dir.resolve()), fs.LocalFileSystem())
    rows: list[dict[str, Any]] = DeltaTable(str(table_dir)).to_pyarrow_dataset(filesystem=local).to_table().to_pylist()
    return sorted(rows, key=lambda row: int(row["id"]))


def _failures(results: list[Any]) -> list[str]:
    return [f"run {n}: exit {r.returncode}\n{r.stdout[-1000:]}{r.stderr[-2000:]}" for n, r in enumerate(results, 1)
            if r.returncode != 0 or "terminate called" in r.stderr]  # fmt: skip


def test_replay_format_delta_exits_0_in_every_run(tmp_path: Path) -> None:
    zone = _landing_zone(tmp_path / "lz")
    out = tmp_path / "delta"
    results = [
        run_connector("replay", str(zone.root), "--format", "delta", "--output", str(out), timeout=120)
        for _ in range(RUNS)
    ]
    assert _failures(results) == []
    assert {r.stdout for r in results} == {"public.events: 3 rows\npublic.people: 5 rows\n"}
    assert _delta_rows(out / "public.schema" / "people") == PEOPLE
    assert _delta_rows(out / "public.schema" / "events") == EVENTS


def test_verify_exits_0_in_every_run(pg_url: str, tmp_path: Path) -> None:
    zone = _landing_zone(tmp_path / "lz")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE people (id int PRIMARY KEY, name text, note text)")
        conn.execute("CREATE TABLE events (id int PRIMARY KEY, kind text, amount bigint)")
        for row in PEOPLE:
            conn.execute("INSERT INTO people VALUES (%(id)s, %(name)s, %(note)s)", row)
        for row in EVENTS:
            conn.execute("INSERT INTO events VALUES (%(id)s, %(kind)s, %(amount)s)", row)
    results = [
        run_connector("verify", "--source", pg_url, "--landing-zone", str(zone.root), timeout=120) for _ in range(RUNS)
    ]
    assert _failures(results) == []
    assert {r.stdout for r in results} == {
        "public.events: source=3 mirror=3 matching=3 missing=0 extra=0 differing=0\n"
        "public.people: source=5 mirror=5 matching=5 missing=0 extra=0 differing=0\n"
    }
