"""A task's Kafka read: what it keeps of what librdkafka delivers, and a broker that never answers.

(The reads themselves run against a real broker in ``tests/integration/test_kafka_read.py``.)
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from connector.collect import kafka_read
from connector.collect.kafka_read import _RangeRead, close_consumers, read_ranges
from connector.collect.kafka_spec import KafkaRange, KafkaReadSpec
from connector.errors import TransientError
from connector.spark.source import DIRECT_READ_DEFAULTS


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield port
    close_consumers()


def test_a_read_no_broker_answers_fails_transiently_naming_its_partitions(closed_port: int) -> None:
    options = {**DIRECT_READ_DEFAULTS, "bootstrap.servers": f"127.0.0.1:{closed_port}", "log_level": "0"}
    spec = KafkaReadSpec(tuple(sorted(options.items())), stall_timeout_s=1.5)
    with pytest.raises(TransientError, match=r"stalled for 1.5 s; still waiting on orders-0 \(up to offset 10\)"):
        read_ranges(spec, [KafkaRange("orders", 0, 0, 10)])


def _delivered(rows: list[tuple[str, int, int]]) -> pa.Table:
    return pa.table(
        {
            "topic": pa.array([t for t, _, _ in rows], pa.string()),
            "partition": pa.array([p for _, p, _ in rows], pa.int32()),
            "offset": pa.array([o for _, _, o in rows], pa.int64()),
            "key": pa.array([None] * len(rows), pa.binary()),
            "value": pa.array([f"{t}-{p}@{o}".encode() for t, p, o in rows], pa.binary()),
        }
    )


def test_only_offsets_inside_each_range_are_kept_whatever_librdkafka_delivers() -> None:
    """Runs per partition, stale offsets of a previous assignment, records prefetched past a range's end."""
    reading = _RangeRead(KafkaReadSpec(()), [KafkaRange("a", 0, 5, 10), KafkaRange("b", 1, 0, 100)])
    reading._keep_in_range(_delivered([("a", 0, o) for o in (2, 3, 5, 6)] + [("b", 1, 0), ("b", 1, 1), ("c", 0, 9)]))
    reading._keep_in_range(_delivered([("a", 0, o) for o in (6, 7, 8, 9, 10, 11)] + [("b", 1, 2)]))
    reading._keep_in_range(_delivered([("a", 0, 12)]))  # the range is done: ignored
    table = reading.table()
    by_partition = {
        key: [
            o
            for t, p, o in zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True)
            if (t, p) == key
        ]
        for key in (("a", 0), ("b", 1))
    }
    assert by_partition == {("a", 0): [5, 6, 7, 8, 9], ("b", 1): [0, 1, 2]}
    assert table.num_rows == 8
    assert reading.open == {("b", 1): 100}  # a-0 reached its end offset; b-1 waits for more


def _authentication_event(code: int, text: str) -> Message:
    return Message(topic="orders", partition=0, error=KafkaError(code, text))


SASL_STATE = "SASL OAUTHBEARER mechanism handshake failed: Request not valid in current SASL state"


def test_a_local_authentication_failure_is_waited_out_then_fails_the_read_after_its_grace(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """librdkafka authenticates again after a re-authentication the broker turned down under load (issue 54's CI)."""
    clock = [1000.0]
    monkeypatch.setattr(kafka_read.time, "monotonic", lambda: clock[0])
    reading = _RangeRead(KafkaReadSpec(()), [KafkaRange("orders", 0, 0, 10)])
    event = _authentication_event(KafkaError._AUTHENTICATION, SASL_STATE)
    reading._event(None, event, event.error())  # type: ignore[arg-type] - this path never touches the consumer
    clock[0] += kafka_read._AUTHENTICATION_GRACE_S - 1
    reading._event(None, event, event.error())  # type: ignore[arg-type]
    assert "authenticating again" in caplog.text and SASL_STATE in caplog.text
    clock[0] += 1
    with pytest.raises(KafkaException, match="not valid in current SASL state"):
        reading._event(None, event, event.error())  # type: ignore[arg-type]


def test_records_read_between_authentication_failures_start_their_grace_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(kafka_read.time, "monotonic", lambda: clock[0])
    reading = _RangeRead(KafkaReadSpec(()), [KafkaRange("orders", 0, 0, 10)])
    event = _authentication_event(KafkaError._AUTHENTICATION, SASL_STATE)
    reading._event(None, event, event.error())  # type: ignore[arg-type]
    clock[0] += kafka_read._AUTHENTICATION_GRACE_S + 5

    class OneRecordThenDone:
        """A consumer handing over one record of the range (the read progressed), then the range's end."""

        def __init__(self) -> None:
            self.calls = 0

        def consume(self, _count: int, _timeout: float) -> list[Message]:
            self.calls += 1
            if self.calls == 1:
                return [Message(topic="orders", partition=0, offset=0, value=b"v")]
            reading.open.clear()  # the range is done
            return []

    reading.run(OneRecordThenDone())  # type: ignore[arg-type]
    assert reading.authentication_failing_since is None
    reading._event(None, event, event.error())  # type: ignore[arg-type] - a new failure: a new grace, no raise


def test_a_broker_s_refusal_fails_the_read_at_once() -> None:
    reading = _RangeRead(KafkaReadSpec(()), [KafkaRange("orders", 0, 0, 10)])
    for code in (KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED):
        event = _authentication_event(code, "refused")
        with pytest.raises(KafkaException):
            reading._event(None, event, event.error())  # type: ignore[arg-type]
