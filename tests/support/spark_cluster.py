"""A real Spark standalone cluster for tests: ``deploy/local/spark-cluster.sh`` and its processes.

The cluster (a master and two one-core workers) runs from the pip pyspark install with its state in a
temporary folder. Besides starting and stopping it, this finds a worker's processes (the worker JVM, the
executor JVM it launched, that executor's Python daemon and workers) and the tasks an executor is running,
from the executor's own log in the worker's work folder, so a test can SIGKILL one at a chosen moment.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

REPO_ROOT = Path(__file__).resolve().parents[2]
SPARK_CLUSTER_SH = REPO_ROOT / "deploy" / "local" / "spark-cluster.sh"
WORKERS = 2
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 90

T = TypeVar("T")

_RUNNING = re.compile(r"Running task (\d+)\.(\d+) in stage (\S+) \(TID (\d+)\)")
_FINISHED = re.compile(r"Finished task \S+ in stage \S+ \(TID (\d+)\)")


def _script(command: str, state_dir: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        STATE_DIR=str(state_dir),
        WORKERS=str(WORKERS),
        WORKER_CORES="1",
        WORKER_MEMORY="1g",
        SPARK_CLUSTER_START_TIMEOUT=str(START_TIMEOUT_S - 30),
    )
    return subprocess.run(
        ["bash", str(SPARK_CLUSTER_SH), command], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def wait_for(what: str, check: Callable[[], T | None], timeout: float, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns something other than ``None``/``False``; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            msg = f"not within {timeout:.0f}s: {what}"
            raise TimeoutError(msg)
        time.sleep(interval)


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid``, from /proc (parents before children)."""
    parent_of: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'.
        parent_of[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop(0)
        kids = [child for child, parent in parent_of.items() if parent == current]
        found.extend(kids)
        frontier.extend(kids)
    return found


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class Task:
    """A Spark task as an executor's log names it: ``task <index>.<attempt> in stage <stage>``."""

    index: int
    attempt: int
    stage: str


@dataclass
class SparkCluster:
    """A started ``spark-cluster.sh`` cluster: its master URL and its state folder."""

    state_dir: Path
    master: str

    @classmethod
    def start(cls, state_dir: Path) -> SparkCluster:
        try:
            result = _script("start", state_dir, START_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            _script("stop", state_dir, STOP_TIMEOUT_S)
            msg = f"spark-cluster.sh start timed out; stderr:\n{exc.stderr!r}"
            raise RuntimeError(msg) from exc
        lines = result.stdout.strip().splitlines()
        prefix = "spark.master="
        if result.returncode != 0 or len(lines) != 1 or not lines[0].startswith(prefix):
            _script("stop", state_dir, STOP_TIMEOUT_S)
            msg = f"spark-cluster.sh start failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
            raise RuntimeError(msg)
        return cls(state_dir, lines[0][len(prefix) :])

    def restart_missing_workers(self) -> None:
        """``spark-cluster.sh start`` again: starts the workers that are not running, waits until all registered."""
        again = SparkCluster.start(self.state_dir)
        assert again.master == self.master

    def stop(self) -> None:
        result = _script("stop", self.state_dir, STOP_TIMEOUT_S)
        if result.returncode != 0:
            msg = f"spark-cluster.sh stop failed (exit {result.returncode}): {result.stderr}"
            raise RuntimeError(msg)

    def status(self) -> subprocess.CompletedProcess[str]:
        return _script("status", self.state_dir, STOP_TIMEOUT_S)

    def worker_pid(self, n: int) -> int:
        pid = int((self.state_dir / f"worker-{n}" / "worker.pid").read_text())
        assert "org.apache.spark.deploy.worker.Worker" in _cmdline(pid), f"worker {n} (pid {pid}) is not running"
        return pid

    def executor_pid(self, n: int) -> int | None:
        """The executor JVM worker ``n`` runs now, if any."""
        for pid in _children(self.worker_pid(n)):
            if "CoarseGrainedExecutorBackend" in _cmdline(pid):
                return pid
        return None

    def running_tasks(self, executor_pid: int) -> list[Task]:
        """Tasks the executor has started and not finished, from its log (``<its working folder>/stderr``)."""
        try:
            log = (Path(os.readlink(f"/proc/{executor_pid}/cwd")) / "stderr").read_text(errors="replace")
        except OSError:
            return []
        finished = {int(tid) for tid in _FINISHED.findall(log)}
        return [
            Task(int(index), int(attempt), stage)
            for index, attempt, stage, tid in _RUNNING.findall(log)
            if int(tid) not in finished
        ]

    def retried(self, task: Task) -> bool:
        """Whether an executor of this cluster started a later attempt of ``task`` (same stage)."""
        pattern = re.compile(rf"Running task {task.index}\.(\d+) in stage {re.escape(task.stage)} \(TID")
        for log in self.state_dir.glob("worker-*/work/app-*/*/stderr"):
            attempts = pattern.findall(log.read_text(errors="replace"))
            if any(int(attempt) > task.attempt for attempt in attempts):
                return True
        return False

    def kill_executor(self, pid: int) -> list[int]:
        """SIGKILL an executor JVM and its Python daemon and workers (they would not outlive it long anyway)."""
        return _kill_tree(pid)

    def kill_worker(self, n: int) -> list[int]:
        """SIGKILL worker ``n``'s JVM and everything under it (executor JVM, Python): a machine lost."""
        return _kill_tree(self.worker_pid(n))


def _kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and its descendants (found first, so none is re-parented out of reach)."""
    victims = [pid, *_children(pid)]
    for victim in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    return victims
