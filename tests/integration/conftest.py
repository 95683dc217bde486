"""Fixtures for integration tests against a real single-node Kafka broker.

The broker is started by ``deploy/local/kafka.sh`` (KRaft, ``java -cp``; jars are fetched from
Maven Central on first use) with its state in a fresh temporary directory, once per session.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO_ROOT / "deploy" / "local" / "kafka.sh"

# A cold start includes fetching the broker jars from Maven Central.
START_TIMEOUT_S = 600
STOP_TIMEOUT_S = 90
TOPIC_TIMEOUT_S = 60


def _kafka_sh(command: str, state_dir: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATE_DIR=str(state_dir))
    return subprocess.run(
        ["bash", str(KAFKA_SH), command],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start a broker for the session and return its ``bootstrap.servers`` (``127.0.0.1:PORT``)."""
    state_dir = tmp_path_factory.mktemp("kafka")
    try:
        result = _kafka_sh("start", state_dir, START_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        _kafka_sh("stop", state_dir, STOP_TIMEOUT_S)
        msg = f"kafka.sh start timed out after {START_TIMEOUT_S}s; stderr:\n{exc.stderr!r}"
        raise RuntimeError(msg) from exc
    prefix = "bootstrap.servers="
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or len(lines) != 1 or not lines[0].startswith(prefix):
        _kafka_sh("stop", state_dir, STOP_TIMEOUT_S)
        msg = f"kafka.sh start failed (exit {result.returncode}); stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        raise RuntimeError(msg)
    try:
        yield lines[0][len(prefix) :]
    finally:
        stop = _kafka_sh("stop", state_dir, STOP_TIMEOUT_S)
        if stop.returncode != 0:
            msg = f"kafka.sh stop failed (exit {stop.returncode}); stderr:\n{stop.stderr}"
            raise RuntimeError(msg)


@pytest.fixture(scope="session")
def make_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """Return ``make_topic(name, partitions=1)``: create the topic, wait until usable, return its name.

    An existing topic with the same partition count is accepted.
    """
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})

    def _make_topic(name: str, partitions: int = 1) -> str:
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            operation_timeout=TOPIC_TIMEOUT_S,
            request_timeout=TOPIC_TIMEOUT_S,
        )
        try:
            futures[name].result(timeout=TOPIC_TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise

        deadline = time.monotonic() + TOPIC_TIMEOUT_S
        while True:
            metadata = admin.list_topics(topic=name, timeout=10)
            topic = metadata.topics.get(name)
            if (
                topic is not None
                and topic.error is None
                and len(topic.partitions) == partitions
                and all(p.leader >= 0 and p.error is None for p in topic.partitions.values())
            ):
                return name
            if topic is not None and topic.error is None and len(topic.partitions) > partitions:
                msg = f"topic {name} exists with {len(topic.partitions)} partitions, wanted {partitions}"
                raise RuntimeError(msg)
            if time.monotonic() > deadline:
                msg = f"topic {name} not ready after {TOPIC_TIMEOUT_S}s: {topic!r}"
                raise TimeoutError(msg)
            time.sleep(0.2)

    return _make_topic
