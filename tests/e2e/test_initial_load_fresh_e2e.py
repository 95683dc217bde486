"""A fresh initial load on the real stacks (issue 25): marker-free, our connector SIGKILLed mid-load, then changes.

One scenario per source (Postgres and MariaDB), to keep CI short: the stack comes up on a 40k-row ``big`` table and
two small ones; ``python -m connector run`` starts as soon as Kafka runs (before Kafka Connect and Debezium),
publishes the initial load in batches of at most ``MAX_OFFSETS_PER_TRIGGER`` records and is SIGKILLed (its whole
process group: the Python driver, Spark's JVM and its Python workers) once ``big``'s folder holds a numbered file
and the next batch's staged file (between staging and publishing); a second ``run`` on the same checkpoint and
landing zone finishes the load. The source changes (updates, deletes, inserts on every table) once Debezium
streams, while the load is still being published, and again once it is published.

Checked: every initial-load file is marker-free and every later file carries ``__rowMarker__`` as its last
column (the schema of each Parquet file, read with pyarrow); the marker-free files of each table hold exactly the
snapshot's rows, each key once (a file published twice after the kill would be inserted twice by Fabric: marker-free
rows are inserts without a duplicate check); and ``verify`` (the Delta oracle) finds no difference on any table.
``verify`` reports such duplicates too (``compare_by_key`` counts a key the Delta table holds twice as ``extra``;
seen by publishing a copy of ``big``'s first file again), but only for keys no later change touched (the MERGE of a
1/2/4 row removes every row of its key, as Fabric does), so the landing zone is counted as well.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.e2e.snapshot_restart import init_sql, sql_executor, topic_size
from tests.e2e.stack_teardown import STACK_SH, down_and_delete

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]
UP_TIMEOUT_S = 900  # a failure costs CI at most this, not 25 minutes
LOAD_TIMEOUT_S = 600
# big's rows: each is read at least three times (Debezium's snapshot, the load, verify), so no more than the kill
# needs: a load of several batches. The kill is placed by the connector's progress (a staged file, else half the
# load published, polled every 0.02 s), and batches read at most MAX_OFFSETS_PER_TRIGGER records and start at least
# a second apart (the 1 s trigger), so past half the load at least two more batches are to come: mid-load on any
# machine.
BIG_ROWS = 40_000
MAX_OFFSETS_PER_TRIGGER = 8_000  # the 40k-row load spans five batches or more
ROW_MARKER = "__rowMarker__"
NUMBERED = re.compile(r"^\d{20}\.parquet$")
TABLES = ("big", "small_a", "small_b")
SNAPSHOT_KEYS = {"big": set(range(1, BIG_ROWS + 1)), "small_a": {1, 2, 3, 4, 5}, "small_b": {1}}
SENTINEL = 900_000  # the key each table's last change inserts: once published, every earlier change is

# As soon as Debezium streams (the restarted connector is still publishing the load): keys published before the
# kill and keys still to be published.
CHANGES_MID_LOAD = (
    "UPDATE big SET n = n + 1, note = 'updated while down' "
    f"WHERE id IN (1, 2, {BIG_ROWS // 2}, {BIG_ROWS - 1}, {BIG_ROWS})",
    "UPDATE big SET n = n + 7 WHERE id % 1000 = 0",
    f"DELETE FROM big WHERE id IN (3, {BIG_ROWS * 3 // 4}, {BIG_ROWS - 2})",
    "DELETE FROM big WHERE id % 997 = 0",
    "INSERT INTO big VALUES "
    f"({BIG_ROWS + 1}, 1, 'inserted'), ({BIG_ROWS + 2}, 2, 'inserted'), ({BIG_ROWS + 3}, 3, 'inserted')",
    "DELETE FROM big WHERE id = 5",
    "INSERT INTO big VALUES (5, 5, 're-inserted')",
    "UPDATE small_a SET name = 'a1 updated' WHERE id = 1",
    "DELETE FROM small_a WHERE id = 2",
    "INSERT INTO small_a VALUES (6, 'a6')",
    "UPDATE small_b SET name = 'only, updated' WHERE id = 1",
    "INSERT INTO small_b VALUES (2, 'two')",
)
# Once the restarted connector has published the whole initial load.
CHANGES_STREAMED = (
    f"UPDATE big SET note = 'updated while streaming' WHERE id IN (4, 6, {BIG_ROWS + 1}, {BIG_ROWS * 5 // 8 + 3456})",
    f"DELETE FROM big WHERE id IN (7, {BIG_ROWS + 2}, {BIG_ROWS * 9 // 10})",
    f"INSERT INTO big VALUES ({SENTINEL}, 0, 'last change')",
    "UPDATE small_a SET name = 'a3 updated' WHERE id = 3",
    "DELETE FROM small_a WHERE id = 4",
    f"INSERT INTO small_a VALUES ({SENTINEL}, 'last change')",
    "DELETE FROM small_b WHERE id = 2",
    f"INSERT INTO small_b VALUES ({SENTINEL}, 'last change')",
)


def numbered_files(folder: Path) -> list[Path]:
    """The table's numbered Parquet files in number order (no staged ``_`` file)."""
    return sorted(p for p in folder.glob("*.parquet") if NUMBERED.match(p.name)) if folder.is_dir() else []


def column_names(path: Path) -> list[str]:
    return list(pq.read_schema(path).names)


def marker_free_key_counts(files: list[Path]) -> Counter[int]:
    """How often each ``id`` occurs over the marker-free files: what Fabric inserts without a duplicate check."""
    counts: Counter[int] = Counter()
    for path in files:
        if ROW_MARKER not in column_names(path):
            counts.update(pq.read_table(path, columns=["id"]).column("id").to_pylist())
    return counts


def duplicated_keys(counts: Counter[int]) -> dict[int, int]:
    return {key: n for key, n in counts.items() if n > 1}


class Run:
    """``python -m connector run`` in its own process group (Spark's JVM and Python workers are its children)."""

    def __init__(self, command: list[str], log_path: Path) -> None:
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def signal_group(self, sig: int) -> int:
        """Send ``sig`` to the whole process group and wait; returns the exit code."""
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass
        return self.process.wait(timeout=180)

    def kill_group(self) -> None:
        """SIGKILL whatever is left of the group (the leader may be gone while children live on)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.process.poll() is None:
            self.process.wait(timeout=60)


class Stack:
    """``stack.sh up`` on the three tables, in the background: the connector starts while Debezium snapshots."""

    def __init__(self, state_dir: Path, source: str) -> None:
        self.state_dir = state_dir
        sql_file = state_dir / "init.sql"
        sql_file.write_text(init_sql(source, BIG_ROWS), encoding="utf-8")
        source_args = ["--source", "mariadb"] if source == "mariadb" else []
        self.log_path = state_dir / "stack-sh.log"
        with self.log_path.open("a", encoding="utf-8") as err:
            self.process = subprocess.Popen(
                ["bash", str(STACK_SH), "up", "--init-sql", str(sql_file), *source_args],
                env=dict(os.environ, STATE_DIR=str(state_dir)), stdout=subprocess.PIPE, stderr=err, text=True,
            )  # fmt: skip

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def bootstrap_once_ready(self) -> str:
        """Kafka's address, once the broker is ready (Kafka Connect is starting: no topic yet)."""
        bootstrap_file = self.state_dir / "kafka" / "bootstrap"
        connect_pid = self.state_dir / "connect" / "connect.pid"  # Connect starts once the broker is ready
        deadline = time.monotonic() + UP_TIMEOUT_S
        while not connect_pid.exists():
            self.check_running()
            assert time.monotonic() < deadline, f"Kafka did not start:\n{self.log_tail()}"
            time.sleep(0.5)
        return bootstrap_file.read_text().strip()

    def check_running(self) -> None:
        """Fail when ``up`` failed (it may have ended well: then Debezium streams)."""
        assert self.process.poll() in (None, 0), f"stack.sh up failed:\n{self.log_tail()}"

    def values(self) -> dict[str, str]:
        """What ``up`` printed, once it returned (Debezium streams: its snapshot is over)."""
        stdout, _ = self.process.communicate(timeout=UP_TIMEOUT_S)
        assert self.process.returncode == 0, self.log_tail()
        return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def wait_until(
    condition: Callable[[], object], run: Run, what: str, timeout_s: float = LOAD_TIMEOUT_S, poll_s: float = 0.5
) -> None:
    """Poll ``condition()`` until true; fail when the connector exits or the bound passes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert run.alive(), f"the connector exited while waiting for {what}:\n{run.log_tail()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{run.log_tail()}"
        time.sleep(poll_s)


def mid_publish(folder: Path) -> bool:
    """A numbered file is there, and a later batch has staged its file (not renamed yet: the kill falls in it).

    Past half the load without catching a staged file (it lives a moment), any point will do.
    """
    files = numbered_files(folder)
    if not files:
        return False
    if any(p.name.startswith("_staged_") for p in folder.iterdir()):
        return True
    return sum(pq.read_metadata(p).num_rows for p in files) >= BIG_ROWS // 2


@pytest.mark.parametrize("source", ["postgres", "mariadb"])
def test_fresh_initial_load_survives_a_sigkill_mid_load_and_ends_exact(source: str, tmp_path: Path) -> None:
    started = time.monotonic()
    state_dir = Path(tempfile.mkdtemp(prefix=f"e2e-initial-load-fresh-{source}-"))
    state_dir.chmod(0o755)
    schema = "public" if source == "postgres" else "mirror"
    folders = {table: tmp_path / "lz" / f"{schema}.schema" / table for table in TABLES}
    runs: list[Run] = []
    stack: Stack | None = None
    try:
        stack = Stack(state_dir, source)
        prefix = "dbserver1.public" if source == "postgres" else "mariadb1.mirror"
        bootstrap = stack.bootstrap_once_ready()
        config = tmp_path / "mirror.yaml"
        config.write_text(f"source:\n  max_offsets_per_trigger: {MAX_OFFSETS_PER_TRIGGER}\n", encoding="utf-8")
        command = [
            sys.executable, "-m", "connector", "run", "--config", str(config),
            "--bootstrap-servers", bootstrap, "--topics", re.escape(prefix) + r"\..*",
            "--landing-zone", str(tmp_path / "lz"), "--checkpoint", str(tmp_path / "cp"),
            "--trigger", "1s", "--metrics-port", "0",
        ]  # fmt: skip
        log_path = tmp_path / "run.log"

        # 1. SIGKILL the connector's process group while it publishes big's initial load; start it again at once.
        phases = {"kafka up": time.monotonic() - started}
        first = Run(command, log_path)
        runs.append(first)

        def killing_point() -> bool:
            stack.check_running()
            return mid_publish(folders["big"])

        wait_until(killing_point, first, "big's first file and a staged one", poll_s=0.02)
        assert first.signal_group(signal.SIGKILL) == -signal.SIGKILL  # still running when killed
        at_kill = numbered_files(folders["big"])
        staged_at_kill = [p.name for p in folders["big"].glob("_staged_*")]
        rows_at_kill = sum(pq.read_metadata(p).num_rows for p in at_kill)
        assert 0 < rows_at_kill < BIG_ROWS, f"killed after the load, not in it: {rows_at_kill} rows in {at_kill}"
        assert not any(ROW_MARKER in column_names(p) for p in at_kill), at_kill
        phases["killed"] = time.monotonic() - started
        second = Run(command, log_path)
        runs.append(second)

        # 2. Debezium's snapshot is over: one pass of it, whole (no change was made yet). Then changes.
        values = stack.values()
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while (reads := topic_size(bootstrap, f"{prefix}.big")) < BIG_ROWS and time.monotonic() < deadline:
            time.sleep(0.5)
        assert reads == BIG_ROWS, f"{prefix}.big holds {reads} records after the snapshot, not one per row"
        source_url = values["postgres"] if source == "postgres" else values["mariadb"]
        execute = sql_executor(source, source_url)
        phases["stack up"] = time.monotonic() - started
        for statement in CHANGES_MID_LOAD:
            execute(statement)

        def load_published() -> bool:
            return sum(marker_free_key_counts(numbered_files(folders["big"])).values()) >= BIG_ROWS

        wait_until(load_published, second, "big's initial load")
        phases["load published"] = time.monotonic() - started

        # 3. More changes; the last change of each table shows when all of its changes are published.
        for statement in CHANGES_STREAMED:
            execute(statement)

        def sentinels_published() -> bool:
            for folder in folders.values():
                files = numbered_files(folder)
                if not files or ROW_MARKER not in column_names(files[-1]):
                    return False
                if SENTINEL not in pq.read_table(files[-1], columns=["id"]).column("id").to_pylist():
                    return False
            return True

        wait_until(sentinels_published, second, "the last change of every table")
        phases["changes published"] = time.monotonic() - started
        second.process.send_signal(signal.SIGTERM)  # the driver stops Spark itself
        second.process.wait(timeout=180)
        log = log_path.read_text(errors="replace")
        recovery = re.findall(
            r"completing batch \d+ interrupted.*|removed \d+ staged files.*|already_committed.:true", log
        )
        print(f"{source}: killed with {rows_at_kill} rows of big in {len(at_kill)} files, staged {staged_at_kill}")
        print(f"{source}: the restart: {recovery}")

        for table, folder in folders.items():
            files = numbered_files(folder)
            assert [int(p.stem) for p in files] == list(range(1, len(files) + 1)), (table, files)
            marked = [ROW_MARKER in column_names(p) for p in files]
            # The initial load is the files before the first marked one; every file after it is marked.
            assert True in marked, (table, files)
            first_marked = marked.index(True)
            assert first_marked > 0 and all(marked[first_marked:]), (table, files, marked)
            for path in files[first_marked:]:
                assert column_names(path)[-1] == ROW_MARKER, (table, path, column_names(path))
            counts = marker_free_key_counts(files)
            assert not duplicated_keys(counts), f"{table}: keys published twice marker-free (inserted twice)"
            assert set(counts) == SNAPSHOT_KEYS[table], (table, len(counts))

        tables = ",".join(f"{schema}.{table}" for table in TABLES)
        result = subprocess.run(
            [sys.executable, "-m", "connector", "verify", "--source", source_url,
             "--landing-zone", str(tmp_path / "lz"), "--tables", tables],
            capture_output=True, text=True, timeout=900, check=False, cwd=REPO_ROOT,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        for table in TABLES:
            assert re.search(rf"^{schema}\.{table}: .* missing=0 extra=0 differing=0$", result.stdout, re.MULTILINE), (
                result.stdout
            )
        phases["verified"] = time.monotonic() - started
        print(f"{source}: " + ", ".join(f"{phase} {at:.0f} s" for phase, at in phases.items()))
        print(result.stdout)
    finally:
        for run in runs:
            run.kill_group()
        if stack is not None and stack.process.poll() is None:
            stack.process.kill()
            stack.process.wait(timeout=60)
        down_and_delete(state_dir)
