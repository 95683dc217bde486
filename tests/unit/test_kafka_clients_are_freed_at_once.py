"""Every object of ours that holds a Kafka client is freed by reference counting, never by the cycle collector.

The cycle collector runs in whichever thread happens to allocate, a librdkafka thread serving the Entra token
callback included; if it frees that thread's own client there, librdkafka aborts the whole process
("rd_kafka_destroy() called from librdkafka owned thread"). Seen in CI: an unstarted ``BrokerCheck`` (a thread
targeting its own method, made in ``__init__``) was such a cycle. With the collector off, each holder below must
be gone as soon as its last reference is dropped.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from connector.config import SourceSettings
from connector.kafka.stream_source import KafkaStreamReader, PlanOptions
from connector.operate.health import HealthState
from connector.stream.broker_check import BrokerCheck

#: Nothing listens there: the clients are made (with their librdkafka threads) but never reach a broker.
NOWHERE = "127.0.0.1:1"


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def freed_at_once(make: Callable[[], object]) -> bool:
    holder = make()
    ref = weakref.ref(holder)
    del holder
    return ref() is None


def source() -> SourceSettings:
    return SourceSettings(kind="kafka", bootstrap_servers=NOWHERE, topics="t.*")


@pytest.mark.usefixtures("collector_off")
def test_an_unstarted_broker_check_is_freed_at_once() -> None:
    assert freed_at_once(lambda: BrokerCheck(source(), HealthState(), 30))


@pytest.mark.usefixtures("collector_off")
def test_a_broker_check_that_ran_and_stopped_is_freed_at_once() -> None:
    def ran_and_stopped() -> BrokerCheck:
        check = BrokerCheck(source(), HealthState(), 0.1).start()
        [thread] = [t for t in threading.enumerate() if t.name == "kafka-broker-check"]
        check.stop()
        thread.join(30)
        assert not thread.is_alive()
        return check

    assert freed_at_once(ran_and_stopped)


@pytest.mark.usefixtures("collector_off")
def test_a_stream_reader_with_its_offsets_planner_is_freed_at_once(tmp_path: Path) -> None:
    def reader_that_planned() -> KafkaStreamReader:
        plan = PlanOptions.of({"checkpoint": str(tmp_path), "subscribePattern": "t.*"})
        reader = KafkaStreamReader(plan, {"bootstrap.servers": NOWHERE}, None)
        assert reader._offsets_planner() is reader._offsets_planner()  # the admin client is made and kept
        return reader

    assert freed_at_once(reader_that_planned)
