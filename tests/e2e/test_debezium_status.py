"""The Debezium connectors' status read from the stack's real Kafka Connect worker, as metrics and log lines.

A Debezium connector is registered beside the stack's own with a logical decoding plugin the Postgres server
does not have (``decoderbufs``): Connect accepts the config, and its task fails when it creates its
replication slot, as a task fails on a lost slot or a purged binlog. The poller must report that task
FAILED with Connect's reason, the stack's own connector up, a configured name Connect does not list as not
registered, and keep the last known values while Connect does not answer.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest

from connector.debezium_control.debezium_status_poller import DebeziumStatusPoller
from connector.operate import metrics
from connector.operate.debezium_status import FAILED, UNREGISTERED, DebeziumConnectorStatus
from tests.support.kafka_connect import connect_request

pytestmark = pytest.mark.e2e

WAIT_S = 120.0


@pytest.fixture
def failing_connector(shared_stack: dict[str, str]) -> Iterator[str]:
    """A Postgres connector whose task fails at start (no such decoding plugin); deleted afterwards."""
    suffix = uuid.uuid4().hex[:8]
    name = f"e2e-failing-{suffix}"
    conninfo = psycopg.conninfo.conninfo_to_dict(shared_stack["postgres"])
    config = {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": str(conninfo.get("host", "127.0.0.1")),
        "database.port": str(conninfo.get("port", 5432)),
        "database.user": str(conninfo["user"]),
        "database.password": str(conninfo.get("password", "")),
        "database.dbname": str(conninfo["dbname"]),
        "topic.prefix": f"failing{suffix}",
        "plugin.name": "decoderbufs",
        "slot.name": f"failing_{suffix}",
        "table.include.list": "public.nothing_here",
        "snapshot.mode": "no_data",
    }
    status = connect_request("PUT", f"{shared_stack['connect']}/connectors/{name}/config", config)
    assert status in (200, 201), f"registering {name}: HTTP {status}"
    try:
        yield name
    finally:
        connect_request("DELETE", f"{shared_stack['connect']}/connectors/{name}", missing_ok=True)


def _poll_until(
    poller: DebeziumStatusPoller, done: Callable[[dict[str, DebeziumConnectorStatus]], bool]
) -> dict[str, DebeziumConnectorStatus]:
    """Read until ``done`` holds (Connect starts connectors and tasks asynchronously); the last read."""
    deadline = time.monotonic() + WAIT_S
    while True:
        statuses = poller.poll_once()
        assert statuses is not None, "Kafka Connect did not answer"
        if done(statuses):
            return statuses
        assert time.monotonic() < deadline, f"not within {WAIT_S}s: {statuses}"
        time.sleep(0.5)


def _sample(name: str, connector: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, {"connector": connector})


def test_a_failed_task_is_reported_with_connects_reason(
    shared_stack: dict[str, str], failing_connector: str, caplog: pytest.LogCaptureFixture
) -> None:
    ours, failing, unknown = shared_stack["connector"], failing_connector, f"never-registered-{uuid.uuid4().hex[:6]}"
    poller = DebeziumStatusPoller(shared_stack["connect"], [ours, failing, unknown], interval_s=60)
    with caplog.at_level(logging.INFO, logger="connector.debezium_control.debezium_status_poller"):
        # the task starts, then fails, asynchronously
        statuses = _poll_until(poller, lambda found: found[failing].failed > 0)
    assert statuses[failing].failed == 1, statuses[failing]

    assert statuses[ours].up and statuses[ours].problem() is None, statuses[ours]
    assert _sample("cdc_mirror_debezium_up", ours) == 1
    assert _sample("cdc_mirror_debezium_failed", ours) == 0

    failed = statuses[failing]
    assert not failed.up
    assert [t.state for t in failed.tasks] == [FAILED], failed
    problem = failed.problem()
    assert problem is not None and problem.startswith("task 0 FAILED on "), problem
    assert "decoderbufs" in problem, problem  # Connect's reason: the plugin the server does not have
    assert _sample("cdc_mirror_debezium_up", failing) == 0
    assert _sample("cdc_mirror_debezium_failed", failing) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(f"Debezium connector {failing} sends no changes: task 0 FAILED on " in m for m in errors), errors
    assert not any(f"Debezium connector {ours} " in m for m in errors), errors

    assert statuses[unknown].instance.state == UNREGISTERED
    assert statuses[unknown].problem() == "not registered on Kafka Connect"
    assert _sample("cdc_mirror_debezium_up", unknown) == 0
    assert metrics.REGISTRY.get_sample_value("cdc_mirror_debezium_status_readable") == 1

    # Connect not answering: the read says so once, and the FAILED task stays visible (and alerting).
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    gone = DebeziumStatusPoller(f"http://127.0.0.1:{closed}", [failing], interval_s=60)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="connector.debezium_control.debezium_status_poller"):
        assert gone.poll_once() is None
        assert gone.poll_once() is None
    unread = [r.getMessage() for r in caplog.records if "status not read" in r.getMessage()]
    assert len(unread) == 1 and f"http://127.0.0.1:{closed}/connectors?expand=status" in unread[0], unread
    assert metrics.REGISTRY.get_sample_value("cdc_mirror_debezium_status_readable") == 0
    assert _sample("cdc_mirror_debezium_failed", failing) == 1


def test_a_deleted_connector_is_reported_not_registered(
    shared_stack: dict[str, str], failing_connector: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every registered connector is watched when none is named; one deleted meanwhile leaves the listing."""
    poller = DebeziumStatusPoller(shared_stack["connect"], [], interval_s=60)
    statuses = _poll_until(poller, lambda found: failing_connector in found)  # listed once Connect knows its state
    assert shared_stack["connector"] in statuses, statuses
    connect_request("DELETE", f"{shared_stack['connect']}/connectors/{failing_connector}")
    named = DebeziumStatusPoller(shared_stack["connect"], [failing_connector], interval_s=60)
    with caplog.at_level(logging.ERROR, logger="connector.debezium_control.debezium_status_poller"):
        after = named.poll_once()
    assert after is not None and after[failing_connector].instance.state == UNREGISTERED, after
    assert f"Debezium connector {failing_connector} sends no changes: not registered on Kafka Connect" in caplog.text
    assert failing_connector not in (poller.poll_once() or {})  # the unnamed listing drops it, and its series
    assert _sample("cdc_mirror_debezium_up", failing_connector) is None
    assert _sample("cdc_mirror_debezium_up", shared_stack["connector"]) == 1
