"""Tables without a primary key on the real stack (issue 55): Postgres → Debezium → Kafka → ``run`` → landing zone.

An append-only keyless table (several column types, identical rows) is mirrored without ``keyColumns``, every row
arriving, and ``verify`` finds it exact as a multiset of rows. An UPDATE of a keyless table (REPLICA IDENTITY FULL)
cannot be expressed without a key: the table is rebuilt (folder deleted, Debezium blocking snapshot) with one log
line naming topic[partition]@offset, while another table keeps mirroring, and both end exact. The MariaDB case is
``test_mariadb_keyless_e2e`` (it must run after ``test_mariadb_e2e``).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from connector.publish.ledger_state import TableState
from connector.publish.lifecycle import Phase
from tests.e2e.test_rebuild_e2e import Connector
from tests.support.kafka import run_connector

pytestmark = pytest.mark.e2e

EVENTS, AUDIT, OTHER = "kl_events", "kl_audit", "kl_other"
# Distinct values per row of ``EVENTS``, each inserted twice before the start and twice while running.
DISTINCT = 40


def write_config(tmp: Path) -> Path:
    config = tmp / "config.yaml"
    config.write_text("mirror:\n  rebuild:\n    wait_s: 0\n")  # no Fabric status here: the folder's deletion suffices
    return config


def topics(stack: dict[str, str], *tables: str) -> str:
    return re.escape(stack["topic_prefix"]) + r"\.public\.(" + "|".join(tables) + ")"


def insert_events(conn: psycopg.Connection[Any], first: int) -> None:
    """Each row twice: identical rows, which only a keyless mirror without a duplicate check keeps."""
    for _ in range(2):
        conn.execute(
            f"INSERT INTO public.{EVENTS} SELECT g, 'note ' || g, g * 1.25, "
            "timestamptz '2026-01-02 03:04:05.123456+00' + g * interval '1 minute', g % 2 = 0, "
            "jsonb_build_object('g', g), decode(lpad(to_hex(g), 4, '0'), 'hex') "
            f"FROM generate_series({first}, {first + DISTINCT - 1}) g"
        )


def verify(stack: dict[str, str], tmp: Path, *tables: str) -> str:
    tables_arg = ",".join(f"public.{t}" for t in tables)
    result = run_connector(
        "verify", "--source", stack["postgres"], "--landing-zone", str(tmp / "lz"), "--tables", tables_arg
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_an_append_only_keyless_table_is_mirrored_exact_with_its_duplicates(
    shared_stack: dict[str, str], tmp_path: Path
) -> None:
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{EVENTS}")
        conn.execute(
            f"CREATE TABLE public.{EVENTS} (id int, note text, amount numeric(12, 2), at timestamptz, flag boolean, "
            "payload jsonb, data bytea)"
        )
        insert_events(conn, 1)
    connector = Connector(shared_stack, tmp_path, write_config(tmp_path), topics(shared_stack, EVENTS))
    connector.start()
    try:
        connector.wait_for("the snapshot", lambda t: t.rows_published == 2 * DISTINCT, f"public.{EVENTS}")
        with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
            insert_events(conn, DISTINCT // 2)  # overlapping values: up to four identical rows
        table = connector.wait_for("the inserts", lambda t: t.rows_published == 4 * DISTINCT, f"public.{EVENTS}")
        assert connector.stop(signal.SIGTERM) == 0
    finally:
        connector.kill_if_running()
    assert table.keyless and table.key_columns == () and table.lifecycle.stop_reason is None
    folder = tmp_path / "lz" / "public.schema" / EVENTS
    assert "keyColumns" not in orjson.loads((folder / "_metadata.json").read_bytes())
    rows = 4 * DISTINCT
    assert f"public.{EVENTS}: source={rows} mirror={rows} matching={rows} missing=0 extra=0" in verify(
        shared_stack, tmp_path, EVENTS
    )
    listed = run_connector("tables", "--checkpoint", str(tmp_path / "cp"))
    assert listed.returncode == 0, listed.stderr
    assert "key=none" in next(line for line in listed.stdout.splitlines() if f"public.{EVENTS}" in line)
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{EVENTS}")


def test_an_update_of_a_keyless_table_rebuilds_it_exact_while_another_table_keeps_mirroring(
    shared_stack: dict[str, str], tmp_path: Path
) -> None:
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        for name in (AUDIT, OTHER):
            conn.execute(f"DROP TABLE IF EXISTS public.{name}")
        conn.execute(f"CREATE TABLE public.{AUDIT} (who text, what text, n int)")
        conn.execute(f"ALTER TABLE public.{AUDIT} REPLICA IDENTITY FULL")  # updates and deletes reach Debezium
        conn.execute(f"CREATE TABLE public.{OTHER} (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO public.{AUDIT} SELECT 'u' || (g % 5), 'did', g % 3 FROM generate_series(1, 60) g")
        conn.execute(f"INSERT INTO public.{OTHER} SELECT g, 'v' || g FROM generate_series(1, 20) g")
    connector = Connector(shared_stack, tmp_path, write_config(tmp_path), topics(shared_stack, AUDIT, OTHER))
    audit_id, other_id = f"public.{AUDIT}", f"public.{OTHER}"
    connector.start()
    try:
        connector.wait_for("the snapshot", lambda t: t.rows_published == 60, audit_id)
        with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
            conn.execute(f"UPDATE public.{AUDIT} SET what = 'changed' WHERE n = 0")
            conn.execute(f"INSERT INTO public.{OTHER} SELECT g, 'v' || g FROM generate_series(21, 40) g")

        def rebuilt(table: TableState) -> bool:
            # Reset by the rebuild (the phase stays snapshot-requested: a blocking snapshot is not tracked), and read.
            return table.keyless and table.lifecycle.phase is Phase.SNAPSHOT_REQUESTED and not table.snapshot_expected

        table = connector.wait_for("the rebuild's snapshot", rebuilt, audit_id)
        connector.wait_for("the other table's inserts", lambda t: t.rows_published == 40, other_id)
        with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
            conn.execute(f"INSERT INTO public.{AUDIT} VALUES ('late', 'did', 7), ('late', 'did', 7)")
            conn.execute(f"INSERT INTO public.{OTHER} VALUES (41, 'after')")
        connector.wait_for("the inserts after the rebuild", lambda t: t.rows_published == 62, audit_id)
        other = connector.wait_for("the other table", lambda t: t.rows_published == 41, other_id)
        assert connector.stop(signal.SIGTERM) == 0
    finally:
        connector.kill_if_running()
    log = connector.log()
    lines = [line for line in log.splitlines() if f"an update of table {audit_id}" in line]
    assert len(lines) == 1, lines
    assert re.search(rf"{re.escape(shared_stack['topic_prefix'])}\.public\.{AUDIT}\[0\]@\d+", lines[0]), lines[0]
    assert table.next_number >= 2 and other.lifecycle.stop_reason is None and other.lifecycle.last_rebuild_at is None
    out = verify(shared_stack, tmp_path, AUDIT, OTHER)
    assert f"{audit_id}: source=62 mirror=62 matching=62 missing=0 extra=0" in out, out
    assert f"{other_id}: source=41 mirror=41 matching=41 missing=0 extra=0" in out, out
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        for name in (AUDIT, OTHER):
            conn.execute(f"DROP TABLE IF EXISTS public.{name}")
