"""CPU seconds per process from ``/proc`` (no psutil), and Spark's own task CPU from its REST API."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds a process has used so far, from ``/proc/<pid>/stat`` (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ExecutorCpu:
    """CPU seconds of the executors' processes and their Python workers, read from ``/proc`` (this machine).

    ``local[*]``: the executors are the JVM PySpark started (which is also Spark's driver: its own CPU is
    not separable there) and the Python workers under it. A standalone cluster on this machine: the
    processes whose command line names the application id (``CoarseGrainedExecutorBackend --app-id``) and
    their descendants. Each process's last reading is kept, so workers that exit still count up to then.
    """

    def __init__(self, local_jvm: int | None, app_id: str) -> None:
        self.local_jvm = local_jvm
        self.app_id = app_id
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.sampled = False
        self.source = (
            "/proc: the local JVM (driver and executors in one) + its Python workers"
            if local_jvm
            else "/proc: executor JVMs of this app on this machine + their Python workers"
        )

    def roots(self) -> list[int]:
        if self.local_jvm:
            return [self.local_jvm]
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"CoarseGrainedExecutorBackend" in cmdline and self.app_id.encode() in cmdline:
                    found.append(int(entry))
        return found

    def sample(self) -> None:
        """Read every process's CPU; the first call sets the start. A process born after it counts from zero: the
        Python workers forked during the first batch used CPU before any later reading saw them."""
        started, self.sampled = self.sampled, True
        for pid in process_tree(self.roots()):
            used = cpu_seconds(pid)
            self.first.setdefault(pid, 0.0 if started else used)
            self.last[pid] = max(used, self.last.get(pid, 0.0))

    def total(self) -> float:
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


def process_tree(roots: list[int]) -> list[int]:
    """``roots`` and all their descendants, from ``/proc/<pid>/stat``'s parent ids."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(text[text.rindex(")") + 2 :].split()[1])
            children.setdefault(parent, []).append(int(entry))
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def stage_task_cpu_seconds(ui_url: str | None, app_id: str) -> float:
    """Sum of ``executorCpuTime`` (ns) over the application's stages, from Spark's REST API."""
    import urllib.request

    import orjson

    if not ui_url:
        return float("nan")
    with urllib.request.urlopen(f"{ui_url}/api/v1/applications/{app_id}/stages", timeout=30) as answer:  # noqa: S310
        stages = orjson.loads(answer.read())
    return float(sum(stage.get("executorCpuTime", 0) for stage in stages)) / 1e9


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``), printed beside absolute figures: they hold for it only."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def load_average() -> str:
    """The 1, 5 and 15-minute load averages (``/proc/loadavg``), printed beside figures taken on a shared machine."""
    try:
        return ",".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def thread_group(name: str) -> str:
    """A thread's name without its number (``GC Thread#3`` → ``GC Thread``; ``Executor task l`` stays)."""
    return re.sub(r"[\s#_-]*\d+$", "", name.strip()) or name


class ThreadCpu:
    """CPU seconds of one process's threads, grouped by name (the JVM names its threads: GC, compiler, tasks).

    Each thread's last reading is kept, so threads that end still count up to their last sample.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.first: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}

    def sample(self) -> None:
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return
        for tid in tids:
            try:
                name = Path(f"/proc/{self.pid}/task/{tid}/comm").read_text()
            except OSError:
                continue
            used = cpu_seconds(f"{self.pid}/task/{tid}")
            self.first.setdefault(int(tid), used)
            self.last[int(tid)] = (thread_group(name), used)

    def by_group(self) -> dict[str, float]:
        """CPU seconds per thread group since each thread's first sample, largest first."""
        groups: dict[str, float] = {}
        for tid, (group, used) in self.last.items():
            groups[group] = groups.get(group, 0.0) + used - self.first[tid]
        return dict(sorted(groups.items(), key=lambda item: -item[1]))


def settings_varied(args: Any) -> str:
    """``spark_conf={...} kafka_options={...}``: the settings a run varied, printed in its last line (no spaces)."""
    import orjson

    return (
        f"spark_conf={orjson.dumps(args.spark_conf).decode()} kafka_options={orjson.dumps(args.kafka_option).decode()} "
        f"planner={getattr(args, 'planner', 'python')}"
    )
