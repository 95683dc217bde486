"""Postgres → real Debezium → real Kafka → connector → landing zone, and `verify` against Postgres.

Each test streams its own workload into the shared stack, waits until Debezium has published every
change (a watermark row written after the workload must reach Kafka: Debezium streams the WAL in
order), runs the connector until caught up, and requires `verify` to find zero differences in every
table and `validate` to find no problem.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import psycopg
import pytest

from connector.readback.validate import validate_landing_zone
from connector.readback.verify import verify
from connector.storage import LocalStorage
from tests.e2e import workload
from tests.e2e.conftest import StackCtl
from tests.e2e.mirror_source import MirrorSource, catch_up, kill_while_streaming, run_args
from tests.support.kafka import run_connector

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("mirror_source", ["postgres"], indirect=True)]


def write_config(tmp: Path, replay_safe: bool = False) -> Path:
    config = tmp / "config.yaml"
    config.write_text(
        "mirror:\n"
        "  toast_policy: keep-last\n"  # REPLICA IDENTITY DEFAULT + unchanged TOASTed columns
        "  max_rows_per_file: 300\n"
        f"  replay_safe_inserts: {'true' if replay_safe else 'false'}\n"
    )
    return config


def assert_mirror_equals_source(source: MirrorSource, tmp: Path) -> None:
    problems = [str(p) for p in validate_landing_zone(LocalStorage(tmp / "lz"))]
    assert problems == []
    reports = verify(source.url, str(tmp / "lz"))
    mirrored = {r.table for r in reports}
    assert {f"public.{name}" for name in workload.table_names()} <= mirrored
    for report in reports:
        assert report.ok, report.line() + "\n" + "\n".join(report.examples)
        assert report.source_rows == report.mirror_rows


def test_snapshot_then_streaming_mirror_equals_source(mirror_source: MirrorSource, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    first = run_connector(*run_args(mirror_source, tmp_path, "available-now", config))  # the snapshot
    assert first.returncode == 0, first.stderr[-5000:]
    with psycopg.connect(mirror_source.url, autocommit=True) as conn:
        workload.streaming_phase(conn, 300, seed=21)
    catch_up(mirror_source, tmp_path, config)
    assert_mirror_equals_source(mirror_source, tmp_path)
    result = run_connector("verify", "--source", mirror_source.url, "--landing-zone", str(tmp_path / "lz"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "differing=0" in result.stdout
    # A table asked for by name that was never mirrored is a difference (it passed silently: exit 0).
    lz = str(tmp_path / "lz")
    absent = run_connector("verify", "--source", mirror_source.url, "--landing-zone", lz, "--tables", "public.nosuch")
    assert absent.returncode == 1, absent.stdout + absent.stderr
    assert f"public.nosuch: not in the landing zone {lz} (no table folder)" in absent.stdout


def test_connector_killed_three_times_during_streaming(mirror_source: MirrorSource, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    command = [sys.executable, "-m", "connector", *run_args(mirror_source, tmp_path, "1s", config)]
    with psycopg.connect(mirror_source.url, autocommit=True) as conn:
        kills = kill_while_streaming(
            command,
            tmp_path / "connector.log",
            4,
            lambda round_number: workload.streaming_phase(conn, 120, seed=100 + round_number),
            random.Random(5),
            1,  # each run publishes its round's writes in its first batch, then idles: a longer pause only waits
        )
    published_before_catch_up = len(list((tmp_path / "lz").rglob("0*.parquet")))
    assert kills == 3
    assert published_before_catch_up > 0  # the killed runs did publish
    catch_up(mirror_source, tmp_path, config)
    assert_mirror_equals_source(mirror_source, tmp_path)


def test_debezium_restart_resends_and_replay_safe_markers_keep_mirror_exact(
    mirror_source: MirrorSource, stack_ctl: StackCtl, tmp_path: Path
) -> None:
    """Debezium is at-least-once: after a restart it re-sends what followed its last offset commit.

    Re-sent creates written as 0 (insert, no duplicate check) would duplicate rows; with
    replay_safe_inserts they are upserts (4) and the mirror stays exact.
    """
    config = write_config(tmp_path, replay_safe=True)
    with psycopg.connect(mirror_source.url, autocommit=True) as conn:
        workload.streaming_phase(conn, 150, seed=300)
        stack_ctl("restart-debezium")  # killed with -9: offsets since its last flush are re-sent
        workload.streaming_phase(conn, 150, seed=301)
    catch_up(mirror_source, tmp_path, config)
    assert_mirror_equals_source(mirror_source, tmp_path)
