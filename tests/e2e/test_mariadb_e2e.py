"""MariaDB → real Debezium MariaDB connector → real Kafka → connector (Spark) → landing zone, and `verify`
against MariaDB.

The stack is the session's ``mariadb_stack`` (``stack.sh up --source mariadb``): the snapshot rows of
``workload_mariadb`` hold every common MySQL type at its edges. Each test mirrors the topics from the
start into its own landing zone, waits until Debezium has published every change (a watermark row
written after the workload must reach Kafka: the binlog is read in order), runs the connector until
caught up, and requires `verify` to find zero differences in every table and `validate` no problem.

The helpers take any MariaDB stack's values: on one with ``converter=avro`` (``test_mariadb_avro_e2e``) the
connector and the watermark wait read Avro through the stack's schema registry.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from connector.readback.validate import validate_landing_zone
from connector.readback.verify import verify
from connector.storage import LocalStorage
from tests.e2e import workload_mariadb
from tests.e2e.mirror_source import MirrorSource, catch_up, kill_while_streaming, run_args
from tests.support.kafka import run_connector

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("mirror_source", ["mariadb"], indirect=True)]


def write_config(tmp: Path, stack: dict[str, str]) -> Path:
    """The connector's YAML: with Avro topics, ``value_format: avro`` and the stack's registry."""
    source = (
        f"source:\n  value_format: avro\n  schema_registry:\n    url: {stack['schema.registry.url']}\n"
        if stack.get("converter") == "avro"
        else ""
    )
    config = tmp / "config.yaml"
    config.write_text(
        "mirror:\n"
        "  truncate_policy: recreate\n"  # TRUNCATE (skipped.operations=none) rebuilds the table's folder
        "  max_rows_per_file: 300\n" + source
    )
    return config


def assert_mirror_equals_source(source: MirrorSource, tmp: Path) -> None:
    problems = [str(p) for p in validate_landing_zone(LocalStorage(tmp / "lz"))]
    assert problems == []
    reports = verify(source.url, str(tmp / "lz"))
    assert {f"mirror.{name}" for name in workload_mariadb.TABLES} <= {r.table for r in reports}
    failures = [r.line() + "\n  " + "\n  ".join(r.examples) for r in reports if not r.ok]
    assert failures == [], "\n".join(failures)
    for report in reports:
        assert report.source_rows == report.mirror_rows == report.matching, report.line()


def source_count(conn: Any, table: str) -> int:
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {table}")  # noqa: S608 - test constants
        return int(cursor.fetchone()[0])


def mirror_snapshot_and_streaming(source: MirrorSource, conn: Any, tmp: Path) -> None:
    """Mirror the snapshot, then a streaming phase (inserts, updates, deletes, key moves, a 1000-row
    transaction), ADD COLUMN and TRUNCATE, and another phase; the mirror must equal the source."""
    config = write_config(tmp, source.stack)
    first = run_connector(*run_args(source, tmp, "available-now", config))  # the snapshot
    assert first.returncode == 0, first.stderr[-5000:]
    assert list((tmp / "lz" / "mirror.schema" / "all_types").glob("0*.parquet"))

    workload_mariadb.streaming_phase(conn, seed=1)
    workload_mariadb.evolve_and_truncate(conn, seed=1)
    workload_mariadb.streaming_phase(conn, seed=2, big_transaction=False)
    catch_up(source, tmp, config)

    assert source_count(conn, "wiped") == 5  # only the rows inserted after TRUNCATE
    assert source_count(conn, "items") > 1000  # the 1000-row transaction
    assert_mirror_equals_source(source, tmp)


def test_snapshot_and_streaming_mirror_equals_mariadb(
    mirror_source: MirrorSource, mariadb: Any, tmp_path: Path
) -> None:
    mirror_snapshot_and_streaming(mirror_source, mariadb, tmp_path)
    result = run_connector(
        "verify",
        "--source",
        mirror_source.url,
        "--landing-zone",
        str(tmp_path / "lz"),
        "--tables",
        "mirror.all_types",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mirror.all_types: source=" in result.stdout
    assert "differing=0" in result.stdout


def test_connector_sigkilled_during_streaming_mirror_equals_mariadb(
    mirror_source: MirrorSource, mariadb: Any, tmp_path: Path
) -> None:
    config = write_config(tmp_path, mirror_source.stack)
    command = [sys.executable, "-m", "connector", *run_args(mirror_source, tmp_path, "1s", config)]

    def write(round_number: int) -> None:
        workload_mariadb.streaming_phase(mariadb, seed=10 + round_number, big_transaction=round_number == 0)
        if round_number == 1:
            workload_mariadb.evolve_and_truncate(mariadb, seed=10 + round_number)

    kills = kill_while_streaming(command, tmp_path / "connector.log", 3, write, random.Random(15), 3)
    assert kills == 2
    assert list((tmp_path / "lz").rglob("0*.parquet"))  # the killed runs did publish
    catch_up(mirror_source, tmp_path, config)
    assert_mirror_equals_source(mirror_source, tmp_path)
