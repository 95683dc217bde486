"""Kafka problems on the real broker and real Spark: healed per table, or one ``error:`` line (exit 2).

Before: records deleted from under the checkpoint (retention, ``delete_records``) failed the query with a
Spark stack trace that buried the partition and offset (later: the one line after ~780 lines of Spark's ERROR
log; those now go to ``<checkpoint>/logs/spark.log``), and every table stopped; now the tables those records
belonged to are rebuilt and the others publish on (``mirror.on_data_lost``). A client the brokers refuse
showed a JVM trace after Spark had started. A topic pattern that matches nothing is not an error: Debezium
creates topics with its first snapshot.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from connector.config import SourceSettings
from connector.debezium_control.snapshot_signal import signal_value
from connector.events import KafkaRecord
from connector.healing.data_loss import LostRange, Partition, check_offsets, read_offsets_log
from connector.publish.ledger import BatchLedger
from connector.publish.lifecycle import Lifecycle, Phase
from connector.readback.replay import replay_landing_zone
from connector.readback.validate import validate_landing_zone
from connector.storage.local import LocalStorage
from tests.integration.test_stream_kafka import connector_args
from tests.support.debezium import Topic, field
from tests.support.kafka import produce, run_connector
from tests.support.model import Workload, replayed_rows
from tests.support.oauth_kafka import BrokerDidNotStart, free_port, running_broker

pytestmark = [pytest.mark.kafka]

PLANTED = "planted-Pw-4b1d"


@pytest.fixture
def sasl_broker(tmp_path: Path) -> Iterator[str]:
    """A real broker whose only client listener is SASL_PLAINTEXT with PLAIN, knowing user ``mirror``.

    deploy/local/kafka.sh starts PLAINTEXT brokers only; this one uses the same jars, KRaft, one node.
    """
    state = tmp_path / "sasl-broker"
    port, controller = free_port(), free_port()
    jaas = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" '
        'user_admin="admin-pw" user_mirror="the-right-password";'
    )
    config = "\n".join(
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
    try:
        with running_broker(state, config):
            yield f"127.0.0.1:{port}"
    except BrokerDidNotStart as exc:
        pytest.fail(f"SASL {exc}")


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "preflight-test", "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    finally:
        consumer.close()
    return int(high)


ITEM_COLUMNS = [field("id", "int32", optional=False), field("name", "string")]


def item_records(items: Topic, ids: range) -> list[KafkaRecord]:
    return [items.record("c", None, {"id": i, "name": f"item-{i}"}, partition=0) for i in ids]


def delete_up_to(bootstrap: str, topic: str, offset: int) -> None:
    """What retention does to a lagging consumer: every record before ``offset`` is gone."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=30).values():
        future.result(timeout=30)


def signals(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every (key, value) in the signal topic, read from the start."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"signals-{uuid.uuid4()}", "enable.auto.commit": False}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[bytes, bytes]] = []
        while len(out) < high:
            message = consumer.poll(30)
            assert message is not None and message.error() is None, message and message.error()
            out.append((message.key(), message.value()))
        return out
    finally:
        consumer.close()


@pytest.mark.spark
def test_records_lost_under_the_checkpoint_rebuild_their_table_only(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Issue 32 on the real broker and real Spark: three tables, one partition's unread records deleted.

    ``on_data_lost: stop`` ends with one line naming topic, partition and offsets; the default rebuilds that table
    only, also when the connector is SIGKILLed right after recording the gap, and the other two publish on.
    """
    workload = Workload("dataloss", partitions=1)
    topic = make_topic(workload.customers.name, 1)
    make_topic(workload.orders.name, 1)
    items = Topic("dataloss.public.items", ITEM_COLUMNS, ["id"])
    make_topic(items.name, 1)
    # Named apart from the table topics: Spark's subscribePattern also takes "dataloss-signal" for the pattern.
    signal_topic = make_topic("dl-signals", 1)
    produce(kafka_bootstrap, [*workload.records(200), *item_records(items, range(1, 51))])
    args = connector_args(kafka_bootstrap, "dataloss", tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"mirror:\n  max_rows_per_file: 400\n  rebuild:\n    wait_s: 0\n    signal_topic: {signal_topic}\n"
    )
    first = run_connector(*args)
    assert first.returncode == 0, first.stderr[-4000:]

    checkpointed = end_offset(kafka_bootstrap, topic)
    produce(kafka_bootstrap, [*workload.records(200), *item_records(items, range(51, 81))])
    end = end_offset(kafka_bootstrap, topic)
    assert end > checkpointed + 2
    delete_up_to(kafka_bootstrap, topic, end - 1)
    # Found before Spark trips over it, from Spark's own checkpoint: the offsets its last committed batch ended at.
    spark_log = tmp_path / "cp" / "spark"
    committed = max(int(p.name) for p in (spark_log / "commits").iterdir() if p.name.isdigit())
    expected = read_offsets_log((spark_log / "offsets" / str(committed)).read_text())
    assert expected is not None and expected[Partition(topic, 0)] == checkpointed
    check = check_offsets(SourceSettings(bootstrap_servers=kafka_bootstrap), expected)
    assert check.lost == (LostRange(topic, 0, checkpointed, end - 2, "retention", end - 1),)
    lost_at = f"{topic}[0]@{checkpointed}..{end - 2}"

    # on_data_lost: stop, today's behaviour: one error line naming topic, partition and offsets, exit 2, before Spark.
    stop_config = tmp_path / "stop.yaml"
    stop_config.write_text("mirror:\n  max_rows_per_file: 400\n  on_data_lost: stop\n")
    stop_args = [*args]
    stop_args[stop_args.index("--config") + 1] = str(stop_config)
    stop = run_connector(*stop_args)
    assert stop.returncode == 2, stop.stderr[-4000:]
    errors = error_lines(stop.stderr)
    assert len(errors) == 1 and stop.stderr.splitlines()[-1] == errors[0], stop.stderr[-4000:]
    assert "Traceback" not in stop.stderr and "\tat " not in stop.stderr, stop.stderr[-4000:]
    assert f"{lost_at} (retention, table public.customers)" in errors[0]
    assert "snapshot" in errors[0] and "retention.ms" in errors[0]
    assert (spark_log / "commits" / str(committed)).exists()  # nothing moved
    shown = run_connector("tables", "--checkpoint", str(tmp_path / "cp"))
    assert shown.stdout.splitlines()[0].startswith("job: stopped "), shown.stdout
    assert f"Kafka data lost at {lost_at}" in shown.stdout.splitlines()[0]
    assert "state=running" in shown.stdout and "rebuilding" not in shown.stdout

    # The default, killed right after the gap and its rebuild were committed, before Spark moved past it.
    killed = run_connector(*args, wrapper="tests.support.crash_after_gap")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-4000:]
    ledger = BatchLedger(LocalStorage(tmp_path / "cp")).state
    assert ledger.tables["public.customers"].lifecycle.phase is Phase.DELETING
    assert (spark_log / "commits" / str(committed)).exists()

    healed = run_connector(*args)
    assert healed.returncode == 0, healed.stderr[-4000:]
    assert error_lines(healed.stderr) == [], healed.stderr[-4000:]
    ledger = BatchLedger(LocalStorage(tmp_path / "cp")).state
    assert [(g.table, g.topic, g.partition, g.first, g.last, g.kind) for g in ledger.data_gaps] == [
        ("public.customers", topic, 0, checkpointed, end - 2, "retention")
    ]
    customers = ledger.tables["public.customers"].lifecycle
    assert customers.phase in {Phase.DELETING, Phase.WAITING, Phase.SNAPSHOT_REQUESTED}
    assert customers.reason == f"data lost at {lost_at}"
    # Debezium is asked (once: the killed run died before the rebuild moved) to re-read exactly that table.
    # The signal carries an id of its own (Debezium's notifications name it: the rebuild follows its snapshot).
    ((key, value),) = signals(kafka_bootstrap, signal_topic)
    sent = orjson.loads(value)
    assert sent.pop("id")
    assert (key, sent) == (b"dataloss", orjson.loads(signal_value("public.customers")))
    # The other tables published what they had in Kafka, and were never stopped.
    landing = LocalStorage(tmp_path / "lz")
    assert [str(p) for p in validate_landing_zone(landing)] == []
    replayed = replayed_rows(replay_landing_zone(landing))
    assert replayed["sales.orders"] == workload.expected()["sales.orders"]
    assert replayed["public.items"] == [{"id": i, "name": f"item-{i}"} for i in range(1, 81)]
    for other in ("sales.orders", "public.items"):
        assert ledger.tables[other].lifecycle == Lifecycle(), ledger.tables[other].lifecycle
    assert "table stopped" not in healed.stderr
    shown = run_connector("tables", "--checkpoint", str(tmp_path / "cp"))
    customers_line = next(line for line in shown.stdout.splitlines() if line.startswith("public.customers"))
    assert f"data lost at {lost_at}" in customers_line, shown.stdout


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
