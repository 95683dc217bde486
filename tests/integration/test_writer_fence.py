"""A double deployment on real Kafka and real Spark: the second instance is refused, the first goes on.

Before the fence a second instance on the same checkpoint or landing zone started, wrote "another
writer" stops for every table into the shared ledger, dropped every batch, and its start-up clean-up
deleted the running instance's uploads in flight, which then crashed. Runs with the landing zone in a
local folder (``flock``) and on OneLake (the DFS test double; a blob lease reached with a managed
identity through azure-identity); the Spark checkpoint stays local.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from connector.readback.replay import replay_landing_zone
from tests.integration.test_graceful_stop import GRACE_PERIOD_S, committed_batch
from tests.integration.test_stream_kafka import assert_mirror_equals, connector_args, prepare
from tests.support.kafka import REPO_ROOT, produce, run_connector
from tests.support.landing import Landing
from tests.support.model import Workload, replayed_rows

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

WAIT_S = 300
# Ignored for a local folder; on the double, azure-identity's managed identity (see tests/conftest.py).
ENV = {"CONNECTOR_LANDING_ZONE__CREDENTIAL": "managed_identity"}


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "connector", *args], cwd=REPO_ROOT, env={**os.environ, **ENV}, stderr=sink
        )


def alive(process: subprocess.Popen[bytes], log: Path) -> None:
    if process.poll() is not None:
        pytest.fail(f"instance A exited ({process.returncode}):\n{log.read_text()[-4000:]}")


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[bytes], log: Path, what: str) -> None:
    """Block until ``condition`` holds while A keeps running (a wait, not a timing assertion)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        alive(process, log)
        if condition():
            return
        time.sleep(0.5)
    pytest.fail(f"{what} not within {WAIT_S} s:\n{log.read_text()[-4000:]}")


def mirrored(landing: Landing, workload: Workload) -> Callable[[], bool]:
    return lambda: replayed_rows(replay_landing_zone(landing.storage)) == workload.expected()


def assert_refused(result: subprocess.CompletedProcess[str], holder_pid: int) -> str:
    """Exit 2 with one ``error:`` line naming instance A (its pid and host), before Spark started."""
    assert result.returncode == 2, result.stderr[-4000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-4000:]
    assert f"pid {holder_pid} on {os.uname().nodename}" in errors[0]
    assert "another connector instance" in errors[0]
    assert "Traceback" not in result.stderr
    assert "SparkContext" not in result.stderr  # refused before the JVM was started
    return errors[0]


def test_a_second_instance_is_refused_while_the_first_keeps_publishing(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path, landing: Landing
) -> None:
    prefix = f"fence{landing.backend}"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 1200)
    args = connector_args(kafka_bootstrap, prefix, tmp_path, landing_zone=landing.url)
    args[args.index("--trigger") + 1] = "2s"
    args[args.index("--max-offsets-per-trigger") + 1] = "500"
    checkpoint = tmp_path / "cp"
    log = tmp_path / "a.log"
    first = start(args, log)
    try:
        wait_until(lambda: committed_batch(checkpoint) >= 0, first, log, "a first batch of A")

        # B: the same checkpoint and landing zone.
        same = run_connector(*args, env=ENV, timeout=WAIT_S)
        message = assert_refused(same, first.pid)
        assert str(checkpoint / "writer.lock") in message

        # C: its own checkpoint, the same landing zone.
        other_args = list(args)
        other_args[other_args.index("--checkpoint") + 1] = str(tmp_path / "cp-c")
        other = run_connector(*other_args, env=ENV, timeout=WAIT_S)
        message = assert_refused(other, first.pid)
        assert "_writer.lock" in message
        assert not (tmp_path / "cp-c" / "ledger").exists()  # C never opened a ledger

        # A goes on: what is produced after the refusals lands.
        wait_until(mirrored(landing, workload), first, log, "the first changes mirrored by A")
        produce(kafka_bootstrap, workload.records(600))
        wait_until(mirrored(landing, workload), first, log, "the later changes mirrored by A")
        alive(first, log)
        first.send_signal(signal.SIGTERM)
        code = first.wait(timeout=GRACE_PERIOD_S)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    output = log.read_text()
    assert code == 0, output[-4000:]
    assert "Traceback" not in output and "another writer" not in output, output[-4000:]
    assert_mirror_equals(landing.storage, workload)
    # A released its leases on exit: the next instance starts at once and finds nothing to do.
    args[args.index("--trigger") + 1] = "available-now"
    again = run_connector(*args, env=ENV, timeout=WAIT_S)
    assert again.returncode == 0, again.stderr[-4000:]
    assert_mirror_equals(landing.storage, workload)
