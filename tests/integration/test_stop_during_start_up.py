"""SIGTERM at each point of start-up, on real Kafka and real Spark (issues 23 and 52).

Before: the handler was installed only once the SparkSession existed (issue 23), then only once ``run`` had
imported PySpark and read its settings: on a slower CPU a SIGTERM 1 s after start killed the process (exit -15,
an empty log). Now ``python -m connector`` takes the stop signals before any other import. The points are the
program's own progress (its signal mask, a log line, its JVM, its ledger), never wall-clock seconds: exit 0 within
the grace period, nothing published half-way, no JVM left behind, and the next start catches up to an exact mirror.
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
from tests.integration.test_graceful_stop import GRACE_PERIOD_S, committed_batch, start_streaming
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


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (``SigCgt`` in /proc: the early handler is in place)."""
    try:
        status = (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def loaded_arrow(pid: int) -> bool:
    """Whether the process has mapped Arrow's library: ``run``'s modules import it, the command line does not."""
    try:
        return "libarrow.so" in (Path("/proc") / str(pid) / "maps").read_text()
    except OSError:
        return True


def test_sigterm_at_each_point_of_start_up_exits_zero_and_leaves_no_jvm(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "stopatstart"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 3000)
    args = connector_args(kafka_bootstrap, prefix, tmp_path)
    args[args.index("--max-offsets-per-trigger") + 1] = "400"
    checkpoint = tmp_path / "cp"
    # Each point is reached by the program's progress; the signal goes as soon as the test sees it.
    points: dict[str, Callable[[int, str, set[int]], bool]] = {
        # The early handler exists before ``run``'s modules (Arrow among them) are imported: on the old code the
        # only handler came after them, so this point was never reached.
        "imports": lambda pid, log, jvms: catches_sigterm(pid) and not loaded_arrow(pid),
        # Settings read, landing zone, ledger and Kafka checked; Spark not started yet.
        "preflight done": lambda pid, log, jvms: "starting source=" in log,
        "Spark's start": lambda pid, log, jvms: bool(jvms),
        "the first batch committed": lambda pid, log, jvms: committed_batch(checkpoint) >= 0,
    }
    for point, reached in points.items():
        log = tmp_path / f"run-{point.replace(' ', '-')}.log"
        process = start_streaming(args, log)
        seen: set[int] = set()
        deadline = time.monotonic() + GRACE_PERIOD_S
        while not reached(process.pid, log.read_text(errors="replace"), seen):
            assert process.poll() is None, f"{point}: exited before the point\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"{point}: never reached\n{log.read_text()[-4000:]}"
            seen |= descendants(process.pid)  # the JVM, once PySpark has launched it
            time.sleep(0.005 if point == "imports" else 0.05)
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=GRACE_PERIOD_S)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"{point}: not stopped within the grace period:\n{log.read_text()[-4000:]}")
        output = log.read_text()
        assert code == 0, f"SIGTERM at {point}: exit {code}\n{output[-4000:]}"
        assert "Traceback" not in output and "Py4JError" not in output, output[-4000:]
        assert "stopped on SIGTERM" in output, output[-4000:]
        if point == "imports":
            assert "stopped on SIGTERM during start-up" in output and "starting source=" not in output, output
        # The JVM exits with the driver (its stdin closes); a bounded wait for that, then none may be left.
        deadline = time.monotonic() + 60
        while any(alive(pid) for pid in seen) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in seen if alive(pid)], f"left behind after SIGTERM at {point}: {seen}"
        assert not list((tmp_path / "lz").rglob("_staged_*"))  # nothing half-published
        assert not list((checkpoint / "ledger" / "plans").glob("*.json"))
    finished = run_connector(*args)
    assert finished.returncode == 0, finished.stderr[-4000:]
    assert_mirror_equals(LocalStorage(tmp_path / "lz"), workload)
