"""Table rebuilds on the real stack: Postgres → Debezium → Kafka → connector, with a real incremental snapshot.

A column type change stops a table (open mirroring cannot change a column's type). The rebuild deletes the
table's folder, waits (here: ``mirror.rebuild.wait_s``, since Fabric's status is not configured), resets
the ledger entry and signals Debezium through its Kafka signal channel; Debezium's incremental snapshot
then re-reads the table in chunks while the test keeps writing to it and to another table. ``verify``
must then find zero differences in every table, and the other table must never have stopped.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self, TextIO

import orjson
import psycopg
import pytest
from confluent_kafka import Consumer

from connector.publish.ledger import BatchLedger
from connector.publish.ledger_state import TableState
from connector.publish.lifecycle import Phase
from connector.readback.verify import verify
from connector.storage import LocalStorage
from tests.e2e.mirror_source import postgres_source, wait_for_watermark
from tests.support.debezium import notification
from tests.support.kafka import REPO_ROOT, run_connector

pytestmark = pytest.mark.e2e

# With the stack's incremental.snapshot.chunk.size (100) Debezium reads the table in about 30 chunks.
ROWS = 3000
WAIT_S = 240.0


def write_config(tmp: Path, *, automatic: bool, wait_s: float, type_changed: str = "rebuild") -> Path:
    config = tmp / "config.yaml"
    config.write_text(
        "mirror:\n"
        "  toast_policy: keep-last\n"
        "  max_rows_per_file: 200\n"
        f"  on_table_stopped: {'rebuild' if automatic else 'stay'}\n"
        "  rebuild:\n"
        f"    wait_s: {wait_s}\n"
        "  schema_changes:\n"
        f"    type_changed: {type_changed}\n"
    )
    return config


def create_tables(conn: psycopg.Connection[Any], table: str, other: str) -> None:
    conn.execute(f"CREATE TABLE public.{table} (id int PRIMARY KEY, qty int NOT NULL, note text)")
    conn.execute(f"CREATE TABLE public.{other} (id int PRIMARY KEY, v text)")
    conn.execute(f"INSERT INTO public.{table} SELECT g, g * 10, 'row ' || g FROM generate_series(1, {ROWS}) g")
    conn.execute(f"INSERT INTO public.{other} SELECT g, 'v' || g FROM generate_series(1, 50) g")


def change_type(conn: psycopg.Connection[Any], table: str) -> None:
    """qty int → bigint: the next events carry an int64 column where the mirror has int32."""
    conn.execute(f"ALTER TABLE public.{table} ALTER COLUMN qty TYPE bigint")
    conn.execute(f"UPDATE public.{table} SET qty = qty + 5000000000 WHERE id <= 10")


def write_some(conn: psycopg.Connection[Any], rng: random.Random, table: str, other: str, ops: int) -> None:
    """Updates, deletes and inserts on both tables (the rebuilt one is being snapshotted meanwhile)."""
    for _ in range(ops):
        key = rng.randint(1, ROWS + 200)
        kind = rng.random()
        if kind < 0.6:
            conn.execute(f"UPDATE public.{table} SET qty = qty + 1, note = %s WHERE id = %s", (uuid.uuid4().hex, key))
        elif kind < 0.75:
            conn.execute(f"DELETE FROM public.{table} WHERE id = %s", (key,))
        elif kind < 0.9:
            conn.execute(
                f"INSERT INTO public.{table} VALUES (%s, %s, 'new') ON CONFLICT (id) DO UPDATE SET note = 'again'",
                (key, key),
            )
        else:
            conn.execute(f"UPDATE public.{other} SET v = %s WHERE id = %s", (uuid.uuid4().hex, rng.randint(1, 50)))


class Connector:
    """``python -m connector run`` in the background, logging to a file; SIGKILL or SIGTERM it."""

    def __init__(
        self, stack: dict[str, str], tmp: Path, config: Path, topics: str | None = None, *, own_group: bool = False
    ) -> None:
        self.tmp = tmp
        self.own_group = own_group  # its own process group: ``pause`` stops the JVM and Python workers with it
        self.command = [
            sys.executable,
            "-m",
            "connector",
            "run",
            "--config",
            str(config),
            "--bootstrap-servers",
            stack["bootstrap.servers"],
            "--topics",
            topics or stack["topics"],
            "--landing-zone",
            str(tmp / "lz"),
            "--checkpoint",
            str(tmp / "cp"),
            "--trigger",
            "1s",
            "--metrics-port",
            "0",
        ]
        self.log_path = tmp / "connector.log"
        self._log: TextIO | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._log = self.log_path.open("a")
        self.process = subprocess.Popen(
            self.command,
            cwd=REPO_ROOT,
            stdout=self._log,
            stderr=self._log,
            env=dict(os.environ),
            start_new_session=self.own_group,
        )

    def pause(self, sig: int = signal.SIGSTOP) -> None:
        """Stop (``SIGCONT``: resume) the connector, its JVM and its Python workers: a connector behind its topics."""
        assert self.process is not None and self.own_group
        os.killpg(self.process.pid, sig)

    def stop(self, sig: int) -> int:
        assert self.process is not None and self._log is not None
        assert self.process.poll() is None, self.log()[-4000:]  # still running: it did not die on its own
        self.process.send_signal(sig)
        code = self.process.wait(timeout=120)
        self._log.close()
        return code

    def kill_if_running(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def table(self, table_id: str) -> TableState | None:
        """The table's committed ledger entry (the ledger's state file is replaced atomically)."""
        cp = LocalStorage(self.tmp / "cp")
        return BatchLedger(cp).state.tables.get(table_id) if cp.exists("ledger/state.json") else None

    def wait_for(self, what: str, condition: Callable[[TableState], bool], table_id: str) -> TableState:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            assert self.process is not None
            assert self.process.poll() is None, f"the connector exited waiting for {what}:\n{self.log()[-4000:]}"
            table = self.table(table_id)
            if table is not None and condition(table):
                return table
            time.sleep(0.5)
        pytest.fail(f"{table_id}: no {what} within {WAIT_S}s; ledger: {self.table(table_id)}\n{self.log()[-4000:]}")


class Notifications:
    """Debezium's sink notifications: tells when the incremental snapshot of a table completed."""

    def __init__(self, stack: dict[str, str]) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": stack["bootstrap.servers"],
                "group.id": f"notifications-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([stack["notification_topic"]])
        self.seen: list[dict[str, Any]] = []

    def poll(self) -> None:
        while (msg := self.consumer.poll(0.2)) is not None:
            if msg.error() is None and msg.value():
                self.seen.append(notification(msg.value()))

    def incremental(self, kind: str, since_ms: int) -> int | None:
        """When (epoch ms) an incremental snapshot notification ``kind`` came at or after ``since_ms``."""
        self.poll()
        return next(
            (
                int(n["timestamp"])
                for n in self.seen
                if n.get("aggregate_type") == "Incremental Snapshot"
                and n.get("type") == kind
                and int(n.get("timestamp", 0)) >= since_ms
            ),
            None,
        )

    def close(self) -> None:
        self.consumer.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_until_mirror_equals_source(
    stack: dict[str, str], tmp: Path, connector: Connector, ignore: tuple[str, ...] = ()
) -> None:
    """After the watermark, until the running connector published everything and ``verify`` finds no difference.

    ``verify`` judges every table of ``public``: a connector whose topics leave tables out names them in ``ignore``.
    """
    wait_for_watermark(postgres_source(stack))
    deadline = time.monotonic() + WAIT_S
    reports: list[Any] = []
    while time.monotonic() < deadline:
        assert connector.process is not None and connector.process.poll() is None, connector.log()[-4000:]
        if not (tmp / "lz").is_dir():  # the connector makes it once started: on a loaded machine, after the watermark
            time.sleep(1)
            continue
        reports = verify(stack["postgres"], str(tmp / "lz"), ignore=ignore)
        if all(r.ok and r.source_rows == r.mirror_rows for r in reports):
            return
        time.sleep(1)
    pytest.fail("mirror != source:\n" + "\n".join(r.line() + "\n" + "\n".join(r.examples) for r in reports if not r.ok))


def wait_until_tables_exact(source_url: str, landing: Path, ids: list[str]) -> None:
    """Until ``verify`` finds each of ``ids`` exact (rows and columns) with as many rows as the source."""
    deadline = time.monotonic() + WAIT_S
    while True:
        reports = verify(source_url, str(landing), ids)
        if all(r.ok and r.source_rows == r.mirror_rows for r in reports) and len(reports) == len(ids):
            return
        assert time.monotonic() < deadline, "\n".join(r.line() + "\n" + "\n".join(r.examples) for r in reports)
        time.sleep(1)


class BackgroundWriter(ABC):
    """Runs ``write`` on one connection in a thread until the ``with`` block ends; its error is raised there."""

    pause_s = 0.005

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        if self.error is not None:
            raise self.error

    @abstractmethod
    def write(self, conn: psycopg.Connection[Any]) -> None:
        """One write of this writer's (called in a loop, ``pause_s`` apart)."""

    def _run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self._stop.is_set():
                    self.write(conn)
                    time.sleep(self.pause_s)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            self.error = exc


class Writer(BackgroundWriter):
    """Writes to both tables in a thread, recording when each statement committed (epoch ms)."""

    def __init__(self, dsn: str, table: str, other: str, seed: int) -> None:
        super().__init__(dsn)
        self.table, self.other = table, other
        self.rng = random.Random(seed)
        self.done: list[int] = []

    def write(self, conn: psycopg.Connection[Any]) -> None:
        write_some(conn, self.rng, self.table, self.other, 1)
        self.done.append(now_ms())

    def during(self, start_ms: int, end_ms: int) -> int:
        return sum(1 for t in self.done if start_ms <= t <= end_ms)


def wait_for_snapshot(notifications: Notifications, since_ms: int, table: str) -> tuple[int, int]:
    """(STARTED, COMPLETED) epoch ms of the incremental snapshot Debezium ran after ``since_ms``."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        completed = notifications.incremental("COMPLETED", since_ms)
        if completed is not None:
            started = notifications.incremental("STARTED", since_ms)
            assert started is not None, notifications.seen
            return started, completed
        time.sleep(0.5)
    pytest.fail(f"Debezium's incremental snapshot of {table} did not complete within {WAIT_S}s: {notifications.seen}")


def test_type_change_is_rebuilt_automatically_while_other_tables_stream(stack: dict[str, str], tmp_path: Path) -> None:
    table, other = "rb_auto", "rb_auto_other"
    notifications = Notifications(stack)
    connector = Connector(stack, tmp_path, write_config(tmp_path, automatic=True, wait_s=1))
    try:
        with psycopg.connect(stack["postgres"], autocommit=True) as conn:
            create_tables(conn, table, other)
            connector.start()
            connector.wait_for("initial rows", lambda t: t.rows_published >= ROWS, f"public.{table}")
            before = now_ms()
            change_type(conn, table)
            with Writer(stack["postgres"], table, other, seed=7) as writer:
                rebuilt = connector.wait_for(
                    "snapshot request",
                    lambda t: t.lifecycle.phase == "snapshot-requested" or t.lifecycle.snapshot is not None,
                    f"public.{table}",
                )
                assert "changed type" in (rebuilt.lifecycle.reason or "") and rebuilt.lifecycle.automatic_rebuilds == 1
                started, completed = wait_for_snapshot(notifications, before, table)
                time.sleep(1)
        # Writes to the rebuilt table and the other one went on while Debezium read the table in chunks.
        assert writer.during(started, completed) > 0, (started, completed, writer.done[-5:])
        wait_until_mirror_equals_source(stack, tmp_path, connector)
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()
        notifications.close()
    log = connector.log()
    assert f"asked Debezium (dbserver1) for an incremental snapshot of public.{table}" in log
    assert "Traceback" not in log
    ledger = BatchLedger(LocalStorage(tmp_path / "cp")).state.tables
    # The other table never stopped, and its files were numbered on without a restart.
    assert ledger[f"public.{other}"].lifecycle.phase == Phase.RUNNING
    assert f"table public.{other} stopped" not in log
    assert ledger[f"public.{table}"].arrow_schema().field("qty").type.bit_width == 64  # type: ignore[union-attr]
    shown = run_connector("tables", "--checkpoint", str(tmp_path / "cp"))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"public.{table}  state=running" in shown.stdout and "rebuilt" in shown.stdout


def test_manual_rebuild_survives_kill_9_while_waiting_and_during_the_snapshot(
    stack: dict[str, str], tmp_path: Path
) -> None:
    table, other = "rb_manual", "rb_manual_other"
    table_id = f"public.{table}"
    notifications = Notifications(stack)
    # Every table but the other test's: under `stay`, its type change would leave it stopped here (and differ).
    topics = r"dbserver1\.public\.(?!rb_auto|sc_).*"
    # type_changed: stop: the type change stops the table, as before type changes were rebuilt by default.
    # wait_s: the kill lands within a second of the wait's start (asserted below); the restart resumes the rest.
    config = write_config(tmp_path, automatic=False, wait_s=8, type_changed="stop")
    connector = Connector(stack, tmp_path, config, topics)
    rng = random.Random(11)
    try:
        with psycopg.connect(stack["postgres"], autocommit=True) as conn:
            create_tables(conn, table, other)
            connector.start()
            connector.wait_for("initial rows", lambda t: t.rows_published >= ROWS, table_id)
            change_type(conn, table)
            connector.wait_for("stop", lambda t: t.lifecycle.stop_reason is not None, table_id)
            assert connector.table(table_id).lifecycle.phase == Phase.STOPPED  # type: ignore[union-attr]  # stay: an operator decides

            requested = run_connector("rebuild", table_id, "--checkpoint", str(tmp_path / "cp"))
            assert requested.returncode == 0, requested.stdout + requested.stderr
            connector.wait_for("folder deletion", lambda t: t.lifecycle.phase == "waiting-for-fabric", table_id)
            assert not (tmp_path / "lz" / "public.schema" / table).exists()
            assert connector.stop(signal.SIGKILL) == -signal.SIGKILL  # killed in the middle of the rebuild
            assert connector.table(table_id).lifecycle.phase == Phase.WAITING  # type: ignore[union-attr]  # still waiting
            write_some(conn, rng, table, other, 100)

            before = now_ms()
            with Writer(stack["postgres"], table, other, seed=12) as writer:
                connector.start()
                connector.wait_for(
                    "snapshot request",
                    lambda t: t.lifecycle.phase == "snapshot-requested" or t.lifecycle.snapshot is not None,
                    table_id,
                )
                time.sleep(rng.uniform(0.2, 1.0))
                assert connector.stop(signal.SIGKILL) == -signal.SIGKILL  # killed again, during the snapshot
                connector.start()
                started, completed = wait_for_snapshot(notifications, before, table)
                time.sleep(1)
        assert writer.during(started, completed) > 0, (started, completed, writer.done[-5:])
        # The other test's tables, left out of the topics above, are in the source: not judged here.
        others = ("public.rb_auto", "public.rb_auto_other", *(f"public.{t}" for t in SCHEMA_CHANGE_TABLES))
        wait_until_mirror_equals_source(stack, tmp_path, connector, ignore=others)
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()
        notifications.close()
    ledger = BatchLedger(LocalStorage(tmp_path / "cp")).state.tables
    assert ledger[f"public.{other}"].lifecycle.stop_reason is None
    assert ledger[table_id].lifecycle.stop_reason is None and ledger[table_id].lifecycle.phase in (
        "snapshot-requested",
        "running",
    )


# -- schema changes (issue 36): every kind of DDL on its own table, default settings, one SIGKILL -----------------

SCHEMA_CHANGE_ROWS = 300
#: Each table gets one kind of change, and no other change rebuilds it.
SCHEMA_CHANGE_TABLES = ("sc_default", "sc_nullable", "sc_drop", "sc_drop_nn", "sc_rename", "sc_type", "sc_new")


def create_schema_change_tables(conn: psycopg.Connection[Any]) -> None:
    rows = f"generate_series(1, {SCHEMA_CHANGE_ROWS}) g"
    for ddl, insert in (
        ("sc_default (id int PRIMARY KEY, label text, qty int)", f"SELECT g, 'l' || g, g FROM {rows}"),
        ("sc_nullable (id int PRIMARY KEY, label text)", f"SELECT g, 'l' || g FROM {rows}"),
        ("sc_drop (id int PRIMARY KEY, label text, legacy_code text)", f"SELECT g, 'l' || g, 'c' || g FROM {rows}"),
        ("sc_drop_nn (id int PRIMARY KEY, label text, code text NOT NULL)", f"SELECT g, 'l' || g, 'c' FROM {rows}"),
        ("sc_rename (id int PRIMARY KEY, label text)", f"SELECT g, 'l' || g FROM {rows}"),
        ("sc_type (id int PRIMARY KEY, qty int NOT NULL)", f"SELECT g, g FROM {rows}"),
    ):
        conn.execute(f"CREATE TABLE public.{ddl}")
        conn.execute(f"INSERT INTO public.{ddl.split(' ')[0]} {insert}")


def migrate(conn: psycopg.Connection[Any]) -> None:
    """The application's migration, then a change to each altered table (Postgres sends no DDL event)."""
    conn.execute("ALTER TABLE public.sc_default ADD COLUMN region text NOT NULL DEFAULT 'EU'")
    conn.execute("ALTER TABLE public.sc_nullable ADD COLUMN note text")
    conn.execute("ALTER TABLE public.sc_drop DROP COLUMN legacy_code")
    conn.execute("ALTER TABLE public.sc_drop_nn DROP COLUMN code")
    conn.execute("ALTER TABLE public.sc_rename RENAME COLUMN label TO title")
    conn.execute("ALTER TABLE public.sc_type ALTER COLUMN qty TYPE bigint")
    conn.execute("CREATE TABLE public.sc_new (id int PRIMARY KEY, v text)")
    conn.execute("INSERT INTO public.sc_new SELECT g, 'v' || g FROM generate_series(1, 20) g")
    conn.execute("UPDATE public.sc_default SET qty = qty + 1 WHERE id <= 5")
    conn.execute("UPDATE public.sc_nullable SET note = 'n' WHERE id <= 5")
    conn.execute("UPDATE public.sc_drop SET label = 'x' WHERE id <= 5")
    conn.execute("UPDATE public.sc_drop_nn SET label = 'x' WHERE id <= 5")
    conn.execute("UPDATE public.sc_rename SET title = 't' WHERE id <= 5")
    conn.execute("UPDATE public.sc_type SET qty = qty + 5000000000 WHERE id <= 5")


def change_schema_change_tables(conn: psycopg.Connection[Any], rng: random.Random, ops: int) -> None:
    """Later changes to every table, in its new shape."""
    for _ in range(ops):
        key = rng.randint(1, SCHEMA_CHANGE_ROWS)
        conn.execute("UPDATE public.sc_default SET qty = qty + 1 WHERE id = %s", (key,))
        conn.execute("UPDATE public.sc_drop SET label = %s WHERE id = %s", (uuid.uuid4().hex[:8], key))
        conn.execute("DELETE FROM public.sc_rename WHERE id = %s", (key,))
        conn.execute("UPDATE public.sc_type SET qty = qty + 7 WHERE id = %s", (key,))


def test_schema_changes_mirror_exactly_with_default_settings_and_a_kill_9(
    stack: dict[str, str], tmp_path: Path
) -> None:
    """ADD COLUMN with a default and nullable, DROP COLUMN nullable and NOT NULL, RENAME, a type change and a new
    table, each on its own table, the connector as a service with the default schema-change settings and
    SIGKILLed once while they heal; verify (whole tables, column sets included) then finds every table exact."""
    ids = [f"public.{t}" for t in SCHEMA_CHANGE_TABLES]
    config = tmp_path / "config.yaml"
    config.write_text("mirror:\n  rebuild:\n    wait_s: 1\n")  # no Fabric status here: wait 1 s, not 300
    connector = Connector(stack, tmp_path, config, r"dbserver1\.public\.sc_.*")
    rng = random.Random(36)
    try:
        with psycopg.connect(stack["postgres"], autocommit=True) as conn:
            create_schema_change_tables(conn)
            connector.start()
            for tid in ids[:-1]:
                connector.wait_for("initial rows", lambda t: t.rows_published >= SCHEMA_CHANGE_ROWS, tid)
            migrate(conn)
            # Killed while the dropped column's table heals (its folder deleted or its snapshot asked for).
            connector.wait_for("rebuild", lambda t: t.lifecycle.phase != Phase.RUNNING, "public.sc_drop")
            assert connector.stop(signal.SIGKILL) == -signal.SIGKILL
            change_schema_change_tables(conn, rng, 20)
            connector.start()
            change_schema_change_tables(conn, rng, 20)
            for tid in ("public.sc_default", "public.sc_drop", "public.sc_drop_nn", "public.sc_rename"):
                connector.wait_for(
                    "snapshot request",
                    lambda t: t.lifecycle.phase == "snapshot-requested" or t.lifecycle.snapshot is not None,
                    tid,
                )
            connector.wait_for(
                "snapshot request",
                lambda t: t.lifecycle.phase == "snapshot-requested" or t.lifecycle.snapshot is not None,
                ids[5],
            )
        wait_for_watermark(postgres_source(stack))
        wait_until_tables_exact(stack["postgres"], tmp_path / "lz", ids)
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()
    ledger = BatchLedger(LocalStorage(tmp_path / "cp")).state.tables
    assert not [tid for tid in ids if ledger[tid].lifecycle.skips_events], {t: ledger[t].lifecycle for t in ids}
    assert ledger["public.sc_nullable"].lifecycle.phase == Phase.RUNNING  # a nullable column: no table read spent
    assert ledger["public.sc_new"].lifecycle.phase == Phase.RUNNING
    assert "schema change (column added" in (ledger["public.sc_default"].lifecycle.reason or "")
    log = connector.log()
    assert "table public.sc_rename: schema change column_removed (-label +title): rebuild" in log
    assert "Traceback" not in log


# -- records gone from Kafka (issue 32): the table they carried is rebuilt, the others never stop -----------------

DATA_LOSS_TABLES = ("dl_lost", "dl_kept", "dl_kept2")


def mirrored_then_stopped(
    stack: dict[str, str], tmp_path: Path, conn: psycopg.Connection[Any], ids: list[str], topics: str
) -> Connector:
    """Tables ``ids`` of 200 rows, mirrored by a connector (``rebuild.wait_s`` 1) that is then stopped gracefully."""
    config = tmp_path / "config.yaml"
    config.write_text("mirror:\n  rebuild:\n    wait_s: 1\n")
    connector = Connector(stack, tmp_path, config, topics)
    for tid in ids:
        conn.execute(f"CREATE TABLE {tid} (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {tid} SELECT g, 'v' || g FROM generate_series(1, 200) g")
    connector.start()
    try:
        for tid in ids:
            connector.wait_for("initial rows", lambda t: t.rows_published >= 200, tid)
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    except BaseException:
        connector.kill_if_running()
        raise
    return connector


def test_records_gone_from_kafka_rebuild_their_table_through_a_real_snapshot(
    stack: dict[str, str], tmp_path: Path
) -> None:
    """The connector is down while three tables change; the unread records of one table's topic are deleted (as
    retention would). The restart records the gap and begins that table's rebuild, and is SIGKILLed right after
    that commit (before Spark moved past the gap); the next start goes on: the table is re-read through a real
    incremental snapshot, the two others publish their changes and never stop, and verify finds all three exact."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    ids = [f"public.{t}" for t in DATA_LOSS_TABLES]
    with psycopg.connect(stack["postgres"], autocommit=True) as conn:
        connector = mirrored_then_stopped(stack, tmp_path, conn, ids, r"dbserver1\.public\.dl_.*")
        for tid in ids:  # changes the stopped connector has not read
            conn.execute(f"UPDATE {tid} SET v = v || '+' WHERE id <= 150")
    try:
        wait_for_watermark(postgres_source(stack))
        topic = "dbserver1.public.dl_lost"
        admin = AdminClient({"bootstrap.servers": stack["bootstrap.servers"]})
        end = Consumer({"bootstrap.servers": stack["bootstrap.servers"], "group.id": f"end-{uuid.uuid4().hex}"})
        _, high = end.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        end.close()
        for future in admin.delete_records([TopicPartition(topic, 0, high)], request_timeout=30).values():
            future.result()
        # Killed right after the ledger recorded the gap and began the rebuild.
        connector.command[1:3] = ["-m", "tests.support.crash_after_gap"]
        connector.start()
        assert connector.process is not None and connector.process.wait(timeout=600) == -signal.SIGKILL
        connector.command[1:3] = ["-m", "connector"]
        connector.start()
        connector.wait_for(
            "snapshot request",
            lambda t: t.lifecycle.phase == "snapshot-requested" or t.lifecycle.snapshot is not None,
            ids[0],
        )
        with psycopg.connect(stack["postgres"], autocommit=True) as conn:
            for table in DATA_LOSS_TABLES:
                conn.execute(f"UPDATE public.{table} SET v = v || '!' WHERE id > 180")
        wait_for_watermark(postgres_source(stack))
        wait_until_tables_exact(stack["postgres"], tmp_path / "lz", ids)
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()
    state = BatchLedger(LocalStorage(tmp_path / "cp")).state
    gaps = [(g.table, g.topic, g.kind) for g in state.data_gaps]
    assert gaps == [("public.dl_lost", topic, "retention")], state.data_gaps
    assert "data lost at" in (state.tables[ids[0]].lifecycle.reason or "")
    for tid in ids[1:]:
        assert state.tables[tid].lifecycle.phase == Phase.RUNNING
        assert f"table {tid} stopped" not in connector.log()


def end_offset(stack: dict[str, str], topic: str) -> int:
    """The offset partition 0 of ``topic`` gives its next record."""
    from confluent_kafka import TopicPartition

    end = Consumer({"bootstrap.servers": stack["bootstrap.servers"], "group.id": f"end-{uuid.uuid4().hex}"})
    try:
        return int(end.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)[1])
    finally:
        end.close()


def recreate_refilled_past(stack: dict[str, str], conn: psycopg.Connection[Any], table: str, topic: str) -> int:
    """Delete ``topic``, then change ``table`` until Debezium's new log of it reaches past the old one's end.

    Offsets alone then show nothing wrong: only the topic's id (KIP-516) tells the log is another one.
    Returns the old log's end offset.
    """
    from confluent_kafka.admin import AdminClient

    old_end = end_offset(stack, topic)
    admin = AdminClient({"bootstrap.servers": stack["bootstrap.servers"]})
    admin.delete_topics([topic], operation_timeout=60)[topic].result(timeout=60)
    deadline = time.monotonic() + 60
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} still listed a minute after its deletion"
        time.sleep(0.2)
    while True:  # Debezium's next events create the topic again, from offset 0
        conn.execute(f"UPDATE {table} SET v = v || '+' WHERE id <= 150")
        wait_for_watermark(postgres_source(stack))
        if topic in admin.list_topics(timeout=10).topics and end_offset(stack, topic) > old_end:
            return old_end


def test_a_topic_deleted_and_created_again_rebuilds_its_table(stack: dict[str, str], tmp_path: Path) -> None:
    """A table's topic is deleted while the connector is down and Debezium's next changes create it again from
    offset 0, refilled past the old log's end offset (issue 42: offsets alone see nothing): the restart tells the
    new log by its topic id, rebuilds that table through a real incremental snapshot, and the other table publishes
    on; verify finds both exact."""
    ids = ["public.dr_gone", "public.dr_kept"]
    with psycopg.connect(stack["postgres"], autocommit=True) as conn:
        connector = mirrored_then_stopped(stack, tmp_path, conn, ids, r"dbserver1\.public\.dr_.*")
    topic = "dbserver1.public.dr_gone"
    recorded = BatchLedger(LocalStorage(tmp_path / "cp")).state.topic_ids
    assert set(recorded) == {topic, "dbserver1.public.dr_kept"}, recorded
    try:
        with psycopg.connect(stack["postgres"], autocommit=True) as conn:
            old_end = recreate_refilled_past(stack, conn, "public.dr_gone", topic)
            conn.execute("UPDATE public.dr_kept SET v = v || '+' WHERE id <= 20")
        wait_for_watermark(postgres_source(stack))
        assert end_offset(stack, topic) > old_end
        connector.start()
        connector.wait_for(
            "snapshot request",
            lambda t: t.lifecycle.phase == "snapshot-requested" or t.lifecycle.snapshot is not None,
            ids[0],
        )
        wait_for_watermark(postgres_source(stack))
        wait_until_tables_exact(stack["postgres"], tmp_path / "lz", ids)
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()
    state = BatchLedger(LocalStorage(tmp_path / "cp")).state
    assert [(g.table, g.kind) for g in state.data_gaps] == [("public.dr_gone", "recreated")], state.data_gaps
    assert state.tables["public.dr_kept"].lifecycle.phase == Phase.RUNNING
    assert "table public.dr_kept stopped" not in connector.log()
    assert state.topic_ids[topic] != recorded[topic]  # the new log's id, recorded with the gap


# -- a loss found while the query runs (issue 42): healed in-process, the other tables publish on ---------------------

MID_RUN_TABLES = ("mr_recreated", "mr_deleted", "mr_kept")
TRIGGER_S = 1.0  # the Connector's --trigger


class KeptWriter(BackgroundWriter):
    """Updates one table in a thread, steadily, so every micro-batch has records of it."""

    pause_s = 0.01

    def __init__(self, dsn: str, table: str) -> None:
        super().__init__(dsn)
        self.table = table
        self.rng = random.Random(42)

    def write(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"UPDATE {self.table} SET v = %s WHERE id = %s", (uuid.uuid4().hex, self.rng.randint(1, 200)))


def delete_unread_records(stack: dict[str, str], conn: psycopg.Connection[Any], table: str, topic: str) -> None:
    """Changes of ``table`` the (paused) connector has not read, then deleted from its topic (kafka-delete-records)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    conn.execute(f"UPDATE {table} SET v = v || '-' WHERE id <= 150")
    wait_for_watermark(postgres_source(stack))
    admin = AdminClient({"bootstrap.servers": stack["bootstrap.servers"]})
    deleted = admin.delete_records([TopicPartition(topic, 0, end_offset(stack, topic))], request_timeout=30)
    for future in deleted.values():
        future.result()


def batch_seconds(log: str) -> list[float]:
    """Each micro-batch's duration, from the connector's batch lines (``"event": "batch"``)."""
    out = []
    for line in log.splitlines():
        start = line.find('{"event":"batch"')
        if start >= 0:
            out.append(float(orjson.loads(line[start:])["duration_s"]))
    return out


def _snapshot_asked_since(table: TableState, since: float) -> bool:
    """The table's rebuild asked Debezium for its snapshot after ``since`` (waiting for it, or already done)."""
    snapshot = table.lifecycle.snapshot
    return table.lifecycle.phase == "snapshot-requested" or (snapshot is not None and snapshot.sent_at >= since)


def test_a_loss_found_while_the_query_runs_heals_in_process(stack: dict[str, str], tmp_path: Path) -> None:
    """Default settings (the direct reader): while the query runs and lags behind its topics (its processes paused),
    one table's topic is deleted and created again past its old end, and another's unread records are deleted. The
    running query's batches find both (the topic's id, the offsets its tasks read past), record the gaps and rebuild
    exactly those two tables through a real incremental snapshot, in the same process: no exit 2, no restart. The
    third table's files go on meanwhile with no pause longer than two triggers (file times against the batches'
    own durations), and verify finds all three exact."""
    ids = [f"public.{t}" for t in MID_RUN_TABLES]
    recreated, deleted, kept = ids
    config = tmp_path / "config.yaml"
    config.write_text("mirror:\n  rebuild:\n    wait_s: 3\n")
    connector = Connector(stack, tmp_path, config, r"dbserver1\.public\.mr_.*", own_group=True)
    kept_folder = tmp_path / "lz" / "public.schema" / "mr_kept"
    try:
        with psycopg.connect(stack["postgres"], autocommit=True) as conn:
            for tid in ids:
                conn.execute(f"CREATE TABLE {tid} (id int PRIMARY KEY, v text)")
                conn.execute(f"INSERT INTO {tid} SELECT g, 'v' || g FROM generate_series(1, 200) g")
            connector.start()
            for tid in ids:
                connector.wait_for("initial rows", lambda t: t.rows_published >= 200, tid)
            with KeptWriter(stack["postgres"], kept):
                connector.pause()
                delete_unread_records(stack, conn, deleted, "dbserver1.public.mr_deleted")
                recreate_refilled_past(stack, conn, recreated, "dbserver1.public.mr_recreated")
                resumed = time.time()
                connector.pause(signal.SIGCONT)
                for tid in (deleted, recreated):
                    # Requested, or already through it: a small table's snapshot can complete between two looks.
                    connector.wait_for("snapshot request", lambda t: _snapshot_asked_since(t, resumed), tid)
                requested = time.time()
            for tid in ids:
                conn.execute(f"UPDATE {tid} SET v = v || '!' WHERE id > 190")
        wait_for_watermark(postgres_source(stack))
        wait_until_tables_exact(stack["postgres"], tmp_path / "lz", ids)
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()
    log = connector.log()
    state = BatchLedger(LocalStorage(tmp_path / "cp")).state
    assert {(g.table, g.kind) for g in state.data_gaps} == {(deleted, "retention"), (recreated, "recreated")}
    assert f"rebuilding table {deleted}" in log and f"rebuilding table {recreated}" in log
    assert "Traceback" not in log and "KAFKA_DATA_LOSS" not in log and log.count("starting source=") == 1
    assert state.tables[kept].lifecycle.phase == Phase.RUNNING and f"table {kept} stopped" not in log
    # The kept table's files while the two others healed: no pause longer than two triggers of the batches' pace.
    times = sorted(p.stat().st_mtime for p in kept_folder.glob("[0-9]*.parquet"))
    window = [resumed] + [t for t in times if resumed < t <= requested]
    assert len(window) > 2, (resumed, requested, times[-5:])
    longest = max(b - a for a, b in itertools.pairwise(window))
    healing = batch_seconds(log[log.index("Kafka no longer holds") :])  # the batches from the one that healed on
    assert longest <= 2 * (TRIGGER_S + max(healing)), (longest, window, healing)
