"""SIGTERM and SIGINT on the real streaming job (real Kafka, real Spark): a clean exit 0, nothing lost or doubled.

Before the fix the signal handler called ``query.stop()`` over py4j while the main thread was inside
``awaitTermination``: most stops ended in exit 1 with ``Py4JError ... reentrant call`` and the running
batch was cancelled.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from connector.storage import LocalStorage
from tests.integration.test_stream_kafka import assert_mirror_equals, connector_args, prepare
from tests.support.kafka import REPO_ROOT, run_connector

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

# The Helm chart's terminationGracePeriodSeconds: Kubernetes kills the pod after that.
GRACE_PERIOD_S = 120


def committed_batch(checkpoint: Path) -> int:
    state = checkpoint / "ledger" / "state.json"
    if not state.exists():
        return -1
    return int(orjson.loads(state.read_bytes())["last_committed_batch"])


def start_streaming(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    streaming = [("1s" if a == "available-now" else a) for a in args]
    with log.open("wb") as sink:
        return subprocess.Popen([sys.executable, "-m", "connector", *streaming], cwd=REPO_ROOT, stderr=sink)


def wait_for_batches(process: subprocess.Popen[bytes], checkpoint: Path, after: int, log: Path) -> int:
    """Block until the ledger commits a batch past ``after`` (the job is mid-stream), or the job dies."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the job exited early ({process.returncode}):\n{log.read_text()[-4000:]}")
        batch = committed_batch(checkpoint)
        if batch > after:
            return batch
        time.sleep(0.2)
    process.kill()
    pytest.fail(f"no batch committed in 300 s:\n{log.read_text()[-4000:]}")


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stop_signal_mid_stream_exits_zero_and_mirror_stays_exact(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path, stop_signal: signal.Signals
) -> None:
    prefix = f"stop{stop_signal.name.lower()}"
    # A backlog of many small batches, so every signal lands while batches are running back to back.
    workload = prepare(make_topic, kafka_bootstrap, prefix, 9000)
    args = connector_args(kafka_bootstrap, prefix, tmp_path)
    args[args.index("--max-offsets-per-trigger") + 1] = "400"
    checkpoint = tmp_path / "cp"
    last = -1
    # SIGTERM, what Kubernetes sends, stops three runs; SIGINT (Ctrl-C) goes the same way, so one run is enough.
    for attempt in range(3 if stop_signal == signal.SIGTERM else 1):
        log = tmp_path / f"run-{attempt}.log"
        process = start_streaming(args, log)
        last = wait_for_batches(process, checkpoint, last, log)
        process.send_signal(stop_signal)
        try:
            code = process.wait(timeout=GRACE_PERIOD_S)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"not stopped within the grace period:\n{log.read_text()[-4000:]}")
        output = log.read_text()
        assert code == 0, output[-4000:]
        assert "Traceback" not in output and "Py4JError" not in output, output[-4000:]
        assert f"stopped on {stop_signal.name}" in output
        last = committed_batch(checkpoint)
    # What the stops left is caught up by the next start: nothing lost, nothing published twice. It needs no small
    # batches (the stops are over): 3000 records a batch, not 400, spares it ~20 batches.
    catch_up = list(args)
    catch_up[catch_up.index("--max-offsets-per-trigger") + 1] = "3000"
    finished = run_connector(*catch_up)
    assert finished.returncode == 0, finished.stderr[-4000:]
    assert_mirror_equals(LocalStorage(tmp_path / "lz"), workload)
