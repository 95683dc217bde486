"""Dead-letter outputs: the folder writer on both storage backends, config checks, the producer options.

The Kafka writer against a real broker is in tests/integration/test_deadletter_kafka.py.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from connector.collect.poison import DeadLetter, poison_policy
from connector.commands.check_config import check_config_file
from connector.config import ConnectorSettings, DeadLetterSettings, SourceSettings, load_settings
from connector.deadletter.folder import FolderDeadLetterWriter
from connector.deadletter.kafka import KafkaDeadLetterWriter, producer_config
from connector.deadletter.output import check_outside_landing_zone, open_dead_letter_writer
from connector.deadletter.writer import DeadLetterUnavailable
from connector.errors import ConfigError, TransientError
from connector.events import KafkaRecord
from tests.conftest import Landing

TOPIC = "dbserver1.public.orders"


def letter(offset: int, table: str = "public.orders", *, partition: int = 0) -> DeadLetter:
    record = KafkaRecord(
        TOPIC,
        partition,
        offset,
        b"\x00\x00\x00\x00\x01key" if offset % 2 else None,
        b"\xff\xfe not json " + str(offset).encode(),
        (("__debezium.context.taskId", b"0"), ("empty", None)),
        1_700_000_000_000 + offset,
    )
    return DeadLetter.from_record(record, table, f"{record.position}: value is not valid JSON")


def read_lines(data: bytes) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in data.splitlines()]


def test_folder_writer_keeps_raw_records_per_batch_and_table(make_landing: Callable[[], Landing]) -> None:
    output = make_landing()
    writer = FolderDeadLetterWriter(output.storage)
    letters = [letter(9), letter(4), letter(5, "public.items"), letter(2, partition=1)]
    writer.write(17, letters)

    assert output.files() == [
        "public.items/00000000000000000017.jsonl",
        "public.orders/00000000000000000017.jsonl",
    ]
    orders = read_lines(output.storage.read_bytes("public.orders/00000000000000000017.jsonl"))
    assert [(e["partition"], e["offset"]) for e in orders] == [(0, 4), (0, 9), (1, 2)]  # Kafka order
    first = orders[1]
    original = letters[0]
    assert first["topic"] == TOPIC and first["table"] == "public.orders" and first["batch_id"] == 17
    assert first["error"] == original.error and first["timestamp_ms"] == original.timestamp_ms
    assert base64.b64decode(str(first["key"])) == original.key
    assert base64.b64decode(str(first["value"])) == original.value
    assert first["headers"] == [["__debezium.context.taskId", base64.b64encode(b"0").decode()], ["empty", None]]
    assert orders[0]["key"] is None


def test_folder_writer_is_idempotent_for_a_replayed_batch(make_landing: Callable[[], Landing]) -> None:
    output = make_landing()
    writer = FolderDeadLetterWriter(output.storage)
    path = "public.orders/00000000000000000003.jsonl"
    writer.write(3, [letter(1), letter(2)])
    first = output.storage.read_bytes(path)

    writer.write(3, [letter(2), letter(1)])  # Spark replays the batch after a crash
    assert output.storage.read_bytes(path) == first

    writer.write(3, [letter(1), letter(3), letter(2)])  # a replay that saw one more poison record
    offsets = [e["offset"] for e in read_lines(output.storage.read_bytes(path))]
    assert offsets == [1, 2, 3]
    assert output.files() == [path]  # nothing half-written left behind


def test_folder_writer_writes_nothing_for_no_letters(tmp_path: Path) -> None:
    from connector.storage import LocalStorage

    FolderDeadLetterWriter(LocalStorage(tmp_path)).write(1, [])
    assert list(tmp_path.iterdir()) == []


def test_table_names_cannot_escape_the_folder(tmp_path: Path) -> None:
    from connector.storage import LocalStorage

    FolderDeadLetterWriter(LocalStorage(tmp_path / "dl")).write(1, [letter(1, "../../etc/passwd")])
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.jsonl")] == [
        "dl/etc_passwd/00000000000000000001.jsonl"
    ]


# -- where the folder may be ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "landing_zone"),
    [
        ("/data/lz", "/data/lz"),
        ("/data/lz/_deadletter", "/data/lz"),
        ("/data/lz/../lz/x", "/data/lz/"),
        (
            "https://onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Files/LandingZone/_dl",
            "https://onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Files/LandingZone",
        ),
        (
            "abfss://ws@onelake.dfs.fabric.microsoft.com/item.MountedRelationalDatabase/Files/LandingZone/x",
            "https://westeurope-onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Files/LandingZone",
        ),
    ],
)
def test_a_folder_inside_the_landing_zone_is_refused(url: str, landing_zone: str) -> None:
    with pytest.raises(ConfigError, match="inside the landing zone"):
        check_outside_landing_zone(url, landing_zone)


@pytest.mark.parametrize(
    ("url", "landing_zone"),
    [
        ("/data/checkpoint/_deadletter", "/data/lz"),
        ("/data/lz-deadletter", "/data/lz"),
        (
            "https://onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Files/DeadLetters",
            "https://onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Files/LandingZone",
        ),
        ("/data/dl", "https://onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Files/LandingZone"),
    ],
)
def test_a_folder_outside_the_landing_zone_is_accepted(url: str, landing_zone: str) -> None:
    check_outside_landing_zone(url, landing_zone)


def test_open_writer_only_when_a_table_dead_letters(tmp_path: Path) -> None:
    lz, cp = str(tmp_path / "lz"), str(tmp_path / "cp")
    assert open_dead_letter_writer(ConnectorSettings(landing_zone={"url": lz}, checkpoint=cp)) is None

    per_table = ConnectorSettings(
        landing_zone={"url": lz}, checkpoint=cp, mirror={"tables": {TOPIC: {"poison_policy": "dead-letter"}}}
    )
    assert poison_policy(per_table.mirror, TOPIC) == "dead-letter"
    assert poison_policy(per_table.mirror, "dbserver1.public.other") == "stop"
    writer = open_dead_letter_writer(per_table)
    assert isinstance(writer, FolderDeadLetterWriter)
    assert writer.location == str(Path(cp).resolve() / "_deadletter")

    inside = ConnectorSettings(
        landing_zone={"url": lz},
        checkpoint=cp,
        mirror={"poison_policy": "dead-letter"},
        dead_letter={"url": f"{lz}/_deadletter"},
    )
    with pytest.raises(ConfigError, match="inside the landing zone"):
        open_dead_letter_writer(inside)

    kafka = ConnectorSettings(mirror={"poison_policy": "dead-letter"}, dead_letter={"kind": "kafka"})
    with pytest.raises(ConfigError, match="dead_letter.topic"):
        open_dead_letter_writer(kafka)
    kafka = ConnectorSettings(mirror={"poison_policy": "dead-letter"}, dead_letter={"kind": "kafka", "topic": "dlq"})
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        open_dead_letter_writer(kafka)


def test_check_config_accepts_the_dead_letter_keys(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "mirror:\n  poison_policy: dead-letter\n  tables:\n    dbserver1.public.orders:\n      poison_policy: stop\n"
        "dead_letter:\n  kind: kafka\n  topic: cdc.deadletter\n  bootstrap_servers: k:9092\n"
    )
    assert check_config_file(str(config)) == []
    settings = load_settings(str(config))
    assert poison_policy(settings.mirror, TOPIC) == "stop"
    assert poison_policy(settings.mirror, "dbserver1.public.items") == "dead-letter"
    bad = tmp_path / "bad.yaml"
    bad.write_text("mirror:\n  poison_policy: ignore\ndead_letter:\n  kind: s3\n")
    problems = check_config_file(str(bad))
    assert any("mirror.poison_policy" in p for p in problems) and any("dead_letter.kind" in p for p in problems)


# -- the Kafka producer's options ----------------------------------------------------------------------


def test_producer_options_reuse_the_source_security_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_PASSWORD", "pw-from-env")
    source = SourceSettings(
        kind="kafka",
        bootstrap_servers="b:9093",
        kafka_options={
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="mirror" password="${env:KAFKA_PASSWORD}";',
            "kafka.ssl.truststore.location": "/etc/kafka/truststore.jks",
            "kafka.ssl.ca.location": "/etc/kafka/ca.pem",
        },
    )
    options = producer_config(source, DeadLetterSettings(producer_options={"linger.ms": "5"}), "b:9093")
    assert options["security.protocol"] == "SASL_SSL" and options["sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["sasl.username"] == "mirror" and options["sasl.password"] == "pw-from-env"
    assert options["ssl.ca.location"] == "/etc/kafka/ca.pem" and "ssl.truststore.location" not in options
    assert options["enable.idempotence"] is True and options["acks"] == "all" and options["linger.ms"] == "5"
    writer = KafkaDeadLetterWriter("dlq", options, 5)
    assert "pw-from-env" not in str(writer.redacted_config()) and "pw-from-env" not in writer.location


def test_an_unreachable_dead_letter_broker_is_transient() -> None:
    """No broker listens on the port: delivery times out, the batch fails and will be replayed."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = producer_config(SourceSettings(), DeadLetterSettings(delivery_timeout_s=1), f"127.0.0.1:{port}")
    writer = KafkaDeadLetterWriter("dlq", options, 1)
    with pytest.raises(DeadLetterUnavailable) as info:
        writer.write(1, [letter(1)])
    assert isinstance(info.value, TransientError) and "dlq" in str(info.value)
    writer.close()


def test_the_dead_letter_counter_is_per_table() -> None:
    from prometheus_client import generate_latest

    from connector.operate.metrics import DEAD_LETTERS, REGISTRY

    DEAD_LETTERS.labels("public.orders").inc(2)
    assert 'cdc_mirror_dead_letters_total{table="public.orders"}' in generate_latest(REGISTRY).decode()
