"""How many files, and how many rows per file, a big initial load publishes (issue 25), on the real stack.

Fabric ingests per file, so a table's initial load is cheaper for it in fewer, larger files. This measures it
on ``deploy/local/stack.sh`` (Postgres → Debezium → Kafka): a ``big`` table of ``--rows`` rows is created before
Debezium starts, so Debezium's initial snapshot reads it, and ``python -m connector run`` mirrors it in these
scenarios, each with a landing zone and a checkpoint of its own:

- ``live-default``: the connector runs as a service (``--trigger 10s``, the defaults) while Debezium snapshots;
- ``catchup-default``: ``--trigger available-now`` once the whole snapshot is in Kafka, the defaults;
- ``catchup-tuned``: the same with ``--catchup-settings`` (default: ``max_offsets_per_trigger`` 1,000,000);
- ``live-tuned``: a second Debezium connector (``stack.sh register-connector``, topic prefix ``dbserver2``)
  snapshots the table again while a connector with ``--live-settings`` runs as a service.

For each: the numbered Parquet files of the table, rows per file (min / median / max, read with pyarrow),
files with ``__rowMarker__``, the wall time, whether ``python -m connector verify`` finds the mirror exact,
and the load average. The stack is brought up under ``--state-dir`` and stopped at the end::

    python -m benchmarks.initial_load_files --rows 1000000 --state-dir /tmp/ilf-state --work /tmp/ilf-work
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow.parquet as pq

from benchmarks.cpu import process_tree
from benchmarks.service import REPO_ROOT, Connector, batch_lines, start_connector
from tests.e2e.snapshot_restart import topic_size

STACK_SH = REPO_ROOT / "deploy" / "local" / "stack.sh"
TABLE = "public.big"
TABLE_FOLDER = Path("public.schema") / "big"
_NUMBERED = re.compile(r"^\d{20}\.parquet$")
_TUNED_CATCHUP = "source:\n  max_offsets_per_trigger: 1000000\n"
_TUNED_LIVE = (
    "source:\n  min_offsets_per_trigger: 500000\n  max_trigger_delay: 1m\n  max_offsets_per_trigger: 1000000\n"
)


def init_sql(rows: int) -> str:
    """``big``: ``rows`` rows of eight columns (ints, text, a decimal, a boolean, a timestamp with time zone)."""
    return (
        "CREATE TABLE big (id bigint PRIMARY KEY, customer_id integer NOT NULL, status text, note text,"
        " amount numeric(12,2), quantity integer, paid boolean, created_at timestamptz);\n"
        "INSERT INTO big SELECT g, g % 9973, CASE WHEN g % 3 = 0 THEN 'new' ELSE 'shipped' END,"
        " 'order note number ' || g, (g % 100000) / 100.0, g % 17, g % 2 = 0,"
        f" timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second' FROM generate_series(1, {rows}) g;\n"
    )


@dataclass
class Figures:
    """One scenario's outcome."""

    scenario: str
    settings: str
    files: int
    rows: int
    rows_min: int
    rows_median: float
    rows_max: int
    marked_files: int
    mib: float
    batches: int
    wall_s: float
    after_last_record_s: float | None
    snapshot_in_kafka_s: float | None
    peak_rss_mib: int
    peak_python_rss_mib: int
    exact: bool
    load_before: str
    load_after: str


class PeakMemory:
    """Peak RSS of a process tree (the connector, its JVM and Spark's Python workers), sampled from ``/proc``.

    Larger files come from larger task slices, and a task holds its slice several times over at its peak.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tree_mib = 0.0
        self.python_mib = 0.0  # the largest Python process of the tree (the driver or a worker)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            total = 0.0
            for pid in process_tree([self.pid]):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    python = b"python" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
                except OSError:
                    continue
                line = next((x for x in status.splitlines() if x.startswith("VmRSS:")), None)
                mib = int(line.split()[1]) / 1024 if line else 0.0
                total += mib
                if python:
                    self.python_mib = max(self.python_mib, mib)
            self.tree_mib = max(self.tree_mib, total)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def loadavg() -> str:
    """``uptime``'s three load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def table_files(landing: Path) -> list[tuple[int, bool, int]]:
    """(rows, has ``__rowMarker__``, bytes) of every numbered Parquet file of the table, in number order."""
    folder = landing / TABLE_FOLDER
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(p for p in folder.iterdir() if _NUMBERED.match(p.name)):
        meta = pq.read_metadata(path)
        out.append((meta.num_rows, "__rowMarker__" in meta.schema.names, path.stat().st_size))
    return out


def published_rows(landing: Path) -> int:
    return sum(rows for rows, _, _ in table_files(landing))


def stack(state_dir: Path, *args: str) -> subprocess.Popen[str]:
    """``stack.sh ARGS`` on ``state_dir`` in the background; its stderr is appended to ``stack-sh.log``."""
    log = (state_dir / "stack-sh.log").open("a", encoding="utf-8")
    try:
        return subprocess.Popen(
            ["bash", str(STACK_SH), *args],
            env={**os.environ, "STATE_DIR": str(state_dir), "STACK_TIMEOUT": "1800"},
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    finally:
        log.close()


def finished(process: subprocess.Popen[str], what: str) -> dict[str, str]:
    """The ``key=value`` lines ``stack.sh`` printed; an error naming ``what`` if it failed."""
    stdout, _ = process.communicate(timeout=3600)
    if process.returncode != 0:
        msg = f"{what} failed (exit {process.returncode}); see stack-sh.log in the state dir"
        raise RuntimeError(msg)
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def verify(source_url: str, landing: Path) -> bool:
    result = subprocess.run(
        [sys.executable, "-m", "connector", "verify", "--source", source_url, "--landing-zone", str(landing),
         "--tables", TABLE],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    print(result.stdout[-1500:], result.stderr[-1500:], sep="\n", file=sys.stderr)
    return result.returncode == 0


def connector_args(scenario_dir: Path, bootstrap: str, topic: str, settings: str) -> list[str]:
    """``run``'s arguments: the scenario's own landing zone, checkpoint and YAML settings; no metrics port."""
    config = scenario_dir / "mirror.yaml"
    config.write_text(settings or "{}\n", encoding="utf-8")
    return [
        "--config", str(config), "--bootstrap-servers", bootstrap, "--topics", re.escape(topic),
        "--landing-zone", str(scenario_dir / "lz"), "--checkpoint", str(scenario_dir / "cp"), "--metrics-port", "0",
    ]  # fmt: skip


def figures(
    scenario: str,
    settings: str,
    landing: Path,
    log: Path,
    wall_s: float,
    timings: tuple[float, float] | None,
    exact: bool,
    load: str,
    memory: PeakMemory,
) -> Figures:
    """``timings``: a live scenario's (first to last snapshot record in Kafka, last record to all rows published)."""
    files = table_files(landing)
    rows = [r for r, _, _ in files] or [0]
    return Figures(
        scenario=scenario,
        settings=" ".join(settings.split()) or "defaults",
        files=len(files),
        rows=sum(rows),
        rows_min=min(rows),
        rows_median=statistics.median(rows),
        rows_max=max(rows),
        marked_files=sum(1 for _, marked, _ in files if marked),
        mib=round(sum(b for _, _, b in files) / 2**20, 1),
        batches=sum(1 for b in batch_lines(log.read_bytes()) if b.get("rows")),
        wall_s=round(wall_s, 1),
        after_last_record_s=None if timings is None else round(timings[1], 1),
        snapshot_in_kafka_s=None if timings is None else round(timings[0], 1),
        peak_rss_mib=round(memory.tree_mib),
        peak_python_rss_mib=round(memory.python_mib),
        exact=exact,
        load_before=load,
        load_after=loadavg(),
    )


def catch_up(work: Path, name: str, values: dict[str, str], topic: str, settings: str) -> Figures:
    """``run --trigger available-now`` over the whole snapshot, already in Kafka."""
    scenario_dir = work / name
    scenario_dir.mkdir(parents=True)
    load = loadavg()
    args = connector_args(scenario_dir, values["bootstrap.servers"], topic, settings)
    started = time.monotonic()
    connector = start_connector([*args, "--trigger", "available-now"], scenario_dir / "run.log")
    memory = PeakMemory(connector.process.pid)
    code = connector.process.wait(3600)
    memory.stop()
    wall = time.monotonic() - started
    if code != 0:
        msg = f"{name}: the connector exited {code}:\n{connector.tail()}"
        raise RuntimeError(msg)
    exact = verify(values["postgres"], scenario_dir / "lz")
    return figures(name, settings, scenario_dir / "lz", connector.log_path, wall, None, exact, load, memory)


def live(
    work: Path,
    name: str,
    bootstrap: str,
    topic: str,
    settings: str,
    rows: int,
    snapshot_done: Callable[[], dict[str, str]],
) -> tuple[Figures, dict[str, str]]:
    """The connector as a service (trigger 10s) while Debezium snapshots into ``topic``; stopped once all is in."""
    scenario_dir = work / name
    scenario_dir.mkdir(parents=True)
    load = loadavg()
    deadline = time.monotonic() + 1800
    while topic_size(bootstrap, topic) == 0:
        if time.monotonic() > deadline:
            msg = f"{name}: {topic} stayed empty for 30 minutes"
            raise RuntimeError(msg)
        time.sleep(0.5)
    args = connector_args(scenario_dir, bootstrap, topic, settings)
    started = time.monotonic()
    connector: Connector = start_connector(args, scenario_dir / "run.log")
    memory = PeakMemory(connector.process.pid)
    try:
        values = snapshot_done()
        while topic_size(bootstrap, topic) < rows:  # Debezium's last reads may still be in flight
            time.sleep(0.5)
        in_kafka = time.monotonic()
        while published_rows(scenario_dir / "lz") < rows:
            if connector.process.poll() is not None:
                msg = f"{name}: the connector exited {connector.process.returncode}:\n{connector.tail()}"
                raise RuntimeError(msg)
            time.sleep(0.5)
        done = time.monotonic()
    finally:
        connector.stop()
        memory.stop()
    exact = verify(values["postgres"], scenario_dir / "lz")
    timings = (in_kafka - started, done - in_kafka)
    lz, wall = scenario_dir / "lz", done - started
    result = figures(name, settings, lz, connector.log_path, wall, timings, exact, load, memory)
    return result, values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--state-dir", type=Path, required=True, help="the stack's STATE_DIR (created; stopped)")
    parser.add_argument("--work", type=Path, required=True, help="landing zones, checkpoints and logs (created)")
    parser.add_argument("--catchup-settings", default=_TUNED_CATCHUP, help="YAML of catchup-tuned")
    parser.add_argument("--live-settings", default=_TUNED_LIVE, help="YAML of live-tuned")
    parser.add_argument("--keep-stack", action="store_true", help="leave the stack running at the end")
    args = parser.parse_args(argv)
    args.state_dir.mkdir(parents=True, exist_ok=True)
    args.state_dir.chmod(0o755)  # Postgres runs as its own user
    args.work.mkdir(parents=True, exist_ok=False)
    sql = args.state_dir / "init.sql"
    sql.write_text(init_sql(args.rows), encoding="utf-8")
    results: list[Figures] = []
    try:
        up = stack(args.state_dir, "up", "--schemas", "public", "--init-sql", str(sql))
        bootstrap_file = args.state_dir / "kafka" / "bootstrap"
        while not bootstrap_file.exists():
            if up.poll() is not None:
                finished(up, "stack.sh up")
            time.sleep(0.5)
        bootstrap = bootstrap_file.read_text().strip()
        first, values = live(
            args.work, "live-default", bootstrap, "dbserver1.public.big", "", args.rows,
            lambda: finished(up, "stack.sh up"),
        )  # fmt: skip
        results.append(first)
        print(json.dumps(asdict(first)), flush=True)
        for name, settings in (("catchup-default", ""), ("catchup-tuned", args.catchup_settings)):
            results.append(catch_up(args.work, name, values, "dbserver1.public.big", settings))
            print(json.dumps(asdict(results[-1])), flush=True)
        second = stack(args.state_dir, "register-connector", "snapshot2", "dbserver2", "json")
        tuned, _ = live(
            args.work, "live-tuned", bootstrap, "dbserver2.public.big", args.live_settings, args.rows,
            lambda: {**values, **finished(second, "stack.sh register-connector")},
        )  # fmt: skip
        results.append(tuned)
        print(json.dumps(asdict(tuned)), flush=True)
    finally:
        if not args.keep_stack:
            stack(args.state_dir, "down").communicate(timeout=600)
    print(
        "| scenario | settings | files | rows per file min / median / max | marked files | MiB | batches | wall s"
        " | snapshot in Kafka s | after last record s | peak RSS MiB (largest Python) | exact | load before → after |"
    )
    for f in results:
        after = "" if f.after_last_record_s is None else f"{f.after_last_record_s}"
        snapshot = "" if f.snapshot_in_kafka_s is None else f"{f.snapshot_in_kafka_s}"
        print(
            f"| {f.scenario} | {f.settings} | {f.files} | {f.rows_min:,} / {f.rows_median:,.0f} / {f.rows_max:,}"
            f" | {f.marked_files} | {f.mib} | {f.batches} | {f.wall_s} | {snapshot} | {after}"
            f" | {f.peak_rss_mib} ({f.peak_python_rss_mib}) | {f.exact} |"
            f" {f.load_before} → {f.load_after} |"
        )
    if not all(f.exact and f.rows == args.rows for f in results):
        print("MIRROR NOT EXACT", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
