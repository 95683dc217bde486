"""Kafka problems end ``run`` with one ``error:`` line (exit 2), on the real broker and real Spark.

Before: records deleted from under the checkpoint (retention, ``delete_records``) failed the query with a
Spark stack trace that buried the partition and offset (later: the one line after ~780 lines of Spark's ERROR
log; those now go to ``<checkpoint>/logs/spark.log``, which the line names); a client the brokers refuse
showed a JVM trace after Spark had started. A topic pattern that matches nothing is not an error: Debezium
creates topics with its first snapshot.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from connector.config import SourceSettings
from connector.stream.data_loss import LostRange, Partition, check_offsets, read_offsets_log
from tests.integration.test_stream_kafka import connector_args
from tests.support.kafka import REPO_ROOT, produce, run_connector
from tests.support.model import Workload

pytestmark = [pytest.mark.kafka]

PLANTED = "planted-Pw-4b1d"
KAFKA_JARS = REPO_ROOT / ".cache" / "jars" / "kafka"
SASL_START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def sasl_broker(tmp_path: Path) -> Iterator[str]:
    """A real broker whose only client listener is SASL_PLAINTEXT with PLAIN, knowing user ``mirror``.

    deploy/local/kafka.sh starts PLAINTEXT brokers only; this one uses the same jars, KRaft, one node.
    """
    jars = sorted(KAFKA_JARS.glob("*.jar"))
    if not jars:
        pytest.fail(f"no Kafka jars in {KAFKA_JARS}: run deploy/local/fetch-jars.sh kafka")
    state = tmp_path / "sasl-broker"
    state.mkdir()
    port, controller = free_port(), free_port()
    jaas = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" '
        'user_admin="admin-pw" user_mirror="the-right-password";'
    )
    config = state / "server.properties"
    config.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{controller}",
                f"listeners=SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
                f"advertised.listeners=SASL_PLAINTEXT://127.0.0.1:{port}",
                "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=SASL_PLAINTEXT",
                "controller.listener.names=CONTROLLER",
                "sasl.enabled.mechanisms=PLAIN",
                "sasl.mechanism.inter.broker.protocol=PLAIN",
                f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
                f"log.dirs={state / 'data'}",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "",
            ]
        )
    )
    log4j = state / "log4j2.properties"
    log4j.write_text(
        "appender.console.type = Console\nappender.console.name = STDOUT\n"
        "appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %p %m (%c)%n\n"
        "rootLogger.level = INFO\nrootLogger.appenderRef.console.ref = STDOUT\n"
    )
    java = ["java", "-Xmx384m", f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{KAFKA_JARS}/*"]
    log = state / "broker.log"
    with log.open("ab") as sink:
        subprocess.run(
            [*java, "kafka.tools.StorageTool", "format", "-t", str(uuid.uuid4()), "-c", str(config)],
            stdout=sink,
            stderr=sink,
            check=True,
            timeout=SASL_START_TIMEOUT_S,
        )
        broker = subprocess.Popen([*java, "kafka.Kafka", str(config)], stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + SASL_START_TIMEOUT_S
        while "Kafka Server started" not in log.read_text(errors="replace"):
            if broker.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"SASL broker did not start:\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "preflight-test", "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    finally:
        consumer.close()
    return int(high)


@pytest.mark.spark
def test_records_deleted_under_the_checkpoint_name_topic_partition_offset(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    workload = Workload("dataloss", partitions=1)
    topic = make_topic(workload.customers.name, 1)
    make_topic(workload.orders.name, 1)
    produce(kafka_bootstrap, workload.records(200))
    args = connector_args(kafka_bootstrap, "dataloss", tmp_path)
    first = run_connector(*args)
    assert first.returncode == 0, first.stderr[-4000:]

    checkpointed = end_offset(kafka_bootstrap, topic)
    produce(kafka_bootstrap, workload.records(200))
    end = end_offset(kafka_bootstrap, topic)
    assert end > checkpointed + 2
    # What retention does to a lagging consumer: the records the checkpoint reads next are gone.
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, 0, end - 1)], request_timeout=30)
    for future in deleted.values():
        future.result(timeout=30)
    # Found before Spark trips over it, from Spark's own checkpoint: the offsets its last committed batch ended at.
    spark_log = tmp_path / "cp" / "spark"
    committed = max(int(p.name) for p in (spark_log / "commits").iterdir() if p.name.isdigit())
    expected = read_offsets_log((spark_log / "offsets" / str(committed)).read_text())
    assert expected is not None and expected[Partition(topic, 0)] == checkpointed
    check = check_offsets(SourceSettings(bootstrap_servers=kafka_bootstrap), expected)
    assert check.lost == (LostRange(topic, 0, checkpointed, end - 2, "retention", end - 1),)

    second = run_connector(*args)
    assert second.returncode == 2, second.stderr[-4000:]
    lines = second.stderr.splitlines()
    # Spark's reports of the failure (the executor's, the scheduler's, the query's: ~780 lines of JVM stacks and
    # the batch's Python traceback inside them) go to the debug log the error line names; the console has one line.
    errors = error_lines(second.stderr)
    assert len(errors) == 1 and lines[-1] == errors[0], second.stderr[-4000:]
    assert "Traceback" not in second.stderr, second.stderr[-4000:]
    stack = [line for line in lines if line.startswith(("\tat ", "Caused by:")) or " ERROR " in line]
    assert stack == [], second.stderr[-4000:]
    assert f"{topic}[0]@{checkpointed}" in errors[0]
    assert "snapshot" in errors[0] and "retention" in errors[0]
    debug_log = tmp_path / "cp" / "logs" / "spark.log"
    assert errors[0].endswith(f"(stack traces in {debug_log})"), errors[0]
    logged = debug_log.read_text()
    assert "Some data may have been lost" in logged and "\tat org.apache.spark" in logged, logged[-4000:]


def test_brokers_refusing_the_client_is_one_line_before_spark(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    make_topic("refused.public.t", 1)
    config = tmp_path / "sasl.yaml"
    config.write_text(
        "source:\n  kafka_options:\n"
        "    kafka.security.protocol: SASL_PLAINTEXT\n"
        "    kafka.sasl.mechanism: PLAIN\n"
        "    kafka.sasl.jaas.config: >-\n"
        "      org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '      username="mirror" password="${env:PREFLIGHT_PLANTED}";\n'
    )
    args = connector_args(kafka_bootstrap, "refused", tmp_path)
    args[args.index("--config") + 1] = str(config)
    result = run_connector(*args, env={"PREFLIGHT_PLANTED": PLANTED})
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    assert result.returncode == 2, result.stderr[-4000:]
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr
    assert kafka_bootstrap in errors[0] and "sasl.mechanism=PLAIN" in errors[0]
    assert PLANTED not in result.stderr + result.stdout
    assert not (tmp_path / "cp" / "spark").exists()  # refused before Spark started


def test_a_wrong_password_is_one_line_naming_broker_and_mechanism(sasl_broker: str, tmp_path: Path) -> None:
    config = tmp_path / "sasl.yaml"
    config.write_text(
        "source:\n  kafka_options:\n"
        "    kafka.security.protocol: SASL_PLAINTEXT\n"
        "    kafka.sasl.mechanism: PLAIN\n"
        "    kafka.sasl.jaas.config: >-\n"
        "      org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '      username="mirror" password="${env:PREFLIGHT_PLANTED}";\n'
    )
    args = connector_args(sasl_broker, "wrongpw", tmp_path)
    args[args.index("--config") + 1] = str(config)
    result = run_connector(*args, env={"PREFLIGHT_PLANTED": PLANTED})
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    assert result.returncode == 2, result.stderr[-4000:]
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr
    assert sasl_broker in errors[0] and "sasl.mechanism=PLAIN" in errors[0]
    assert "Authentication failed" in errors[0]
    assert PLANTED not in result.stderr + result.stdout
    assert not (tmp_path / "cp" / "spark").exists()


@pytest.mark.spark
def test_a_pattern_that_matches_no_topic_is_a_warning(kafka_bootstrap: str, tmp_path: Path) -> None:
    args = connector_args(kafka_bootstrap, f"nothing-yet-{os.getpid()}", tmp_path)
    result = run_connector(*args)
    assert result.returncode == 0, result.stderr[-4000:]
    assert error_lines(result.stderr) == []
    assert "matches source.topics" in result.stderr
