"""Debezium killed in the middle of its initial snapshot, on the real stacks (issue 25).

``up_killed_mid_snapshot`` brings a stack up on a database holding a ``big`` table (``rows`` rows, ``BIG_ROWS``
unless told) and two small ones, SIGKILLs the Kafka Connect worker once the ``big`` topic holds ``kill_after``
records (its initial snapshot is then under way), keeps changing ``big`` (updates, deletes, inserts) while Connect
is down and after, and brings Connect back with ``stack.sh up`` (the connector is registered already, so Debezium
starts again from its last committed offsets). ``snapshot_runs`` tells what Debezium sent: the runs of
``source.snapshot`` values per table, in Kafka order.

Run as a script it prints that, for a report: ``python -m tests.e2e.snapshot_restart postgres|mariadb``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.stack_teardown import STACK_SH

BIG_ROWS = 200_000
UP_TIMEOUT_S = 1500


def init_sql(source: str, rows: int = BIG_ROWS) -> str:
    """The tables: ``big`` (``rows`` rows), ``small_a`` (5 rows) and ``small_b`` (1 row)."""
    if source == "postgres":
        return (
            "CREATE TABLE big (id bigint PRIMARY KEY, n integer NOT NULL, note text);\n"
            f"INSERT INTO big SELECT g, g % 1000, 'row ' || g FROM generate_series(1, {rows}) g;\n"
            "CREATE TABLE small_a (id integer PRIMARY KEY, name text);\n"
            "INSERT INTO small_a SELECT g, 'a' || g FROM generate_series(1, 5) g;\n"
            "CREATE TABLE small_b (id integer PRIMARY KEY, name text);\n"
            "INSERT INTO small_b VALUES (1, 'only');\n"
        )
    return (
        "CREATE TABLE big (id BIGINT PRIMARY KEY, n INT NOT NULL, note VARCHAR(64));\n"
        f"INSERT INTO big SELECT seq, seq % 1000, CONCAT('row ', seq) FROM seq_1_to_{rows};\n"
        "CREATE TABLE small_a (id INT PRIMARY KEY, name VARCHAR(32));\n"
        "INSERT INTO small_a SELECT seq, CONCAT('a', seq) FROM seq_1_to_5;\n"
        "CREATE TABLE small_b (id INT PRIMARY KEY, name VARCHAR(32));\n"
        "INSERT INTO small_b VALUES (1, 'only');\n"
    )


def _stack(state_dir: Path, *args: str, timeout: float = UP_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATE_DIR=str(state_dir))
    with open(state_dir / "stack-sh.log", "a", encoding="utf-8") as err:
        return subprocess.run(
            ["bash", str(STACK_SH), *args], env=env, stdout=subprocess.PIPE, stderr=err, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip


def _values(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def topic_size(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` (end minus start offsets of every partition); 0 while it or the broker is not there."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "snapshot-restart-probe"})
    try:
        try:
            meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        except KafkaException:
            return 0  # the broker is still starting (its bootstrap file is written first)
        if meta is None or meta.error is not None:
            return 0
        total = 0
        for partition in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


@dataclass
class Changer:
    """Keeps changing ``big`` in its own thread: an update, a delete and an insert per round."""

    execute: Callable[[str], None]
    rows: int = BIG_ROWS
    """The keys ``big`` was created with: the range updates and deletes pick from."""
    seed: int = 25
    rounds: int = 0
    stop_event: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    next_id: int = BIG_ROWS + 1

    def round(self, rng: random.Random) -> None:
        key = rng.randint(1, self.rows)
        self.execute(f"UPDATE big SET n = n + 1, note = 'updated {self.rounds}' WHERE id = {key}")
        self.execute(f"DELETE FROM big WHERE id = {rng.randint(1, self.rows)}")
        self.execute(f"INSERT INTO big VALUES ({self.next_id}, {self.rounds}, 'inserted')")
        self.next_id += 1
        self.rounds += 1

    def run(self) -> None:
        rng = random.Random(self.seed)
        while not self.stop_event.is_set():
            try:
                self.round(rng)
            except Exception as exc:  # noqa: BLE001 - reported by the caller
                self.errors.append(repr(exc))
                return
            time.sleep(0.02)

    @contextmanager
    def running(self) -> Iterator[Changer]:
        thread = threading.Thread(target=self.run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.stop_event.set()
            thread.join(timeout=60)


def sql_executor(source: str, url: str) -> Callable[[str], None]:
    """Autocommit statements on the stack's database."""
    if source == "postgres":
        import psycopg

        conn = psycopg.connect(url, autocommit=True)
        return lambda statement: conn.execute(statement)  # type: ignore[arg-type]
    import pymysql  # type: ignore[import-untyped]

    from connector.readback.database_mysql import MySqlSource

    parsed = MySqlSource.from_url(url)
    mconn = pymysql.connect(
        host=parsed.host, port=parsed.port, user=parsed.user, password=parsed.password,
        database=parsed.database, autocommit=True,
    )  # fmt: skip

    def execute(statement: str) -> None:
        with mconn.cursor() as cursor:
            cursor.execute(statement)

    return execute


def db_url_from_state(state_dir: Path, source: str) -> str:
    """The database URL of a stack whose ``up`` did not finish (``stack.sh env`` needs Connect running)."""
    env = dict(line.split("=", 1) for line in (state_dir / "stack.env").read_text().splitlines() if "=" in line)
    if source == "postgres":
        return f"postgresql://mirror:{env['PG_PASSWORD']}@127.0.0.1:{env['PG_PORT']}/mirror"
    return f"mysql://mirror:{env['DB_PASSWORD']}@127.0.0.1:{env['DB_PORT']}/mirror"


def up_killed_mid_snapshot(
    state_dir: Path, source: str, kill_after: int = 60_000, rows: int = BIG_ROWS
) -> tuple[dict[str, str], Changer]:
    """The stack up after Connect was SIGKILLed mid-snapshot of ``big`` (``rows`` rows, killed once its topic holds
    ``kill_after`` records); ``big`` changed before and after.

    Returns ``stack.sh up``'s values (plus ``state_dir`` and ``big_topic``) and the changer, still running:
    stop it with ``changer.stop_event.set()``.
    """
    sql_file = state_dir / "init.sql"
    sql_file.write_text(init_sql(source, rows), encoding="utf-8")
    source_args = ("--source", "mariadb") if source == "mariadb" else ()
    env = dict(os.environ, STATE_DIR=str(state_dir))
    log = open(state_dir / "stack-sh.log", "a", encoding="utf-8")  # noqa: SIM115 - closed below
    first = subprocess.Popen(
        ["bash", str(STACK_SH), "up", "--init-sql", str(sql_file), *source_args],
        env=env, stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    big_topic = "dbserver1.public.big" if source == "postgres" else "mariadb1.mirror.big"
    bootstrap_file = state_dir / "kafka" / "bootstrap"
    pid_file = state_dir / "connect" / "connect.pid"
    deadline = time.monotonic() + UP_TIMEOUT_S
    while True:
        if first.poll() is not None:
            log.close()
            msg = f"stack.sh up ended (exit {first.returncode}) before the snapshot reached {kill_after} records"
            raise RuntimeError(msg)
        if time.monotonic() > deadline:
            first.kill()
            msg = "the snapshot never reached the kill point"
            raise RuntimeError(msg)
        if bootstrap_file.exists() and pid_file.exists():
            size = topic_size(bootstrap_file.read_text().strip(), big_topic)
            if size >= kill_after:
                os.kill(int(pid_file.read_text().strip()), 9)
                break
        time.sleep(0.05)  # a step's overshoot is what the kill's margin must cover: the snapshot goes on meanwhile
    first.wait(timeout=300)
    log.close()
    changer = Changer(sql_executor(source, db_url_from_state(state_dir, source)), rows=rows, next_id=rows + 1)
    thread = threading.Thread(target=changer.run, daemon=True)
    thread.start()
    time.sleep(1)  # changes while Debezium is down (they go on through Connect's restart below as well)
    result = _stack(state_dir, "up", *source_args)
    if result.returncode != 0:
        changer.stop_event.set()
        msg = f"stack.sh up after the kill failed (exit {result.returncode}); see {state_dir}/stack-sh.log"
        raise RuntimeError(msg)
    values = _values(result.stdout)
    values["state_dir"] = str(state_dir)
    values["big_topic"] = big_topic
    values["killed_at_records"] = str(kill_after)
    return values, changer


def snapshot_runs(bootstrap: str, topic: str) -> list[tuple[str, str, int, Any, Any]]:
    """The topic's records as runs of (op, source.snapshot): (op, snapshot, count, first key id, last key id)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"probe-{time.time()}", "enable.auto.commit": False}
    )
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    runs: list[list[Any]] = []
    seen = 0
    while seen < end:
        message = consumer.poll(5)
        if message is None:
            break
        if message.error() is not None:
            continue
        seen += 1
        value = message.value()
        if not value:
            op, snap, key = "tombstone", "-", None
        else:
            payload = json.loads(value)
            payload = payload.get("payload", payload)
            op = payload.get("op")
            snap = str((payload.get("source") or {}).get("snapshot"))
            row = payload.get("after") or payload.get("before") or {}
            key = row.get("id")
        if runs and runs[-1][0] == op and runs[-1][1] == snap:
            runs[-1][2] += 1
            runs[-1][4] = key
        else:
            runs.append([op, snap, 1, key, key])
    consumer.close()
    return [tuple(run) for run in runs]  # type: ignore[misc]


def main() -> None:
    """Print what Debezium sent for each table after a kill mid-snapshot (the stack is left running)."""
    source = sys.argv[1]
    state_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix=f"snaprestart-{source}-"))
    state_dir.mkdir(parents=True, exist_ok=True)
    state_dir.chmod(0o755)
    values, changer = up_killed_mid_snapshot(state_dir, source)
    time.sleep(10)
    changer.stop_event.set()
    time.sleep(5)
    print(json.dumps(values), flush=True)
    prefix = values["big_topic"].rsplit(".", 1)[0]
    for table in ("big", "small_a", "small_b"):
        print(f"== {prefix}.{table}", flush=True)
        runs = snapshot_runs(values["bootstrap.servers"], f"{prefix}.{table}")
        for run in runs[:12]:
            print("  ", run, flush=True)
        if len(runs) > 12:
            print(f"   ... {len(runs) - 12} more runs, none of them reads: {all(r[0] != 'r' for r in runs[12:])}")
    print(f"changer rounds {changer.rounds} errors {changer.errors}", flush=True)


if __name__ == "__main__":
    main()
