"""SIGTERM in the first seconds of start-up, on real Kafka and real Spark (issue 23).

Before: the handler was installed only once the SparkSession existed, so a SIGTERM in the first ~10 s killed
the process (exit 143; Kubernetes saw a failed pod). Now the stop request is taken from the start of ``run``:
exit 0 within the grace period, nothing published half-way, no JVM left behind, and the next start catches up
to an exact mirror.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from connector.storage import LocalStorage
from tests.integration.test_graceful_stop import GRACE_PERIOD_S, start_streaming
from tests.integration.test_stream_kafka import assert_mirror_equals, connector_args, prepare
from tests.support.kafka import run_connector

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (the JVM PySpark launches among them)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return "Z" not in (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False


def test_sigterm_at_1_3_and_8_seconds_after_start_exits_zero_and_leaves_no_jvm(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "stopatstart"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 3000)
    args = connector_args(kafka_bootstrap, prefix, tmp_path)
    args[args.index("--max-offsets-per-trigger") + 1] = "400"
    for after_s in (1, 3, 8):
        log = tmp_path / f"run-{after_s}.log"
        process = start_streaming(args, log)
        seen: set[int] = set()
        signal_at = time.monotonic() + after_s
        while time.monotonic() < signal_at and process.poll() is None:
            seen |= descendants(process.pid)  # the JVM, once PySpark has launched it
            time.sleep(0.05)
        assert process.poll() is None, log.read_text()[-4000:]
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=GRACE_PERIOD_S)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"not stopped within the grace period:\n{log.read_text()[-4000:]}")
        output = log.read_text()
        assert code == 0, f"SIGTERM {after_s} s after start: exit {code}\n{output[-4000:]}"
        assert "Traceback" not in output and "Py4JError" not in output, output[-4000:]
        assert "stopped on SIGTERM" in output, output[-4000:]
        # The JVM exits with the driver (its stdin closes); a bounded wait for that, then none may be left.
        deadline = time.monotonic() + 60
        while any(alive(pid) for pid in seen) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in seen if alive(pid)], f"left behind after SIGTERM at {after_s} s: {seen}"
        assert not list((tmp_path / "lz").rglob("_staged_*"))  # nothing half-published
        assert not list((tmp_path / "cp" / "ledger" / "plans").glob("*.json"))
    finished = run_connector(*args)
    assert finished.returncode == 0, finished.stderr[-4000:]
    assert_mirror_equals(LocalStorage(tmp_path / "lz"), workload)
