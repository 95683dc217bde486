"""A broker outage turns /readyz unready (real broker of its own, stopped mid-run; real Spark).

Spark's Kafka source waits through an outage without failing or reporting progress, so before the
broker check /readyz stayed 200 for as long as the outage lasted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import START_TIMEOUT_S, STOP_TIMEOUT_S, _kafka_sh
from tests.integration.test_graceful_stop import GRACE_PERIOD_S, committed_batch
from tests.integration.test_secrets import free_port
from tests.integration.test_stream_kafka import connector_args
from tests.support.kafka import REPO_ROOT, produce
from tests.support.model import Workload

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A broker only this test uses (it gets stopped mid-test); yields (bootstrap, state dir)."""
    state = tmp_path / "broker"
    state.mkdir()
    started = _kafka_sh("start", state, START_TIMEOUT_S)
    assert started.returncode == 0, started.stderr
    try:
        yield started.stdout.strip().split("=", 1)[1], state
    finally:
        _kafka_sh("stop", state, STOP_TIMEOUT_S)


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def wait_for(condition: object, what: str, log: Path, limit_s: float = 180) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen in {limit_s:.0f}s:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)


def test_broker_outage_turns_readyz_unready(own_broker: tuple[str, Path], tmp_path: Path) -> None:
    bootstrap, state = own_broker
    workload = Workload("outage", partitions=1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic in (workload.customers.name, workload.orders.name):
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(60)
    produce(bootstrap, workload.records(500))
    args = connector_args(bootstrap, "outage", tmp_path)
    # The stop during the outage waits out Spark's stop timeout (30 s by default): a user's shorter one is used.
    (tmp_path / "config.yaml").write_text(
        "mirror:\n  max_rows_per_file: 400\nspark:\n  conf:\n    spark.sql.streaming.stopTimeout: '5000'\n"
    )
    port = free_port()
    args[args.index("--trigger") + 1] = "2s"
    args[args.index("--metrics-port") + 1] = str(port)
    log = tmp_path / "run.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "connector", *args],
            cwd=REPO_ROOT,
            stderr=sink,
            env={**os.environ, "CONNECTOR_METRICS__BROKER_CHECK_S": "1"},
        )
    try:
        wait_for(lambda: committed_batch(tmp_path / "cp") >= 0, "a committed batch", log)
        wait_for(lambda: readyz(port)[0] == 200, "/readyz 200", log)
        stopped = _kafka_sh("stop", state, STOP_TIMEOUT_S)
        assert stopped.returncode == 0, stopped.stderr
        wait_for(lambda: readyz(port)[0] == 503, "/readyz 503 during the outage", log)
        status, reason = readyz(port)
        assert status == 503 and reason.startswith("kafka unreachable"), reason
        assert "unreachable" in log.read_text()
        # A short outage (a broker restart, a leader election) does not end the job: its planner waits for the
        # brokers about two minutes before it gives up (it used to give up after three attempts in 2 s).
        time.sleep(8)
        assert process.poll() is None, log.read_text()[-4000:]
        assert readyz(port)[0] == 503
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=GRACE_PERIOD_S)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"not stopped within the grace period during the outage:\n{log.read_text()[-4000:]}")
    # A stop during the outage is still clean: the query is left after its stop timeout, nothing is in flight.
    assert process.returncode == 0, log.read_text()[-4000:]
