"""A task's Kafka read when no broker answers: it waits, then fails transiently naming what it waited for.

(The reads themselves run against a real broker in ``tests/integration/test_kafka_read.py``.)
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from connector.collect.kafka_read import KafkaRange, KafkaReadSpec, close_consumers, read_ranges
from connector.errors import TransientError
from connector.stream.source import DIRECT_READ_DEFAULTS


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
