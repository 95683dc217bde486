"""Postgres → real Debezium → real Kafka → connector → landing zone, and `verify` against Postgres.

Each test streams its own workload into the shared stack, waits until Debezium has published every
change (a watermark row written after the workload must reach Kafka: Debezium streams the WAL in
order), runs the connector until caught up, and requires `verify` to find zero differences in every
table and `validate` to find no problem.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer

from connector.oracle.validate import validate_landing_zone
from connector.oracle.verify import verify
from connector.storage import LocalStorage
from tests.e2e import workload
from tests.e2e.conftest import StackCtl
from tests.support.kafka import REPO_ROOT, run_connector

pytestmark = pytest.mark.e2e

WATERMARK_TIMEOUT_S = 240


def write_config(tmp: Path, replay_safe: bool = False) -> Path:
    config = tmp / "config.yaml"
    config.write_text(
        "mirror:\n"
        "  toast_policy: keep-last\n"  # REPLICA IDENTITY DEFAULT + unchanged TOASTed columns
        "  max_rows_per_file: 300\n"
        f"  replay_safe_inserts: {'true' if replay_safe else 'false'}\n"
    )
    return config


def run_args(stack: dict[str, str], tmp: Path, trigger: str, config: Path) -> list[str]:
    return [
        "run",
        "--config",
        str(config),
        "--bootstrap-servers",
        stack["bootstrap.servers"],
        "--topics",
        stack["topics"],
        "--landing-zone",
        str(tmp / "lz"),
        "--checkpoint",
        str(tmp / "cp"),
        "--trigger",
        trigger,
        "--max-offsets-per-trigger",
        "400",
        "--metrics-port",
        "0",
    ]


def wait_for_watermark(stack: dict[str, str]) -> None:
    """Write a watermark row and wait until its change event is in Kafka."""
    token = uuid.uuid4().hex
    with psycopg.connect(stack["postgres"], autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.e2e_watermark (token text PRIMARY KEY)")
        conn.execute("INSERT INTO public.e2e_watermark VALUES (%s)", (token,))
    consumer = Consumer(
        {
            "bootstrap.servers": stack["bootstrap.servers"],
            "group.id": f"watermark-{token}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 2000,
        }
    )
    try:
        consumer.subscribe(["^dbserver1\\.public\\.e2e_watermark"])
        deadline = time.monotonic() + WATERMARK_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error() is not None or msg.value() is None:
                continue
            after = json.loads(msg.value())["payload"].get("after") or {}
            if after.get("token") == token:
                return
    finally:
        consumer.close()
    pytest.fail(f"Debezium did not publish the watermark within {WATERMARK_TIMEOUT_S}s")


def assert_mirror_equals_source(stack: dict[str, str], tmp: Path) -> None:
    problems = [str(p) for p in validate_landing_zone(LocalStorage(tmp / "lz"))]
    assert problems == []
    reports = verify(stack["postgres"], str(tmp / "lz"))
    mirrored = {r.table for r in reports}
    assert {f"public.{name}" for name in workload.table_names()} <= mirrored
    for report in reports:
        assert report.ok, report.line() + "\n" + "\n".join(report.examples)
        assert report.source_rows == report.mirror_rows


def catch_up(stack: dict[str, str], tmp: Path, config: Path) -> None:
    wait_for_watermark(stack)
    result = run_connector(*run_args(stack, tmp, "available-now", config))
    assert result.returncode == 0, result.stderr[-5000:]


def batch_lines(log: Path) -> int:
    """Batch log lines the connector wrote so far."""
    return log.read_text().count('"event":"batch"') if log.exists() else 0


def wait_for_batch(process: subprocess.Popen[bytes], log: Path, before: int, timeout_s: float = 240) -> None:
    """Until the connector logs a batch after ``before`` (or exits, or the bound passes; the caller checks)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None and batch_lines(log) <= before:
        time.sleep(0.5)


def test_snapshot_then_streaming_mirror_equals_source(stack: dict[str, str], tmp_path: Path) -> None:
    config = write_config(tmp_path)
    first = run_connector(*run_args(stack, tmp_path, "available-now", config))  # the snapshot
    assert first.returncode == 0, first.stderr[-5000:]
    with psycopg.connect(stack["postgres"], autocommit=True) as conn:
        workload.streaming_phase(conn, 300, seed=21)
    catch_up(stack, tmp_path, config)
    assert_mirror_equals_source(stack, tmp_path)
    result = run_connector("verify", "--source", stack["postgres"], "--landing-zone", str(tmp_path / "lz"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "differing=0" in result.stdout
    # A table asked for by name that was never mirrored is a difference (it passed silently: exit 0).
    lz = str(tmp_path / "lz")
    absent = run_connector("verify", "--source", stack["postgres"], "--landing-zone", lz, "--tables", "public.nosuch")
    assert absent.returncode == 1, absent.stdout + absent.stderr
    assert f"public.nosuch: not in the landing zone {lz} (no table folder)" in absent.stdout


def test_connector_killed_three_times_during_streaming(stack: dict[str, str], tmp_path: Path) -> None:
    config = write_config(tmp_path)
    rng = random.Random(5)
    command = [sys.executable, "-m", "connector", *run_args(stack, tmp_path, "1s", config)]
    log = (tmp_path / "connector.log").open("w")
    kills = 0
    with psycopg.connect(stack["postgres"], autocommit=True) as conn:
        for round_number in range(4):
            batches_before = batch_lines(tmp_path / "connector.log")
            process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=log, env=dict(os.environ))
            try:
                workload.streaming_phase(conn, 120, seed=100 + round_number)
                # Kill at a random point once this run is publishing (Spark's start-up time varies with load).
                wait_for_batch(process, tmp_path / "connector.log", batches_before)
                time.sleep(rng.uniform(0, 4))
            finally:
                alive = process.poll() is None
                if round_number < 3:
                    process.send_signal(signal.SIGKILL)
                    kills += 1
                else:
                    process.send_signal(signal.SIGTERM)
                process.wait(timeout=120)
            assert alive, (tmp_path / "connector.log").read_text()[-3000:]  # killed while running, not after a crash
            published_before_catch_up = len(list((tmp_path / "lz").rglob("0*.parquet")))
    log.close()
    assert kills == 3
    assert published_before_catch_up > 0  # the killed runs did publish
    catch_up(stack, tmp_path, config)
    assert_mirror_equals_source(stack, tmp_path)


def test_debezium_restart_resends_and_replay_safe_markers_keep_mirror_exact(
    stack: dict[str, str], stack_ctl: StackCtl, tmp_path: Path
) -> None:
    """Debezium is at-least-once: after a restart it re-sends what followed its last offset commit.

    Re-sent creates written as 0 (insert, no duplicate check) would duplicate rows; with
    replay_safe_inserts they are upserts (4) and the mirror stays exact.
    """
    config = write_config(tmp_path, replay_safe=True)
    with psycopg.connect(stack["postgres"], autocommit=True) as conn:
        workload.streaming_phase(conn, 150, seed=300)
        stack_ctl("restart-debezium")  # killed with -9: offsets since its last flush are re-sent
        workload.streaming_phase(conn, 150, seed=301)
    catch_up(stack, tmp_path, config)
    assert_mirror_equals_source(stack, tmp_path)
